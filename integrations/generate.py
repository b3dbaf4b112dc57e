"""`pushmask.generate`: one call from a transformers model and a prompt to text that fits a
JSON Schema, a grammar or a regex.

Forced text (what the grammar allows in exactly one way, such as `"name": "` after `{`) is not
decoded token by token: generation pauses, the text is tokenized and appended in one step
(jump-forward), and generation resumes with the model's KV cache.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from ..core.errors import ArgumentTypeError, InvalidArgumentError, SchemaError
from ..grammar.frontends import grammar_kind
from ..grammar.json_options import JsonOptions
from ..masks.compiler import CompiledGrammar, GrammarCompiler
from ..masks.vocab import TokenizerInfo
from ..samplers.kv_cache import kv_cache_name
from .fast_forward import canonical_fast_forward
from .transformers import GrammarLogitsProcessor, JumpForwardStoppingCriteria

if TYPE_CHECKING:
    from .streaming import GenerationStream

__all__ = ["generate", "Generation", "compiler_for", "compile_constraint", "TextSink"]

DEFAULT_JSON_OPTIONS = JsonOptions.generation()
"""Schema-constrained JSON in strict mode and exactly the layout json.dumps writes (`{"a": 1, "b":
[1, 2]}`), so a model cannot format it oddly or loop on whitespace; json_options=
JsonOptions.generation(indent=2) for json.dumps's indent=2 layout, JsonOptions.generation(
separators=None) for any JSON whitespace."""


@dataclass
class Generation:
    """What `generate` returns.

    text: the generated text (exact bytes of the tokens, stop token excluded).
    value: the parsed JSON when a schema was given and the output is complete, else None.
    complete: True when the text is a complete string of the grammar (the model emitted a stop
        token, or max_new_tokens ended it where the grammar may end, as the token budget
        ensures); False when max_new_tokens cut it (only with finish_within_budget=False: the
        text is then a valid prefix).
    num_tokens: tokens generated, forced ones included; num_forced: how many were jump-forwarded.
    token_ids: the generated token ids (stop token included); forced: per token, whether it was
        appended by jump-forward rather than chosen by the model.
    healed_prefix: with token_healing, the text of the prompt token removed: `text` starts with
        it, and the grammar's text (what `value` parses) follows it.
    """

    text: str
    value: Any = None
    complete: bool = False
    num_tokens: int = 0
    num_forced: int = 0
    token_ids: list = field(default_factory=list)
    forced: list = field(default_factory=list)
    healed_prefix: str = ""

    def __str__(self) -> str:
        return self.text


# ---------------------------------------------------------------------------------------------
# one GrammarCompiler per tokenizer (it memoises the grammars it compiled, with their masks)

CACHE_LIMIT_BYTES = 1 << 30
"""The cap of each per-tokenizer compiler's memory caches (compiled grammars, shared masks)."""

# Weak, not a registered cache: a tokenizer's compiler (bounded by CACHE_LIMIT_BYTES) lives as long
# as the tokenizer.
_compilers: weakref.WeakKeyDictionary[Any, GrammarCompiler] = weakref.WeakKeyDictionary()
_compilers_lock = threading.Lock()


def compiler_for(tokenizer) -> GrammarCompiler:
    """The GrammarCompiler of a Hugging Face tokenizer, built once and reused (with its caches)."""
    with _compilers_lock:
        compiler = _compilers.get(tokenizer)
        if compiler is None:
            info = TokenizerInfo.from_huggingface(tokenizer)
            compiler = _compilers[tokenizer] = GrammarCompiler(info, cache_limit_bytes=CACHE_LIMIT_BYTES)
        return compiler


def compile_constraint(
    tokenizer,
    *,
    schema: Any = None,
    grammar: str | None = None,
    regex: str | None = None,
    grammar_format: str = "auto",
    json_options: JsonOptions | dict | None = None,
) -> CompiledGrammar:
    """Compile exactly one of schema / grammar / regex for `tokenizer` (memoised by the
    tokenizer's compiler: the same constraint and options compile once).

    grammar_format: "ebnf" (also GBNF), "lark", or "auto" (grammar/frontends.py: grammar_kind; EBNF
        when a line defines a rule with `::=`).
    json_options: a JsonOptions (default: DEFAULT_JSON_OPTIONS), or a dict of compile_json_schema's
        keyword arguments applied to the defaults of compile_json_schema.
    """
    given = [name for name, v in (("schema", schema), ("grammar", grammar), ("regex", regex)) if v is not None]
    if len(given) != 1:
        raise InvalidArgumentError(f"pass exactly one of schema=, grammar=, regex= (got {', '.join(given) or 'none'})")
    options: dict = {}
    if schema is not None:
        json_options = DEFAULT_JSON_OPTIONS if json_options is None else JsonOptions.of(json_options, {}, "generate")
        options = {"json_options": json_options}
        kind, spec = "json_schema", _schema_object(schema)
    elif grammar is not None:
        if grammar_format not in ("auto", "ebnf", "gbnf", "lark"):
            raise InvalidArgumentError(
                f"grammar_format must be 'ebnf', 'gbnf', 'lark' or 'auto', got {grammar_format!r}"
            )
        kind = grammar_kind(grammar).kind if grammar_format == "auto" else grammar_format.replace("gbnf", "ebnf")
        if kind == "json":
            raise InvalidArgumentError("grammar= is JSON text, not a grammar: pass a JSON Schema as schema=")
        spec = grammar
    else:
        kind, spec = "regex", regex
    return compiler_for(tokenizer).compile(kind, spec, **options)


def _schema_object(schema: Any) -> Any:
    """A JSON-able schema from a dict, JSON text, or pydantic model class."""
    if isinstance(schema, (dict, bool)):
        return schema
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"the schema is not valid JSON: {exc}", "#") from exc
    if hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    raise ArgumentTypeError(f"schema must be a dict, JSON text or pydantic model class, got {type(schema).__name__}")


# ---------------------------------------------------------------------------------------------
# streaming


class TextSink:
    """Turns tokens into text incrementally and hands each new piece to `callback`.

    Decodes the exact bytes of all tokens so far and emits only complete UTF-8 characters, so
    a character split across tokens is printed once it is whole.
    """

    def __init__(self, info: TokenizerInfo, callback: Callable[[str], None]):
        self.info = info
        self.callback = callback
        self.data = bytearray()
        self.emitted = 0  # bytes already handed out

    def put_tokens(self, token_ids: Sequence[int]) -> None:
        for t in token_ids:
            t = int(t)
            if 0 <= t < self.info.vocab_size:
                self.data += self.info.decoded_vocab[t]
        self._flush(final=False)

    def put_bytes(self, data: bytes) -> None:
        """New text given as bytes (forced text whose tokens re-spell some already put)."""
        self.data += data
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        pending = bytes(self.data[self.emitted :])
        if not pending:
            return
        text = pending.decode("utf-8", errors="replace" if final else "ignore")
        if not final:
            # keep an incomplete trailing character for later
            complete = len(pending)
            for cut in range(len(pending), max(len(pending) - 4, -1), -1):
                try:
                    text = pending[:cut].decode("utf-8")
                    complete = cut
                    break
                except UnicodeDecodeError:
                    continue
            pending = pending[:complete]
        if text:
            self.callback(text)
        self.emitted += len(pending)

    def end(self) -> None:
        self._flush(final=True)


class _HFStreamer:
    """A transformers streamer (put/end) feeding a TextSink; skips the prompt put of each call."""

    def __init__(self, sink: TextSink):
        self.sink = sink
        self.skip_next = True

    def begin_call(self) -> None:
        self.skip_next = True

    def put(self, value) -> None:
        if self.skip_next:
            self.skip_next = False
            return
        self.sink.put_tokens(value.reshape(-1).tolist())

    def end(self) -> None:
        pass  # the caller ends the sink once, after all segments


# ---------------------------------------------------------------------------------------------


@overload
def generate(
    model,
    tokenizer,
    prompt_or_messages: str | Sequence[dict],
    *,
    schema: Any = None,
    grammar: str | None = None,
    regex: str | None = None,
    compiled_grammar: CompiledGrammar | None = None,
    grammar_format: str = "auto",
    json_options: JsonOptions | dict | None = None,
    max_new_tokens: int = 256,
    chat_template: bool | None = None,
    jump_forward: bool = True,
    min_jump_chars: int = 3,
    canonical: bool = True,
    token_healing: bool = False,
    stream: Literal[True],
    finish_within_budget: bool = True,
    **generate_kwargs: Any,
) -> GenerationStream: ...


@overload
def generate(
    model,
    tokenizer,
    prompt_or_messages: str | Sequence[dict],
    *,
    schema: Any = None,
    grammar: str | None = None,
    regex: str | None = None,
    compiled_grammar: CompiledGrammar | None = None,
    grammar_format: str = "auto",
    json_options: JsonOptions | dict | None = None,
    max_new_tokens: int = 256,
    chat_template: bool | None = None,
    jump_forward: bool = True,
    min_jump_chars: int = 3,
    canonical: bool = True,
    token_healing: bool = False,
    stream: Callable[[str], None] | Literal[False] | None = None,
    finish_within_budget: bool = True,
    **generate_kwargs: Any,
) -> Generation: ...


@overload
def generate(
    model,
    tokenizer,
    prompt_or_messages: str | Sequence[dict],
    *,
    schema: Any = None,
    grammar: str | None = None,
    regex: str | None = None,
    compiled_grammar: CompiledGrammar | None = None,
    grammar_format: str = "auto",
    json_options: JsonOptions | dict | None = None,
    max_new_tokens: int = 256,
    chat_template: bool | None = None,
    jump_forward: bool = True,
    min_jump_chars: int = 3,
    canonical: bool = True,
    token_healing: bool = False,
    stream: Callable[[str], None] | bool | None = None,
    finish_within_budget: bool = True,
    **generate_kwargs: Any,
) -> Generation | GenerationStream: ...


def generate(
    model,
    tokenizer,
    prompt_or_messages: str | Sequence[dict],
    *,
    schema: Any = None,
    grammar: str | None = None,
    regex: str | None = None,
    compiled_grammar: CompiledGrammar | None = None,
    grammar_format: str = "auto",
    json_options: JsonOptions | dict | None = None,
    max_new_tokens: int = 256,
    chat_template: bool | None = None,
    jump_forward: bool = True,
    min_jump_chars: int = 3,
    canonical: bool = True,
    token_healing: bool = False,
    stream: Callable[[str], None] | bool | None = None,
    finish_within_budget: bool = True,
    **generate_kwargs: Any,
) -> Generation | GenerationStream:
    """Generate one completion of `prompt_or_messages` that satisfies the constraint.

    prompt_or_messages: a prompt string or a list of chat messages ({"role", "content"}).
        With a chat template (the default when the tokenizer has one) a string becomes one user
        message; chat_template=False feeds the string as raw text.
    schema / grammar / regex / compiled_grammar: exactly one constraint. grammar is EBNF
        (GBNF) or Lark text (see grammar_format).
    json_options: a JsonOptions, or a dict of compile_json_schema's keyword arguments (default:
        JsonOptions.generation(): strict mode in the layout json.dumps writes, so a small model
        cannot format oddly or loop on whitespace; JsonOptions.generation(indent=2) for an
        indented layout).
    jump_forward: append text the grammar forces (at least min_jump_chars characters) without
        decoding it token by token.
    canonical: append forced text as the tokenizer's own tokens for the text so far: the last
        few generated tokens (at most fast_forward.DEFAULT_MAX_BACK) are re-tokenized together
        with it (integrations/fast_forward.py); False encodes the forced piece alone.
    token_healing: back up the prompt's last token and make the first generated token start
        with its text (a prompt ending in a space or half a word then continues as the tokenizer
        would have split it); the output text then starts with those bytes.
    stream: called with each new piece of text as it is generated; or True: return a
        GenerationStream at once, an iterator of StreamEvents (text pieces and, for a schema,
        the value so far with its closed members, top-level ones checked as they close; see
        integrations/streaming.py) whose `result` is the Generation.
    finish_within_budget: the output ends inside the grammar within max_new_tokens (masks close
        what is open in time; GrammarMatcher's max_tokens); raises BudgetTooSmallError when the
        grammar needs more.  False: the output may be cut off as a prefix.
    generate_kwargs: passed to model.generate (do_sample, temperature, top_p, ...).

    Returns a Generation (text, parsed JSON value for schemas, whether it completed).
    """
    if stream is False:
        stream = None
    if stream is True:
        from .streaming import GenerationStream

        options = dict(
            schema=schema,
            grammar=grammar,
            regex=regex,
            compiled_grammar=compiled_grammar,
            grammar_format=grammar_format,
            json_options=json_options,
            max_new_tokens=max_new_tokens,
            chat_template=chat_template,
            jump_forward=jump_forward,
            min_jump_chars=min_jump_chars,
            canonical=canonical,
            token_healing=token_healing,
            finish_within_budget=finish_within_budget,
            **generate_kwargs,
        )
        return GenerationStream(
            lambda sink: generate(model, tokenizer, prompt_or_messages, stream=sink, **options),
            schema=None if schema is None else _schema_object(schema),
        )
    import torch

    if compiled_grammar is None:
        compiled = compile_constraint(
            tokenizer,
            schema=schema,
            grammar=grammar,
            regex=regex,
            grammar_format=grammar_format,
            json_options=json_options,
        )
    else:
        if any(v is not None for v in (schema, grammar, regex)):
            raise InvalidArgumentError("pass either compiled_grammar or one of schema=, grammar=, regex=")
        compiled = compiled_grammar
    info = compiled.tokenizer_info
    for name in ("num_beams", "num_return_sequences"):
        if generate_kwargs.pop(name, None) not in (1, None):
            raise InvalidArgumentError(
                f"pushmask.generate makes one sequence; for {name}= use model.generate "
                "with pushmask.hf.GrammarLogitsProcessor"
            )
    if "streamer" in generate_kwargs:
        raise InvalidArgumentError("pass stream=callback(text) instead of streamer=")
    extra_processors = list(generate_kwargs.pop("logits_processor", None) or [])
    extra_criteria = list(generate_kwargs.pop("stopping_criteria", None) or [])

    device = _model_device(model)
    input_ids = _prompt_ids(tokenizer, prompt_or_messages, chat_template).to(device)
    eos = _stop_ids(model, tokenizer, info)
    pad = _pad_id(model, tokenizer, eos)

    processor = GrammarLogitsProcessor(
        compiled,
        eos_token_id=eos,
        max_new_tokens=max_new_tokens if finish_within_budget else None,
        token_healing=token_healing,
    )
    if token_healing:
        input_ids = processor.heal_prompt(input_ids)
    processor.start(input_ids)
    prompt_len = input_ids.shape[1]
    sink = TextSink(info, stream) if stream is not None else None
    streamer = _HFStreamer(sink) if sink is not None else None
    criteria = [JumpForwardStoppingCriteria(processor, min_jump_chars)] if jump_forward else []

    ids = input_ids
    cache = None
    forced_at: set[int] = set()  # positions (from the prompt's end) of jump-forwarded tokens
    while True:
        generated = ids.shape[1] - prompt_len
        budget = max_new_tokens - generated
        matcher = processor.sync(ids, new_call=False)[0]
        if budget <= 0 or matcher.is_terminated() or processor.row_rejected(0):
            break
        if jump_forward and not (token_healing and generated == 0):  # the first token heals first
            text = matcher.find_jump_forward_string()
            back, forced = _forced_tokens(tokenizer, processor, ids, prompt_len, text, budget, canonical)
            if forced:
                if back:  # re-tokenized with the forced text: those tokens are replaced
                    ids = ids[:, : ids.shape[1] - back]
                    cache = _crop_cache(cache, ids.shape[1])
                    generated -= back
                    forced_at = {p for p in forced_at if p < generated}
                forced_at.update(range(generated, generated + len(forced)))
                ids = torch.cat([ids, torch.tensor([forced], dtype=ids.dtype, device=device)], dim=1)
                if sink is not None:
                    sink.put_bytes(text.encode("utf-8"))
                continue
        if streamer is not None:
            streamer.begin_call()
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            **{kv_cache_name(): cache},
            logits_processor=[processor, *extra_processors],
            stopping_criteria=[*criteria, *extra_criteria],
            max_new_tokens=budget,
            eos_token_id=list(eos),
            pad_token_id=pad,
            streamer=streamer,
            return_dict_in_generate=True,
            **generate_kwargs,
        )
        new_len = out.sequences.shape[1]
        cache = getattr(out, kv_cache_name(), None)
        if new_len == ids.shape[1]:
            break  # nothing generated (a stopping criterion fired at once); avoid looping
        ids = out.sequences
        matcher = processor.sync(ids, new_call=False)[0]
        resumable = jump_forward and len(matcher.find_jump_forward_string()) >= min_jump_chars
        if not resumable:
            break  # a stop token, the token budget, or a caller's stopping criterion ended it
    if sink is not None:
        sink.end()

    slot_tokens = processor.generated_tokens(0)
    matcher = processor.matchers()[0]
    complete = matcher.is_terminated() or (not processor.row_rejected(0) and matcher.can_end())
    body = [t for t in slot_tokens if t not in set(eos)]
    data, healed = info.decode_tokens(body), processor.healed_bytes(0)
    text = data.decode("utf-8", errors="replace")
    value = None
    if complete and schema is not None:
        value = json.loads(data[len(healed) :])
    token_ids = ids[0, prompt_len:].tolist()
    return Generation(
        text=text,
        value=value,
        complete=complete,
        num_tokens=len(token_ids),
        num_forced=len(forced_at),
        token_ids=token_ids,
        forced=[i in forced_at for i in range(len(token_ids))],
        healed_prefix=healed.decode("utf-8", errors="replace"),
    )


def _forced_tokens(
    tokenizer, processor: GrammarLogitsProcessor, ids, prompt_len: int, forced: str, budget: int, canonical: bool
) -> tuple[int, list[int]]:
    """(back, tokens) for the forced text: drop the last `back` generated tokens and append
    `tokens` (canonical: the tokenizer's tokens for the text so far, see fast_forward.py; else
    the forced piece encoded alone), checked against the grammar; (0, []) when not worth it or
    not accepted (e.g. text that the tokenizer turns into a special token)."""
    if not forced:
        return 0, []
    tries = []
    if canonical:
        tries.append(canonical_fast_forward(tokenizer, processor.tokenizer_info, ids[0, prompt_len:].tolist(), forced))
    tries.append((0, tokenizer.encode(forced, add_special_tokens=False)[:budget]))
    import torch

    for back, tokens in tries:
        if not tokens or len(tokens) - back > budget:
            continue
        kept = ids[:, : ids.shape[1] - back]
        trial = torch.cat([kept, torch.tensor([tokens], dtype=ids.dtype, device=ids.device)], dim=1)
        matcher = processor.sync(trial, new_call=False)[0]
        ok = not processor.row_rejected(0) and processor.generated_tokens(0)[-len(tokens) :] == tokens
        if ok and matcher.remaining_tokens is not None:  # the tokenizer's split must leave room to finish
            ok = matcher.min_tokens_to_finish() <= matcher.remaining_tokens
        processor.sync(ids, new_call=False)  # back; the caller appends them if ok
        if ok:
            return back, tokens
    return 0, []


def _crop_cache(cache, length: int):
    """The KV cache cut to its first `length` positions (None, to recompute, when it can't be cut)."""
    if cache is None or not hasattr(cache, "get_seq_length") or not hasattr(cache, "crop"):
        return None
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # a negative count removes that many positions (every transformers version)
    return cache


def _model_device(model):
    import torch

    device = getattr(model, "device", None)
    if device is None:
        try:
            device = next(model.parameters()).device
        except (StopIteration, AttributeError):
            device = torch.device("cpu")
    return device


def _prompt_ids(tokenizer, prompt_or_messages, chat_template: bool | None):
    import torch

    has_template = getattr(tokenizer, "chat_template", None) is not None
    if isinstance(prompt_or_messages, str):
        use_template = has_template if chat_template is None else chat_template
        if not use_template:
            return torch.tensor([tokenizer.encode(prompt_or_messages)], dtype=torch.long)
        messages = [{"role": "user", "content": prompt_or_messages}]
    else:
        messages = list(prompt_or_messages)
        if not has_template:
            raise InvalidArgumentError("chat messages need a tokenizer with a chat template; pass a string prompt")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return torch.tensor([tokenizer.encode(text, add_special_tokens=False)], dtype=torch.long)


def _stop_ids(model, tokenizer, info: TokenizerInfo) -> tuple[int, ...]:
    """The model's EOS ids (generation_config), else the tokenizer's stop tokens."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    listed = [eos] if isinstance(eos, (int, np.integer)) else list(eos or [])
    ids = [int(t) for t in listed if 0 <= int(t) < info.vocab_size]
    return tuple(ids) if ids else tuple(info.stop_token_ids)


def _pad_id(model, tokenizer, eos: tuple[int, ...]) -> int:
    pad = getattr(getattr(model, "generation_config", None), "pad_token_id", None)
    if pad is None:
        pad = tokenizer.pad_token_id
    return int(pad) if pad is not None else eos[0]
