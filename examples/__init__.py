"""Example constraints for `pushmask generate` (installed as `pushmask.examples`, so the commands
its --help shows work from a wheel too)."""
