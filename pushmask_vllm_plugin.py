"""vLLM's ``vllm.general_plugins`` entry point for pushmask, kept outside the ``pushmask``
package so that a vLLM process without ``PUSHMASK_VLLM=1`` imports nothing of pushmask (no
numba, no compile machinery): vLLM calls this in every process it starts."""

from __future__ import annotations

import os

ENV_ENABLE = "PUSHMASK_VLLM"


def enabled() -> bool:
    return os.environ.get(ENV_ENABLE, "").strip().lower() in ("1", "true", "yes", "on")


def register() -> None:
    """Route vLLM's ``xgrammar`` structured-output backend to pushmask when PUSHMASK_VLLM=1."""
    if not enabled():
        return
    from pushmask.integrations.vllm import register as register_backend

    register_backend()
