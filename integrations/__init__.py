"""Adapters for serving stacks: transformers and vLLM."""
