"""`pushmask warmup`: compile every kernel signature pushmask uses into its prepared cache.

Runs a representative workload (JSON Schemas of every kind of keyword, EBNF, Lark, regex and
structural-tag grammars; masks, token budgets, batch fills, value checks, infilling) on a small
built-in vocabulary, and with --tokenizer on a real one too, while `pushmask.core.jit` stores what
numba compiles in `core/kernel-cache/` (one set per Python version, with its manifest
`prepared-pyXY.json`: the numba and llvmlite it loads under; see core/jit.py).
Run it where pushmask is installed and writable: `make install` and `make wheel` do, a container
image build can (`RUN pushmask warmup`). Kernels already prepared load instead of compiling.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .core import jit

if TYPE_CHECKING:
    from .masks.compiler import CompiledGrammar

SCHEMAS = [
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    },
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "email": {"type": "string", "format": "email"},
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "site": {"type": "string", "format": "uri"},
            "ip": {"type": "string", "format": "ipv4"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3,5}$"},
            "word": {"type": "string", "minLength": 2, "maxLength": 12},
            "pet": {"enum": ["cat", "dog", None, 3]},
            "kind": {"const": "x"},
        },
    },
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": -5, "maximum": 1200},
            "m": {"type": "integer", "exclusiveMinimum": 0},
            "x": {"type": "number", "minimum": 0.5, "maximum": 99.25},
            "k": {"type": "integer", "multipleOf": 5},
            "y": {"type": "number"},
            "b": {"type": "boolean"},
            "z": {"type": "null"},
        },
    },
    {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 1, "maxItems": 3, "uniqueItems": True},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"type": "array", "contains": {"type": "integer", "minimum": 3}, "items": {"type": ["integer", "string"]}},
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "oneOf": [
            {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "required": ["a"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"b": {"type": "string"}},
                "required": ["b"],
                "additionalProperties": False,
            },
        ]
    },
    {"anyOf": [{"type": "string", "pattern": "^[a-f0-9]+$"}, {"type": "number"}], "not": {"const": 7}},
    {
        "type": "object",
        "patternProperties": {"^x-": {"type": "integer"}},
        "propertyNames": {"maxLength": 6},
        "minProperties": 1,
        "maxProperties": 3,
    },
    {
        "type": "object",
        "properties": {"s": {"type": "string"}},
        "additionalProperties": {"type": "number"},
        "dependentRequired": {"s": ["t"]},
    },
    {"type": "string", "pattern": "^(\\p{L}|[\u00e9\u4e2d])+\\s?$"},
    {
        "allOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"required": ["a"]}],
        "unevaluatedProperties": False,
    },
    {},
]
GRAMMARS = [
    ("ebnf", 'root ::= "yes" | "no" | [0-9]+ | "[" item ("," item)* "]"\nitem ::= [a-z]+ | "\\"" [^"\\\\]* "\\""'),
    ("ebnf", 'root ::= ("a" | "b")* "c"{2,4} [\\u00e9-\\u00ff]?'),
    ("lark", 'start: expr\n?expr: expr "+" term | term\n?term: NUMBER | "(" expr ")"\nNUMBER: /[0-9]+(\\.[0-9]+)?/'),
    ("regex", "[A-Za-z_][A-Za-z0-9_]{0,15}(\\.[a-z]+)*"),
    ("regex", "(\\d{1,3}\\.){3}\\d{1,3}|[^\\s]{2,5}"),
]
VALUES = ['{"name": "Bob", "age": 7}', '[1, "x"]', '{"v": 1, "kids": [{"v": 2}]}', '{"a": 3}', '["ab", "c"]']


def small_vocabulary():
    """A byte-level vocabulary: the 256 single bytes, common JSON pieces and words, and a stop token."""
    pieces = [
        '{"',
        '"}',
        '":',
        '",',
        '":"',
        '", "',
        ' "',
        '": ',
        ', "',
        "[",
        "]",
        "{",
        "}",
        "[{",
        "}]",
        "},",
        "true",
        "false",
        "null",
        "name",
        "age",
        "id",
        "email",
        "value",
        " the",
        "ing",
        "er",
        "an",
        "0",
        "00",
        "12",
        "123",
        "2024",
        "-",
        "e+",
        ".5",
        "\\n",
        '\\"',
        "\\u",
        "  ",
        "    ",
        "\n",
        "\n  ",
        "\u00e9",
        "\u4e2d",
        "\u00e9t\u00e9",
        "\U0001f600",
        "http",
        "://",
        "www",
        ".com",
        "@",
        "x-",
    ]
    tokens = [bytes([b]) for b in range(256)] + [p.encode() for p in pieces]
    tokens += [bytes([0xE4]), bytes([0xB8, 0xAD]), None, b"<|end|>"]
    from .masks.vocab import TokenizerInfo

    stop = len(tokens) - 1
    return TokenizerInfo.from_vocab(tokens, stop_token_ids=[stop], special_token_ids=[stop])


def _walk(matcher, info, rng, steps: int) -> int:
    """Random walk through masks (all matcher operations on the way); the masks filled."""
    from . import allocate_token_bitmask

    bitmask = allocate_token_bitmask(1, info.vocab_size)
    filled = 0
    for _ in range(steps):
        if matcher.is_terminated():
            break
        matcher.fill_next_token_bitmask(bitmask)
        filled += 1
        allowed = _allowed(bitmask[0], info.vocab_size)
        if not len(allowed):
            break
        token = int(rng.choice(allowed))
        matcher.check_token(token)
        matcher.accept_token(token)
    matcher.find_jump_forward_string()
    if matcher.num_accepted_tokens > 1:
        matcher.rollback(1)
    matcher.fork().reset()
    return filled


def _allowed(words, vocab_size: int) -> np.ndarray:
    """The token ids a bitmask row allows."""
    words = np.asarray(words).astype(np.uint32)
    return np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size])


def _batch_walk(matchers, info, rng, steps: int) -> None:
    """A server's batch steps: every row filled by one batch call on two threads (the first visits
    of all grammars computed together), then a random allowed token accepted in each row."""
    from . import allocate_token_bitmask, batch_fill_next_token_bitmask

    bitmask = allocate_token_bitmask(len(matchers), info.vocab_size)
    for _ in range(steps):
        live = [matcher for matcher in matchers if not matcher.is_terminated()]
        if not live:
            break
        batch_fill_next_token_bitmask(live, bitmask, max_threads=2)
        for row, matcher in enumerate(live):
            allowed = _allowed(bitmask[row], info.vocab_size)
            if len(allowed):
                matcher.accept_token(int(rng.choice(allowed)))


def workload(info, rng) -> dict:
    """Compile and match everything above with `info`'s vocabulary; counts of what ran."""
    from . import (
        Gap,
        GrammarCompiler,
        GrammarMatcher,
        Template,
        allocate_token_bitmask,
        allowed_tokens,
        apply_token_bitmask_inplace,
        batch_fill_next_token_bitmask,
        can_complete,
        find_completion,
    )
    from .core.errors import PushmaskError
    from .masks.bitmask import allocate_numpy_bitmask

    compiler = GrammarCompiler(info)
    compiled = []
    for schema in SCHEMAS:
        keyword_sets: tuple[dict[str, Any], ...] = ({}, {"any_whitespace": False, "property_order": "any"})
        for keywords in keyword_sets:  # compile_json_schema's **keywords (JsonOptions changes)
            try:
                compiled.append(compiler.compile_json_schema(schema, **keywords))
            except PushmaskError:
                pass
    for kind, text in GRAMMARS:
        compile_: dict[str, Callable[[str], CompiledGrammar]] = {
            "ebnf": compiler.compile_grammar,
            "lark": compiler.compile_lark,
            "regex": compiler.compile_regex,
        }
        compiled.append(compile_[kind](text))
    json_grammar = compiler.compile_builtin_json_grammar()
    compiled.append(json_grammar)
    stop = info.stop_token_ids[0]
    compiled.append(compiler.compile_grammar(f'root ::= [a-z]* <[{stop - 1}]> "{{" [a-z]* "}}"'))
    compiled.append(
        compiler.compile_structural_tag(
            {
                "type": "structural_tag",
                "format": {
                    "type": "triggered_tags",
                    "triggers": ["<tool"],
                    "tags": [
                        {
                            "type": "tag",
                            "begin": '<tool>{"name": "f", "arguments": ',
                            "content": {"type": "json_schema", "json_schema": SCHEMAS[0]},
                            "end": "}</tool>",
                        }
                    ],
                },
            }
        )
    )

    masks = 0
    for grammar in compiled:
        masks += _walk(GrammarMatcher(grammar), info, rng, 24)
        try:  # a budget the walk can use up (grammars with token terminals take none)
            budgeted = GrammarMatcher(grammar, max_tokens=48)
        except (PushmaskError, ValueError):
            budgeted = None
        if budgeted is not None:
            masks += _walk(budgeted, info, rng, 48)
        matcher = GrammarMatcher(grammar)
        for text in VALUES:
            matcher.reset()
            matcher.accept_string(text)
    deep = GrammarMatcher(compiler.compile_grammar('root ::= "[" root? "]"'))
    deep.accept_string("[" * 1500)  # past the frame pool's first capacity: it grows
    matchers = [GrammarMatcher(grammar) for grammar in compiled[:4]]
    batch_fill_next_token_bitmask(matchers, allocate_token_bitmask(len(matchers), info.vocab_size))
    _batch_walk([GrammarMatcher(grammar) for grammar in compiled], info, rng, 24)
    for dtype in (np.float16, np.float32, np.float64):  # the CPU apply kernel, for each float width
        apply_token_bitmask_inplace(np.zeros((2, info.vocab_size), dtype), allocate_numpy_bitmask(2, info.vocab_size))

    can_complete(json_grammar, ['{"name": ', ', "age": 7}'])
    can_complete(json_grammar, ["[1, ", "]]"], [Gap.tokens(1)])
    can_complete(json_grammar, ['{"a": ', "}"], [Gap.bytes(3, alphabet=b"0123456789")])
    find_completion(json_grammar, ["[1, ", "]]"])
    allowed_tokens(json_grammar, Template(['{"a": [1, ', Gap.bytes(6), '], "b": "x"}']), 1)
    allowed_tokens(compiled[0], Template(['{"name": "', Gap.tokens(2), '", "age": 1}']), 1)
    matcher = GrammarMatcher(compiled[0])
    matcher.accept_string('{"name": "B')
    can_complete(matcher, Template([Gap(), '", "age": 1}']))

    from .samplers.infill_sampling import diffusion_generate, fill_in_the_middle

    def logits_rows(ids):
        return rng.standard_normal((len(ids), info.vocab_size)).astype(np.float32)

    diffusion_generate(json_grammar, logits_rows, length=8, tokens_per_step=2, temperature=0.7, seed=0)
    fill_in_the_middle(
        json_grammar,
        lambda ids: rng.standard_normal(info.vocab_size).astype(np.float32),
        '{"name": "Bob", "age": ',
        ', "ok": true}',
        max_tokens=6,
    )
    return {"grammars": len(compiled), "masks": masks}


def _hf_tokenizer_info(path: str):
    from .masks.vocab import TokenizerInfo

    try:
        from transformers import AutoTokenizer

        return TokenizerInfo.from_huggingface(AutoTokenizer.from_pretrained(path))
    except ImportError:
        import tokenizers

        return TokenizerInfo.from_huggingface(tokenizers.Tokenizer.from_file(str(Path(path) / "tokenizer.json")))


def add_arguments(parser) -> None:
    parser.epilog = (
        "examples:\n  pushmask warmup\n"
        "  pushmask warmup --tokenizer ../shared/tokenizers/llama3 --tokenizer ../shared/tokenizers/qwen"
    )
    parser.add_argument(
        "--tokenizer",
        action="append",
        default=[],
        metavar="DIR",
        help="also run the workload with this Hugging Face tokenizer folder (repeatable)",
    )
    parser.add_argument("--keep-stale", action="store_true", help="do not delete prepared files no kernel uses")


def first_mask() -> list[list]:
    """A first mask of the small schema on the small vocabulary: the kernel signatures it needs, in
    order (the manifest keeps them for `pushmask.compile_ahead`)."""
    from . import GrammarCompiler, GrammarMatcher, allocate_token_bitmask

    info = small_vocabulary()
    matcher = GrammarMatcher(GrammarCompiler(info).compile_json_schema(SCHEMAS[0]))
    matcher.fill_next_token_bitmask(allocate_token_bitmask(1, info.vocab_size))
    return jit.needed_signatures()


def run(args) -> int:
    jit.start_preparing()
    start = time.perf_counter()
    first_mask_signatures = first_mask()
    rng = np.random.default_rng(0)
    runs = {"built-in vocabulary": workload(small_vocabulary(), rng)}
    for path in args.tokenizer:
        runs[path] = workload(_hf_tokenizer_info(path), rng)
    kept, deleted = (0, 0) if args.keep_stale else jit.prune_prepared()
    loaded, compiled = jit.cache_stats()
    manifest = jit.write_manifest(compiled, time.perf_counter() - start, first_mask_signatures)
    size = sum(p.stat().st_size for p in jit.PREPARED_DIR.glob("*") if p.is_file())
    print(
        json.dumps(
            {
                "prepared_dir": str(jit.PREPARED_DIR),
                "seconds": round(time.perf_counter() - start, 1),
                "kernels_loaded": loaded,
                "kernels_compiled": compiled,
                "files_kept": kept,
                "files_deleted": deleted,
                "bytes": size,
                "manifest": {key: value for key, value in manifest.items() if key != "first_mask"},
                "first_mask_signatures": len(manifest.get("first_mask", [])),
                "runs": runs,
            }
        )
    )
    return 0
