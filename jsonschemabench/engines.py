"""Engine adapters: one small interface over pushmask, llguidance, XGrammar and outlines-core.

Every engine is driven through the same protocol (see `protocol.py`), so the adapters only
translate: `Engine.compile(schema) -> Session`, then `Session.fill_mask()` computes the full
next-token mask, `Session.accept(token)` commits a token if (and only if) the mask allows it,
`Session.can_end()` says whether the output may stop here, `Session.reset()` starts over.

Engines are looked up by name in a registry so tests and users can add their own
(`register_engine`), or given as "module:attribute" to import a factory from anywhere.
A factory is called as `factory(hf_tokenizer)` and returns an `Engine`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

import numpy as np


class EngineUnavailableError(RuntimeError):
    """The engine's package is not installed (install the `pushmask[bench]` extra)."""


class CompileError(RuntimeError):
    """An engine refused a schema; the message is the engine's own error text."""


class Session:
    """One matcher state over a compiled schema. Subclasses implement the four methods."""

    def fill_mask(self) -> None:
        """Compute the full next-token mask for the current state and keep it for `accept`."""
        raise NotImplementedError

    def accept(self, token_id: int) -> bool:
        """Commit `token_id` if the last mask allows it; False (state unchanged) if not."""
        raise NotImplementedError

    def can_end(self) -> bool:
        """True when the text so far is a complete instance (a stop token would be allowed)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Return to the start state (the same compiled schema)."""
        raise NotImplementedError

    def allowed_tokens(self) -> np.ndarray:
        """Ids allowed by the last mask (used to generate random instances); bitmask engines share this."""
        raise NotImplementedError


class Engine:
    """A grammar engine bound to one tokenizer. `name` and `version` go into every record."""

    name = "engine"

    def __init__(self, hf_tokenizer: Any):
        self.hf_tokenizer = hf_tokenizer

    @property
    def version(self) -> str:
        return _package_version(self.name)

    def compile(self, schema: Any) -> Session:
        """Compile a JSON Schema (a dict, bool or JSON text) and return a fresh session."""
        raise NotImplementedError

    def clear_cache(self) -> None:
        """Forget what earlier schemas left in process-level caches, so the next compile runs
        cold (`--cold-cache`).  Engines without such a cache have nothing to forget."""

    def cache_bytes(self) -> int | None:
        """Bytes held by process-level caches shared across schemas, when the engine says."""
        return None


def _package_version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


def _import_engine_package(module: str, extra: str = "bench"):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EngineUnavailableError(
            f"engine package {module!r} is not installed: pip install 'pushmask[{extra}]' ({exc})"
        ) from exc


def bit_is_set(bitmask_row: np.ndarray, token_id: int) -> bool:
    """Bit `t % 32` of word `t // 32` (the layout pushmask, llguidance and XGrammar share)."""
    word = int(bitmask_row[token_id >> 5])
    return bool((word >> (token_id & 31)) & 1)


def allowed_from_bitmask(bitmask_row: np.ndarray, vocab_size: int) -> np.ndarray:
    """Token ids whose bit is set in an int32 bitmask row."""
    bits = np.unpackbits(np.ascontiguousarray(bitmask_row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:vocab_size])


class BitmaskSession(Session):
    """Shared logic for engines that fill an int32 bitmask row (bit t%32 of word t//32)."""

    vocab_size: int
    bitmask: np.ndarray  # shape [ceil(V/32)], int32, a view the engine writes into

    def _commit(self, token_id: int) -> bool:
        raise NotImplementedError

    def accept(self, token_id: int) -> bool:
        if token_id < 0 or token_id >= self.vocab_size or not bit_is_set(self.bitmask, token_id):
            return False
        if not self._commit(token_id):
            # The mask allowed the token but the engine refused it: an engine bug, never a verdict.
            raise RuntimeError(f"engine refused token {token_id} that its own mask allowed")
        return True

    def allowed_tokens(self) -> np.ndarray:
        return allowed_from_bitmask(self.bitmask, self.vocab_size)


# ----------------------------------------------------------------------------------------------
# pushmask


class PushmaskSession(BitmaskSession):
    def __init__(self, pm, compiled, vocab_size: int):
        self.matcher = pm.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self._bitmask2d = pm.allocate_token_bitmask(1, vocab_size)
        self.bitmask = np.asarray(self._bitmask2d)[0]  # shares memory with a torch tensor

    def fill_mask(self) -> None:
        self.matcher.fill_next_token_bitmask(self._bitmask2d, index=0)

    def _commit(self, token_id: int) -> bool:
        return bool(self.matcher.accept_token(token_id))

    def can_end(self) -> bool:
        return bool(self.matcher.can_end())

    def reset(self) -> None:
        self.matcher.reset()


class PushmaskEngine(Engine):
    """pushmask through its public API (flexible whitespace, additionalProperties allowed by default,
    members in any order, unsatisfiable schemas as the empty language)."""

    name = "pushmask"

    def __init__(self, hf_tokenizer: Any):
        super().__init__(hf_tokenizer)
        pm = _import_engine_package("pushmask")
        if not hasattr(pm, "JsonOptions"):
            raise EngineUnavailableError("this pushmask build has no JsonOptions yet")
        self.pm = pm
        self.info = pm.TokenizerInfo.from_huggingface(hf_tokenizer)
        self.compiler = pm.GrammarCompiler(self.info)

    def compile(self, schema: Any) -> Session:
        # the corpus checks existing documents, whose members come in any order, against the
        # schema's own language (not xgrammar's strict default); a schema no instance satisfies
        # rejects them all (the empty language) instead of failing to compile
        compiled = self.compiler.compile_json_schema(schema, self.pm.JsonOptions.validation())
        return PushmaskSession(self.pm, compiled, self.info.vocab_size)

    def clear_cache(self) -> None:
        self.compiler.clear_cache()  # token masks
        self.pm.clear_caches()  # process-wide: rule automata, string/number leaf automata

    def cache_bytes(self) -> int | None:
        return int(self.compiler.cache_stats()["bytes"])


# ----------------------------------------------------------------------------------------------
# llguidance


class LlguidanceSession(BitmaskSession):
    def __init__(self, lnp, matcher, vocab_size: int):
        self.lnp = lnp
        self.matcher = matcher
        self.vocab_size = vocab_size
        self._bitmask2d = lnp.allocate_token_bitmask(1, vocab_size)
        self.bitmask = self._bitmask2d[0]

    def fill_mask(self) -> None:
        self.lnp.fill_next_token_bitmask(self.matcher, self._bitmask2d, 0)
        if self.matcher.is_error():
            raise RuntimeError(f"llguidance error: {self.matcher.get_error()}")

    def _commit(self, token_id: int) -> bool:
        return bool(self.matcher.consume_token(token_id))

    def can_end(self) -> bool:
        return bool(self.matcher.is_accepting())

    def reset(self) -> None:
        self.matcher.reset()


class LlguidanceEngine(Engine):
    """llguidance: LLTokenizer from the HF tokenizer, LLMatcher over its JSON-schema grammar."""

    name = "llguidance"

    def __init__(self, hf_tokenizer: Any):
        super().__init__(hf_tokenizer)
        self.llg = _import_engine_package("llguidance")
        _import_engine_package("llguidance.hf")
        self.lnp = _import_engine_package("llguidance.numpy")
        self.tokenizer = self.llg.hf.from_tokenizer(hf_tokenizer)
        self.vocab_size = self.tokenizer.vocab_size

    def compile(self, schema: Any) -> Session:
        try:
            grammar = self.llg.LLMatcher.grammar_from_json_schema(schema)
        except ValueError as exc:
            raise CompileError(str(exc)) from exc
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise CompileError(matcher.get_error())
        return LlguidanceSession(self.lnp, matcher, self.vocab_size)


# ----------------------------------------------------------------------------------------------
# XGrammar


class XgrammarSession(BitmaskSession):
    def __init__(self, xgr, compiled, vocab_size: int):
        self.matcher = xgr.GrammarMatcher(compiled)
        self.vocab_size = vocab_size
        self._bitmask2d = xgr.allocate_token_bitmask(1, vocab_size)  # a torch int32 tensor
        self.bitmask = self._bitmask2d.numpy()[0]  # shares memory with the tensor

    def fill_mask(self) -> None:
        self.matcher.fill_next_token_bitmask(self._bitmask2d, 0)

    def _commit(self, token_id: int) -> bool:
        return bool(self.matcher.accept_token(token_id))

    def can_end(self) -> bool:
        return bool(self.matcher.is_completed())

    def reset(self) -> None:
        self.matcher.reset()


class XgrammarEngine(Engine):
    """XGrammar in its JSON-Schema-compliant configuration (any whitespace, non-strict mode),
    the setting MaskBench calls "compliant": strict mode would forbid additional properties."""

    name = "xgrammar"

    def __init__(self, hf_tokenizer: Any):
        super().__init__(hf_tokenizer)
        self.xgr = _import_engine_package("xgrammar")
        self.info = self.xgr.TokenizerInfo.from_huggingface(hf_tokenizer)
        self.compiler = self.xgr.GrammarCompiler(self.info, max_threads=1)

    def compile(self, schema: Any) -> Session:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            compiled = self.compiler.compile_json_schema(text, any_whitespace=True, strict_mode=False)
        except (RuntimeError, ValueError) as exc:
            raise CompileError(str(exc)) from exc
        return XgrammarSession(self.xgr, compiled, self.info.vocab_size)


# ----------------------------------------------------------------------------------------------
# outlines-core


class OutlinesSession(BitmaskSession):
    def __init__(self, oc, index, vocab_size: int):
        self.guide = oc.Guide(index)
        self.vocab_size = vocab_size
        self.bitmask = np.zeros((vocab_size + 31) // 32, dtype=np.int32)

    def fill_mask(self) -> None:
        self.guide.write_mask_into(self.bitmask.ctypes.data, self.bitmask.size, 4)

    def _commit(self, token_id: int) -> bool:
        self.guide.advance(token_id, return_tokens=False)
        return True

    def can_end(self) -> bool:
        return bool(self.guide.is_finished())

    def reset(self) -> None:
        self.guide.reset()


class OutlinesEngine(Engine):
    """outlines-core: JSON Schema -> regex -> token-level DFA `Index`, walked by a `Guide`."""

    name = "outlines-core"

    def __init__(self, hf_tokenizer: Any):
        super().__init__(hf_tokenizer)
        self.oc = _import_engine_package("outlines_core")
        eos = hf_tokenizer.eos_token_id
        by_bytes: dict[bytes, list[int]] = {}
        for token_id, data in enumerate(token_bytes_table(hf_tokenizer)):
            if data is not None and token_id != eos:
                by_bytes.setdefault(data, []).append(token_id)
        self.vocabulary = self.oc.Vocabulary(eos, by_bytes)
        self.vocab_size = len(hf_tokenizer)

    def compile(self, schema: Any) -> Session:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            regex = self.oc.json_schema.build_regex_from_schema(text)
            index = self.oc.Index(regex, self.vocabulary)
        except (ValueError, RuntimeError, TypeError) as exc:
            raise CompileError(str(exc)) from exc
        return OutlinesSession(self.oc, index, self.vocab_size)


def _gpt2_unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode table (the alphabet of byte-level BPE vocabularies)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    codes = printable[:]
    shift = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + shift)
            shift += 1
    return {chr(code): byte for byte, code in zip(printable, codes)}


def token_bytes_table(hf_tokenizer: Any) -> list[bytes | None]:
    """The exact bytes of every token id (None for special/added tokens a grammar never emits).

    Handles byte-level BPE (GPT-2 alphabet) and SentencePiece with byte fallback (`<0xNN>`, `▁`).
    pushmask's own TokenizerInfo is the reference implementation; this copy keeps the outlines
    adapter independent of the engine under test."""
    special = set(getattr(hf_tokenizer, "all_special_ids", []) or [])
    added = set(getattr(hf_tokenizer, "added_tokens_decoder", {}) or {})
    pieces = hf_tokenizer.convert_ids_to_tokens(list(range(len(hf_tokenizer))))
    decoder = json.loads(hf_tokenizer.backend_tokenizer.to_str()).get("decoder") or {}
    byte_level = "ByteLevel" in json.dumps(decoder)
    table = _gpt2_unicode_to_byte() if byte_level else None
    out: list[bytes | None] = []
    for token_id, piece in enumerate(pieces):
        if piece is None or token_id in special or token_id in added:
            out.append(None)
        elif table is not None:
            try:
                out.append(bytes(table[ch] for ch in piece))
            except KeyError:
                out.append(piece.encode("utf-8"))
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(bytes([int(piece[3:5], 16)]))
        else:
            out.append(piece.replace("\u2581", " ").encode("utf-8"))
    return out


# ----------------------------------------------------------------------------------------------
# registry

EngineFactory = Callable[[Any], Engine]

_REGISTRY: dict[str, EngineFactory] = {
    "pushmask": PushmaskEngine,
    "llguidance": LlguidanceEngine,
    "xgrammar": XgrammarEngine,
    "outlines": OutlinesEngine,
}


def register_engine(name: str, factory: EngineFactory) -> None:
    """Make `--engine NAME` build engines with `factory(hf_tokenizer)` (in worker processes too,
    as long as workers are forked after the registration)."""
    _REGISTRY[name] = factory


def engine_names() -> list[str]:
    return sorted(_REGISTRY)


def resolve_engine(spec: str) -> EngineFactory:
    """A registered name, or "package.module:attribute" naming a factory."""
    if spec in _REGISTRY:
        return _REGISTRY[spec]
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise EngineUnavailableError(f"cannot import engine factory {spec!r}: {exc}") from exc
    raise EngineUnavailableError(
        f"unknown engine {spec!r}; choose one of {', '.join(engine_names())} or give module:attribute"
    )
