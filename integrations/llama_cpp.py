"""llama-cpp-python integration: a `LogitsProcessor` that keeps `Llama` generation inside a grammar.

    from llama_cpp import Llama, LogitsProcessorList
    import pushmask as pm
    from pushmask.integrations.llama_cpp import GrammarLogitsProcessor, tokenizer_info_from_llama

    llm = Llama(model_path="model.gguf")
    compiled = pm.GrammarCompiler(tokenizer_info_from_llama(llm)).compile_json_schema(schema)
    out = llm(prompt, logits_processor=LogitsProcessorList([GrammarLogitsProcessor(compiled)]),
              max_tokens=200)

llama-cpp-python calls a logits processor as ``processor(input_ids, scores) -> scores`` with
1-D numpy arrays: every token so far (prompt, then generated) and the next token's logits.  The
first call of a generation sees the prompt alone; the tokens after it are the output, which the
matcher follows (rolling back where a new call diverges, as in the transformers adapter).
llama_cpp itself is not imported here: the adapter works on the arrays it is handed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable

import numpy as np

from ..masks.bitmask import apply_token_bitmask_inplace
from ..masks.compiler import CompiledGrammar
from ..masks.matcher import GrammarMatcher
from ..masks.vocab import TokenizerInfo
from .transformers import _Slot

__all__ = ["GrammarLogitsProcessor", "tokenizer_info_from_llama"]


class GrammarLogitsProcessor:
    """Masks llama-cpp-python's scores so the output stays inside `compiled_grammar`.

    stop_token_ids: the tokens that end generation (default: the tokenizer info's stop tokens;
    pass ``[llm.token_eos()]`` so the grammar ends exactly where llama.cpp stops).  A new
    generation is detected when input_ids no longer start with the prompt of the previous
    one; call reset() to start over explicitly.
    """

    def __init__(
        self,
        compiled_grammar: CompiledGrammar,
        *,
        stop_token_ids: Iterable[int] | None = None,
        max_tokens: int | None = None,
    ):
        self.compiled_grammar = compiled_grammar
        self.matcher = GrammarMatcher(compiled_grammar, override_stop_tokens=stop_token_ids, max_tokens=max_tokens)
        self._bitmask = np.zeros((1, (self.matcher.vocab_size + 31) // 32), dtype=np.int32)
        self.reset()

    def reset(self) -> None:
        """Forget the current generation (the next call's input_ids are a new prompt)."""
        self.matcher.reset()
        self._slot = _Slot(0, self.matcher)
        self._prompt: np.ndarray | None = None

    @property
    def generated(self) -> list[int]:
        """The output tokens the matcher has accepted so far."""
        return list(self._slot.fed)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        input_ids = np.asarray(input_ids).reshape(-1)
        prompt = self._prompt
        if prompt is None or len(input_ids) < len(prompt) or not np.array_equal(input_ids[: len(prompt)], prompt):
            self.reset()
            self._prompt = prompt = input_ids.copy()
        self._slot.sync(input_ids[len(prompt) :])
        if self._slot.dead:  # a token the grammar refuses was sampled anyway: the output may only stop
            self._bitmask[:] = 0
            for t in self.matcher.stop_token_ids:
                self._bitmask[0, t >> 5] |= np.int32(1) << np.int32(t & 31)
        else:
            self.matcher.fill_next_token_bitmask(self._bitmask, 0)
        apply_token_bitmask_inplace(scores, self._bitmask[0], vocab_size=self.matcher.vocab_size)
        return scores


def tokenizer_info_from_llama(llm, *, stop_token_ids: Iterable[int] | None = None) -> TokenizerInfo:
    """The vocabulary of a `llama_cpp.Llama`: each token's bytes as llama.cpp writes them; control
    tokens (text only with special=True) are special.  Stop tokens default to llm.token_eos()."""
    n_vocab = llm.n_vocab()
    tokens, specials = [], []
    for token_id in range(n_vocab):
        text = _token_piece(llm, token_id, special=False)
        if not text and _token_piece(llm, token_id, special=True):
            specials.append(token_id)
        tokens.append(text)
    stops = list(stop_token_ids) if stop_token_ids is not None else [llm.token_eos()]
    return TokenizerInfo(tokens, vocab_type="raw", vocab_size=n_vocab, stop_token_ids=stops, special_token_ids=specials)


def _token_piece(llm, token_id: int, special: bool) -> bytes:
    """The bytes of one token.  `Llama.detokenize` reads each piece into a 32-byte buffer and
    returns nothing for longer tokens (SmolLM2 has 47 runs of spaces or dashes past 32 bytes), so
    ask llama.cpp directly, growing the buffer to the size it reports."""
    import llama_cpp

    vocab = getattr(getattr(llm, "_model", None), "vocab", None)
    if vocab is None:  # another llama-cpp-python layout: its own (size-limited) reading
        return bytes(llm.detokenize([token_id], special=special))
    size = 64
    while True:
        buffer = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, token_id, buffer, size, 0, special)
        if 0 <= n <= size:
            return buffer.raw[:n]
        size = abs(n)  # llama.cpp returns minus the size it needs
