"""A small program written against xgrammar's Python API, as a user would write it.

tests/test_xgrammar_compat.py runs it twice: as it is (when xgrammar is installed) and with its
one import line changed to `import pushmask as xgr`, and compares what the two runs return.
run() compiles JSON Schemas and walks one matcher at a time; run_grammar_api() builds grammars
with xgrammar's Grammar constructors (from_ebnf, from_json_schema, from_regex,
from_structural_tag, builtin_json_grammar, union, concat), fills the masks of all its matchers
with a BatchGrammarMatcher and checks them with xgrammar.testing's helpers.
Usage on its own: python tests/xgrammar_program.py TOKENIZER_DIR [grammar_api]  (prints JSON).
"""

import hashlib
import importlib
import json
import sys

import torch
import xgrammar as xgr
from transformers import AutoTokenizer

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "height": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "height"],
}
PET = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "hamster"]},
        "indoor": {"type": "boolean"},
        "owner": {"type": "null"},
    },
    "required": ["kind", "indoor", "owner"],
}
CASES = [
    # (schema, compile_json_schema keyword arguments, text the "model" emits)
    (PERSON, {"any_whitespace": False}, '{"name": "Ann Lee", "height": 1.75, "tags": ["a b", "c"]}'),
    (PERSON, {"any_whitespace": False, "strict_mode": True}, '{"name": "Bo", "height": -2e3}'),
    (PET, {"any_whitespace": False, "separators": (",", ":")}, '{"kind":"hamster","indoor":false,"owner":null}'),
    ({"type": "array", "items": {"type": "number"}}, {"any_whitespace": False, "indent": 2}, "[\n  1.5,\n  20\n]"),
]


def run(tokenizer_dir: str) -> list[dict]:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[tokenizer.eos_token_id])
    compiler = xgr.GrammarCompiler(info, max_threads=8, cache_enabled=True, cache_limit_bytes=-1)
    special = torch.tensor(sorted(i for i, added in tokenizer.added_tokens_decoder.items() if added.special))
    results = []
    for schema, kwargs, text in CASES:
        compiled = compiler.compile_json_schema(json.dumps(schema), **kwargs)
        matcher = xgr.GrammarMatcher(compiled)
        bitmask = xgr.allocate_token_bitmask(1, info.vocab_size)
        tokens = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        steps = []
        for token in tokens:
            matcher.fill_next_token_bitmask(bitmask)
            logits = torch.zeros(1, info.vocab_size)
            xgr.apply_token_bitmask_inplace(logits, bitmask)
            allowed = torch.isfinite(logits[0]).nonzero().flatten()
            text_tokens = allowed[~torch.isin(allowed, special)]  # special tokens' text: see the README
            steps.append(
                {
                    "text_tokens": len(text_tokens),
                    "digest": hashlib.sha256(text_tokens.numpy().tobytes()).hexdigest(),
                    "special_tokens": allowed[torch.isin(allowed, special)].tolist(),
                    "token_allowed": bool(torch.isfinite(logits[0, token])),
                    "accepted": matcher.accept_token(token),
                }
            )
        terminated = matcher.is_terminated()
        matcher.rollback(3)  # back before the last two text tokens and the stop token
        again = [matcher.accept_token(token) for token in tokens[-3:]]
        results.append(
            {"steps": steps, "terminated": terminated, "reaccepted": again, "terminated_again": matcher.is_terminated()}
        )
    # the compiler's cache: what it holds, forgotten on request (the grammars keep working)
    assert compiler.cache_limit_bytes == -1 and compiler.get_cache_size_bytes() >= compiled.memory_size_bytes > 0
    compiler.clear_cache()
    assert compiler.get_cache_size_bytes() == 0 and matcher.is_terminated()
    return results


def grammar_cases():
    """(name, Grammar, texts in the language, strings outside it)."""
    G = xgr.Grammar
    call = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<f="],
            "tags": [
                {
                    "type": "tag",
                    "begin": "<f=add>",
                    "content": {"type": "json_schema", "json_schema": call},
                    "end": "</f>",
                }
            ],
        },
    }
    return [
        (
            "ebnf",
            G.from_ebnf('start ::= "(" inner ")"\ninner ::= [a-z]+ | start', root_rule_name="start"),
            ["(ab)", "((xyz))"],
            ["(ab", "()", "(a)b"],
        ),
        (
            "json_schema",
            G.from_json_schema(json.dumps(PERSON), any_whitespace=False, strict_mode=True),
            ['{"name": "Al", "height": 2}'],
            ['{"name": "Al"}', '{"name":"Al","height":2}'],
        ),
        (
            "json_schema_indent",
            G.from_json_schema(PET, any_whitespace=False, indent=2),
            ['{\n  "kind": "cat",\n  "indoor": true,\n  "owner": null\n}'],
            ['{"kind": "cat", "indoor": true, "owner": null}'],
        ),
        ("regex", G.from_regex(r"[A-Z][a-z]{1,5}-\d{2}"), ["Abc-12", "Zz-00"], ["abc-12", "Abcdefg-12", "Ab-1"]),
        (
            "builtin_json",
            G.builtin_json_grammar(),
            ['[1, "a", {"b": null}]', '{"k": [true, -0.5e3]}'],
            ["[1,]", "{a: 1}", "-0.5e3", " [1]"],
        ),
        (
            "union",
            G.union(G.from_regex(r"\d+"), G.from_json_schema({"type": "boolean"}), G.from_ebnf('root ::= "none"')),
            ["42", "true", "none"],
            ["4x", "truex", "null"],
        ),
        (
            "concat",
            G.concat(G.from_ebnf('root ::= "x="'), G.from_json_schema({"type": "integer"}), G.from_regex(";")),
            ["x=-5;", "x=0;"],
            ["x=5", "x=1.5;", "y=1;"],
        ),
        (
            "structural_tag",
            G.from_structural_tag(tag),
            ['Hi <f=add>{"a": 1}</f> ok', "no call", '<f=add>{"a": 2, "b": "c"}</f>'],
            ['<f=add>{"b": "c"}</f>', '<f=mul>{"a": 1}</f>', '<f=add>{"a": 1}'],
        ),
    ]


def run_grammar_api(tokenizer_dir: str) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[tokenizer.eos_token_id])
    compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)  # every grammar compiled anew
    testing = importlib.import_module(xgr.__name__ + ".testing")
    special = sorted(i for i, added in tokenizer.added_tokens_decoder.items() if added.special)
    results, jobs = {}, []
    for name, grammar, texts, outside in grammar_cases():
        results[name] = {
            "accepts": [testing._is_grammar_accept_string(grammar, s) for s in texts + outside],
            "prefixes": [
                testing._is_grammar_accept_string(grammar, s[:-1], require_termination=False) for s in outside
            ],
        }
        compiled = compiler.compile_grammar(grammar)
        jobs += [
            (name, compiled, tokenizer.encode(t, add_special_tokens=False) + [tokenizer.eos_token_id]) for t in texts
        ]
    # All matchers in one BatchGrammarMatcher; row 0 is left alone, the others follow the jobs.
    matchers = [xgr.GrammarMatcher(compiled) for _, compiled, _ in jobs]
    batch = xgr.BatchGrammarMatcher(max_threads=2)
    bitmask = torch.full(xgr.get_bitmask_shape(len(jobs) + 1, info.vocab_size), -1, dtype=xgr.bitmask_dtype)
    steps = [[] for _ in jobs]
    for step in range(max(len(tokens) for _, _, tokens in jobs)):
        active = [k for k, (_, _, tokens) in enumerate(jobs) if step < len(tokens)]
        batch.batch_fill_next_token_bitmask([matchers[k] for k in active], bitmask, indices=[k + 1 for k in active])
        allowed = testing.bitmask_to_bool_mask(bitmask, info.vocab_size)
        for k in active:
            ids = allowed[k + 1].nonzero().flatten()
            text_ids = ids[~torch.isin(ids, torch.tensor(special))]
            single = testing._is_single_token_bitmask(bitmask, info.vocab_size, k + 1)
            rejected_text = (~allowed[k + 1]).nonzero().flatten()
            rejected_text = rejected_text[~torch.isin(rejected_text, torch.tensor(special))]
            steps[k].append(
                {
                    "text_tokens": len(text_ids),
                    "digest": hashlib.sha256(text_ids.numpy().tobytes()).hexdigest(),
                    # the ids, to say how two masks differ (__main__ keeps them where few)
                    "allowed_ids": text_ids.tolist(),
                    "rejected_ids": rejected_text.tolist() if len(rejected_text) <= 256 else None,
                    "special_tokens": ids[torch.isin(ids, torch.tensor(special))].tolist(),
                    "rejected": len(testing._get_masked_tokens_from_bitmask(bitmask, info.vocab_size, k + 1)),
                    "single": single[0] and single[1] not in special,
                    "token_allowed": bool(allowed[k + 1, jobs[k][2][step]]),
                }
            )
        accepted = xgr.BatchGrammarMatcher.batch_accept_token(
            [matchers[k] for k in active], [jobs[k][2][step] for k in active]
        )
        for k, ok in zip(active, accepted):
            steps[k][-1]["accepted"] = ok
    untouched = bool(bitmask[0].eq(-1).all())
    fresh = [xgr.GrammarMatcher(compiled) for _, compiled, _ in jobs]
    strings = [tokenizer.decode(tokens[:-1]) for _, _, tokens in jobs]
    by_string = xgr.BatchGrammarMatcher.batch_accept_string(fresh, strings)
    return {
        "cases": results,
        "jobs": [name for name, _, _ in jobs],
        "steps": steps,
        "terminated": [m.is_terminated() for m in matchers],
        "row_0_untouched": untouched,
        "accept_string": by_string,
        "can_end": [m.is_terminated() or m.accept_token(tokenizer.eos_token_id) for m in fresh],
    }


if __name__ == "__main__":
    if sys.argv[2:] == ["grammar_api"]:
        out = run_grammar_api(sys.argv[1])
        for step in (step for steps in out["steps"] for step in steps):
            step["allowed_ids"] = step["allowed_ids"] if len(step["allowed_ids"]) <= 64 else None
        json.dump(out, sys.stdout, indent=1)
    else:
        json.dump(run(sys.argv[1]), sys.stdout, indent=1)
