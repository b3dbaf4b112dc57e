"""What transformers calls a model's key/value cache, in arguments and outputs alike.

transformers 5 renamed `past_key_values` to `cache` (the old name warns on every call, which
`pushmask generate` would print into the middle of its streamed output); older versions know only
`past_key_values`.
"""

from __future__ import annotations

from ..core.caches import memoized


@memoized(1, name="transformers' name of the key/value cache argument (samplers/kv_cache.py)", table=True)
def kv_cache_name() -> str:
    """`cache` where transformers' model outputs have that field, else `past_key_values`."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"
