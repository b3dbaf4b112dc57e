"""`python -m pushmask ...` runs the pushmask command line."""

import sys

from pushmask.cli import main

sys.exit(main())
