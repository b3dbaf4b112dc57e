"""XGrammar compatibility: a program written against xgrammar runs with `import pushmask as xgr`
and fills the same masks as xgrammar 0.2.8; xgrammar's keyword arguments keep their meaning;
validate_tokens, pushmask.testing, and pickle / JSON round trips of compiled grammars."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import pickle
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from support import TOKENIZERS, accepts_text, hf_tokenizer, require_shared, tokenizer_info

import pushmask as pm
import pushmask.testing as pmt
from pushmask.masks.walk import MASK_FIELDS

HERE = Path(__file__).parent
PROGRAM = HERE / "xgrammar_program.py"
# What tests/xgrammar_program.py printed when run with the real xgrammar 0.2.8 (pip install
# xgrammar==0.2.8; python tests/xgrammar_program.py ../shared/tokenizers/smollm2).
XGRAMMAR_RESULTS = HERE / "data" / "xgrammar_0.2.8_program_smollm2.json"
# What its run_grammar_api printed with xgrammar 0.2.8 (pip install --no-deps --target DIR xgrammar==0.2.8
# apache-tvm-ffi; PYTHONPATH=DIR python tests/xgrammar_program.py ../shared/tokenizers/smollm2 grammar_api).
XGRAMMAR_API_RESULTS = HERE / "data" / "xgrammar_0.2.8_grammar_api_smollm2.json"


def run_program(module_name: str, entry: str = "run"):
    """Run the program with its import line naming module_name (the only change)."""
    source = PROGRAM.read_text()
    assert source.count("\nimport xgrammar as xgr\n") == 1
    source = source.replace("\nimport xgrammar as xgr\n", f"\nimport {module_name} as xgr\n")
    namespace = {"__name__": "xgrammar_program"}
    exec(compile(source, str(PROGRAM), "exec"), namespace)
    return namespace[entry](str(require_shared(TOKENIZERS / "smollm2")))


@pytest.fixture(scope="module")
def pushmask_results():
    pytest.importorskip("torch")
    return run_program("pushmask")


def _compare(ours: list[dict], theirs: list[dict], stop_ids: set[int]) -> None:
    assert len(ours) == len(theirs)
    for case, (a, b) in enumerate(zip(ours, theirs)):
        assert {k: v for k, v in a.items() if k != "steps"} == {k: v for k, v in b.items() if k != "steps"}
        for step, (x, y) in enumerate(zip(a["steps"], b["steps"], strict=True)):
            where = f"case {case} step {step}"
            assert (x["text_tokens"], x["digest"]) == (y["text_tokens"], y["digest"]), where
            assert (x["token_allowed"], x["accepted"]) == (y["token_allowed"], y["accepted"]), where
            # pushmask never lets special tokens stand for their text (xgrammar allows them inside
            # strings); the stop token it allows exactly where xgrammar does.
            assert set(x["special_tokens"]) <= stop_ids, where
            assert set(x["special_tokens"]) == set(y["special_tokens"]) & stop_ids, where


def test_xgrammar_program_runs_with_only_the_import_changed(pushmask_results):
    """Every token of the texts is allowed and accepted, the stop token terminates, rollback and
    re-acceptance work, and every mask equals the one xgrammar 0.2.8 filled (recorded)."""
    for result in pushmask_results:
        assert all(step["token_allowed"] and step["accepted"] for step in result["steps"])
        assert result["terminated"] and result["terminated_again"] and all(result["reaccepted"])
    tokenizer = hf_tokenizer("smollm2")
    _compare(pushmask_results, json.loads(XGRAMMAR_RESULTS.read_text()), {tokenizer.eos_token_id})


@pytest.mark.skipif(
    importlib.util.find_spec("xgrammar") is None,
    reason="xgrammar is not installed (pip install xgrammar): compared with its recorded results",
)
def test_xgrammar_program_equals_a_live_xgrammar_run(pushmask_results):
    _compare(pushmask_results, run_program("xgrammar"), {hf_tokenizer("smollm2").eos_token_id})


# ------------------------------------------------------------------ Grammar constructors, BatchGrammarMatcher

# The tokens pushmask allows where xgrammar 0.2.8's mask does not, per case, and why; nothing else
# may differ but xgrammar's tokens that begin with a UTF-8 continuation byte (free text that
# would not be UTF-8, which pushmask never allows) and special tokens (see _compare).
PUSHMASK_ALSO_ALLOWS = {
    "ebnf": {"))": "after ((xy: ((xy)) is in the language; xgrammar's mask leaves it out, its accept_token takes it"},
    "concat": {"0": "-0 is a JSON integer", ".": "0.0 is an integer (JSON Schema: a number with zero fraction)"},
    "structural_tag": {".": "1.0 is an integer (JSON Schema: a number with zero fraction)"},
}


def _digest(ids) -> str:
    return hashlib.sha256(np.array(sorted(ids), dtype=np.int64).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def pushmask_api_results():
    pytest.importorskip("torch")
    return run_program("pushmask", "run_grammar_api")


def _compare_api(ours: dict, theirs: dict) -> int:
    """Everything equal but the documented mask differences; how many masks differed."""
    for key in ("cases", "jobs", "terminated", "row_0_untouched", "accept_string", "can_end"):
        assert ours[key] == theirs[key], key
    tokenizer, info = hf_tokenizer("smollm2"), tokenizer_info("smollm2")
    text_ids = set(range(info.vocab_size)) - set(info.special_token_ids)
    stop = {tokenizer.eos_token_id}
    differed = 0
    for job, (a, b) in enumerate(zip(ours["steps"], theirs["steps"], strict=True)):
        case = ours["jobs"][job]
        extra = {
            i
            for text in PUSHMASK_ALSO_ALLOWS.get(case, {})
            for i in tokenizer.encode(text, add_special_tokens=False)
            if tokenizer.decode([i]) == text
        }
        for step, (x, y) in enumerate(zip(a, b, strict=True)):
            where = f"{case} (job {job}) step {step}"
            assert x["accepted"] == y["accepted"] and x["token_allowed"] and x["accepted"], where
            assert y["token_allowed"] or (case, "))") in [
                (c, t) for c in PUSHMASK_ALSO_ALLOWS for t in PUSHMASK_ALSO_ALLOWS[c]
            ], where
            assert set(x["special_tokens"]) <= stop and set(x["special_tokens"]) == set(y["special_tokens"]) & stop
            ids = set(x["allowed_ids"])
            if _digest(ids) == y["digest"]:
                continue
            differed += 1
            present = sorted(extra & ids)
            if any(
                _digest(ids - {t for k, t in enumerate(present) if bits >> k & 1}) == y["digest"]
                for bits in range(1, 1 << len(present))
            ):
                continue  # exactly some of the documented tokens
            if y["allowed_ids"] is not None:
                theirs_ids = set(y["allowed_ids"])
            else:
                assert y["rejected_ids"] is not None, (
                    f"{where}: masks differ ({x['text_tokens']} vs {y['text_tokens']})"
                )
                theirs_ids = text_ids - set(y["rejected_ids"])
            assert ids - theirs_ids <= extra, where
            assert all(0x80 <= info.decoded_vocab[i][0] <= 0xBF for i in theirs_ids - ids), where
    return differed


def test_grammar_api_program_masks_equal_xgrammars_but_the_documented_tokens(pushmask_api_results):
    """Grammars built with Grammar.from_ebnf / from_json_schema / from_regex / from_structural_tag /
    builtin_json_grammar / union / concat, compiled with compile_grammar(Grammar), filled by one
    BatchGrammarMatcher (indices, a spare row left alone), advanced by batch_accept_token, checked
    with batch_accept_string and xgrammar.testing's helpers: the same results as xgrammar 0.2.8
    (recorded), masks included, but for the tokens PUSHMASK_ALSO_ALLOWS lists."""
    differed = _compare_api(pushmask_api_results, json.loads(XGRAMMAR_API_RESULTS.read_text()))
    assert differed < sum(len(steps) for steps in pushmask_api_results["steps"]) // 3


@pytest.mark.skipif(
    importlib.util.find_spec("xgrammar") is None,
    reason="xgrammar is not installed (pip install xgrammar): compared with its recorded results",
)
def test_grammar_api_program_equals_a_live_xgrammar_run(pushmask_api_results):
    _compare_api(pushmask_api_results, run_program("xgrammar", "run_grammar_api"))


def test_grammar_constructors_refuse_what_is_not_a_grammar():
    with pytest.raises(TypeError, match="argument 1 is a str, not a Grammar"):
        pm.Grammar.union(pm.Grammar.from_regex("a"), "b")
    with pytest.raises(ValueError, match="at least one grammar"):
        pm.Grammar.concat()
    with pytest.raises(TypeError, match="ebnf_string must be a str"):
        pm.Grammar.from_ebnf(b'root ::= "a"')
    with pytest.raises(pm.GrammarError):
        pm.Grammar.from_ebnf('root ::= "a" undefined_rule')
    with pytest.raises(ValueError, match="max_threads"):
        pm.BatchGrammarMatcher(max_threads=0)
    matchers = [pm.GrammarMatcher(pm.GrammarCompiler(tokenizer_info("smollm2")).compile_regex("a"))]
    with pytest.raises(ValueError, match="1 matchers but 2 tokens"):
        pm.BatchGrammarMatcher.batch_accept_token(matchers, [1, 2])
    with pytest.raises(pm.ArgumentTypeError, match="token_id must be an int, got float"):
        pm.BatchGrammarMatcher.batch_accept_token(matchers, [64.0])  # as accept_token: not read as token 64


def test_union_and_concat_keep_value_checks(compiler):
    """Parts with value checks (uniqueItems) keep them inside union and concat."""
    unique = pm.Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    both = compiler.compile_grammar(
        pm.Grammar.concat(unique, pm.Grammar.from_regex(";"), pm.Grammar.union(unique, pm.Grammar.from_regex("x")))
    )
    assert both.value_checks
    assert accepts_text(both, "[1, 2];[3]") and accepts_text(both, "[1];x")
    assert not accepts_text(both, "[1, 1];x") and not accepts_text(both, "[1];[2, 2]")


# ------------------------------------------------------------------ compile_json_schema keywords

OBJ = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "integer"}}},
    "required": ["a"],
}
LAYOUTS = [
    '{"a":1}',
    '{"a": 1}',
    '{ "a" : 1 }',
    '{"a": 1, "b": [1, 2]}',
    '{"a":1,"b":[1,2]}',
    '{"a": 1,"b": [1,2]}',
    '{\n  "a": 1\n}',
    '{"a": 1, "c": 2}',
    '{"b": [], "a": 1}',
    '{"a":   1}',
]


@pytest.fixture(scope="module")
def compiler():
    return pm.GrammarCompiler(tokenizer_info("smollm2"))


def accepted(compiled, texts):
    return [text for text in texts if accepts_text(compiled, text)]


# Which of LAYOUTS xgrammar 0.2.8 accepts (xgrammar.testing._json_schema_to_ebnf with these
# arguments, then _is_grammar_accept_string), per keyword arguments.
XGRAMMAR_LAYOUTS = [
    (
        {},
        [
            '{"a":1}',
            '{"a": 1}',
            '{ "a" : 1 }',
            '{"a": 1, "b": [1, 2]}',
            '{"a":1,"b":[1,2]}',
            '{"a": 1,"b": [1,2]}',
            '{\n  "a": 1\n}',
            '{"a":   1}',
        ],
    ),
    ({"any_whitespace": False}, ['{"a": 1}', '{"a": 1, "b": [1, 2]}']),
    ({"any_whitespace": False, "indent": 2}, ['{\n  "a": 1\n}']),
    ({"any_whitespace": False, "separators": (",", ":")}, ['{"a":1}', '{"a":1,"b":[1,2]}']),
    (
        {"any_whitespace": True, "indent": 2, "separators": (",", ":")},
        [
            '{"a":1}',
            '{"a": 1}',
            '{ "a" : 1 }',
            '{"a": 1, "b": [1, 2]}',
            '{"a":1,"b":[1,2]}',
            '{"a": 1,"b": [1,2]}',
            '{\n  "a": 1\n}',
            '{"a":   1}',
        ],
    ),
    (
        {"strict_mode": False},
        [
            '{"a":1}',
            '{"a": 1}',
            '{ "a" : 1 }',
            '{"a": 1, "b": [1, 2]}',
            '{"a":1,"b":[1,2]}',
            '{"a": 1,"b": [1,2]}',
            '{\n  "a": 1\n}',
            '{"a": 1, "c": 2}',
            '{"a":   1}',
        ],
    ),
    (
        {"max_whitespace_cnt": 2},
        ['{"a":1}', '{"a": 1}', '{ "a" : 1 }', '{"a": 1, "b": [1, 2]}', '{"a":1,"b":[1,2]}', '{"a": 1,"b": [1,2]}'],
    ),
    (
        {"any_order": True},
        [
            '{"a":1}',
            '{"a": 1}',
            '{ "a" : 1 }',
            '{"a": 1, "b": [1, 2]}',
            '{"a":1,"b":[1,2]}',
            '{"a": 1,"b": [1,2]}',
            '{\n  "a": 1\n}',
            '{"b": [], "a": 1}',
            '{"a":   1}',
        ],
    ),
]


@pytest.mark.parametrize(
    "kwargs,expected", XGRAMMAR_LAYOUTS, ids=lambda v: json.dumps(v) if isinstance(v, dict) else ""
)
def test_xgrammar_keywords_accept_what_xgrammar_accepts(compiler, kwargs, expected):
    got = accepted(compiler.compile_json_schema(json.dumps(OBJ), **kwargs), LAYOUTS)
    assert got == expected
    validator = jsonschema.Draft202012Validator(OBJ)
    assert all(validator.is_valid(json.loads(text)) for text in got)


@pytest.mark.parametrize(
    "schema,strict,non_strict",
    [
        # (schema, texts accepted with strict_mode=True, with strict_mode=False), as xgrammar 0.2.8
        # accepts them except where noted
        ({"type": "object"}, ["{}", '{"x": 1}', '{"a": 1}'], ["{}", '{"x": 1}', '{"a": 1}']),
        ({"type": "object", "properties": {}}, ["{}"], ["{}", '{"x": 1}', '{"a": 1}']),
        (
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            ["{}", '{"a": 1}'],
            ["{}", '{"x": 1}', '{"a": 1}'],
        ),
        (
            {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
            ["{}", '{"x": 1}', '{"a": 1}'],
            ["{}", '{"x": 1}', '{"a": 1}'],
        ),
        ({"type": "array", "prefixItems": [{"type": "integer"}]}, ["[]", "[1]"], ["[]", "[1]", "[1, 2]"]),
        # xgrammar 0.2.8 also refuses [] here, which the schema allows
        (
            {"type": "array", "prefixItems": [{"type": "integer"}], "items": True},
            ["[]", "[1]", "[1, 2]"],
            ["[]", "[1]", "[1, 2]"],
        ),
    ],
)
def test_strict_mode_as_xgrammar(compiler, schema, strict, non_strict):
    texts = ["{}", '{"x": 1}', '{"a": 1}', "[]", "[1]", "[1, 2]"]
    assert accepted(compiler.compile_json_schema(schema), texts) == strict  # strict_mode=True is the default
    loose = accepted(compiler.compile_json_schema(schema, strict_mode=False), texts)
    assert loose == non_strict
    validator = jsonschema.Draft202012Validator(schema)
    assert loose == [t for t in texts if validator.is_valid(json.loads(t))]  # without strict mode: the spec


def test_xgrammar_and_pushmask_names_together(compiler):
    same = compiler.compile_json_schema(OBJ, strict_mode=False, additional_properties_default=True)
    assert accepted(same, ['{"a": 1, "c": 2}'])
    with pytest.raises(ValueError, match="strict_mode"):
        compiler.compile_json_schema(OBJ, strict_mode=True, additional_properties_default=True)
    with pytest.raises(ValueError, match="max_whitespace"):
        compiler.compile_json_schema(OBJ, max_whitespace_cnt=2, max_whitespace=3)
    with pytest.raises(ValueError, match="any_whitespace"):
        compiler.compile_json_schema(OBJ, any_whitespace=True, whitespace="compact")
    compact = compiler.compile_json_schema(OBJ, any_whitespace=False, whitespace="compact")
    assert accepted(compact, LAYOUTS) == ['{"a":1}', '{"a":1,"b":[1,2]}']


# ------------------------------------------------------------------ matcher: validate_tokens, fork


def _allowed(matcher) -> np.ndarray:
    bitmask = pm.allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return np.asarray(bitmask).copy()


def test_validate_tokens_is_the_longest_accepted_prefix_and_changes_nothing(compiler):
    tokenizer = hf_tokenizer("smollm2")
    compiled = compiler.compile_json_schema(OBJ, any_whitespace=False)
    good = tokenizer.encode('{"a": 12, "b": [3]}', add_special_tokens=False) + [tokenizer.eos_token_id]
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_token(good[0])
    before = _allowed(matcher)
    rng = np.random.default_rng(0)
    for cut in range(1, len(good) + 1):
        draft = good[1:cut] + rng.integers(0, matcher.vocab_size, 3).tolist()
        got = matcher.validate_tokens(draft)
        reference = matcher.fork()  # brute force: accept one by one on an independent copy
        expected = []
        for token in draft:
            if reference.is_terminated() or not reference.accept_token(token):
                break
            expected.append(token)
        assert got == expected
        assert matcher.num_accepted_tokens == 1 and np.array_equal(_allowed(matcher), before)
    assert matcher.validate_tokens(good[1:]) == good[1:]


# ------------------------------------------------------------------ pushmask.testing


def test_testing_helpers():
    assert pmt._is_grammar_accept_string('root ::= "a"*', "aa")
    assert not pmt._is_grammar_accept_string('root ::= "a" "b"', "a")
    assert pmt._is_grammar_accept_string('root ::= "a" "b"', "a", require_termination=False)
    assert not pmt._is_grammar_accept_string('root ::= "a" "b"', "ax", require_termination=False)
    torch = pytest.importorskip("torch")
    allowed = torch.zeros(2, 70, dtype=torch.bool)
    allowed[0, [0, 2, 69]] = True
    allowed[1, 5] = True
    bitmask = pmt.bool_mask_to_bitmask(allowed)
    assert bitmask.dtype == torch.int32 and bitmask.tolist()[0][:2] == [5, 0]  # as xgrammar packs
    assert bitmask.tolist()[0][2] == -32  # token 69 (bit 5) and the padding bits 6..31
    assert torch.equal(pmt.bitmask_to_bool_mask(bitmask, 70), allowed)
    assert pmt.bitmask_to_bool_mask(bitmask).shape == (2, 96)
    assert bool(pmt.bitmask_to_bool_mask(bitmask)[0, 70:].all())  # padding bits are 1, as in xgrammar
    rejected = pmt._get_masked_tokens_from_bitmask(bitmask, 70, index=0)
    assert rejected == [t for t in range(70) if t not in (0, 2, 69)]
    assert pmt._is_single_token_bitmask(bitmask, 70, index=1) == (True, 5)
    assert pmt._is_single_token_bitmask(bitmask, 70, index=0) == (False, -1)
    assert pmt._get_masked_tokens_from_bitmask(np.asarray(bitmask), 70, index=1) == [t for t in range(70) if t != 5]


# ------------------------------------------------------------------ pickling and JSON


def _masks_along(compiled, tokens) -> list[np.ndarray]:
    matcher = pm.GrammarMatcher(compiled)
    out = []
    for token in tokens:
        out.append(_allowed(matcher))
        assert matcher.accept_token(token)
    return out


def test_compiled_grammar_and_tokenizer_info_round_trips(compiler, tmp_path):
    """Pickle (also into another process) and serialize_json give grammars whose masks equal
    the original's at every step; TokenizerInfo comes back with the same vocabulary."""
    info = compiler.tokenizer_info
    tokenizer = hf_tokenizer("smollm2")
    compiled = compiler.compile_json_schema(OBJ)
    tokens = tokenizer.encode('{"a": -7, "b": [1, 20]}', add_special_tokens=False) + [tokenizer.eos_token_id]
    reference = _masks_along(compiled, tokens)  # also computes masks, which travel with the grammar

    for restored_info in (pickle.loads(pickle.dumps(info)), pm.TokenizerInfo.deserialize_json(info.serialize_json())):
        assert restored_info.vocab_hash == info.vocab_hash
        assert restored_info.decoded_vocab == info.decoded_vocab
        assert restored_info.stop_token_ids == info.stop_token_ids and restored_info.vocab_type == info.vocab_type

    copies = [
        pickle.loads(pickle.dumps(compiled)),
        pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), info),
        pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), pickle.loads(pickle.dumps(info))),
    ]
    for copy in copies:
        assert copy.compiler is pm.GrammarCompiler.shared(info)  # joins this process's compiler for the vocabulary
        kinds = slice(0, None, MASK_FIELDS)  # a state's mask kind, -1 while not computed
        assert copy.mask_index[kinds].tolist() == compiled.mask_index[kinds].tolist()  # masks came along
        assert all(np.array_equal(a, b) for a, b in zip(_masks_along(copy, tokens), reference, strict=True))

    path = tmp_path / "grammar.pkl"
    path.write_bytes(pickle.dumps(compiled))
    code = (
        "import pickle, sys, numpy as np, pushmask as pm\n"
        "g = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "m = pm.GrammarMatcher(g); out = []\n"
        "for t in map(int, sys.argv[3].split(',')):\n"
        "    b = pm.allocate_token_bitmask(1, m.vocab_size); m.fill_next_token_bitmask(b)\n"
        "    out.append(np.asarray(b)); assert m.accept_token(t)\n"
        "np.save(sys.argv[2], np.stack(out))\n"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "masks.npy"), ",".join(map(str, tokens))], check=True
    )
    assert np.array_equal(np.load(tmp_path / "masks.npy"), np.stack(reference))


def test_grammar_compiler_takes_xgrammars_constructor(compiler):
    """GrammarCompiler(tokenizer_info, *, max_threads, cache_enabled=True, cache_limit_bytes=...),
    as XGrammar's Python API documents it: keyword arguments, -1 for no cache limit, the limit
    bounding get_cache_size_bytes (one grammar past it stays), clear_cache emptying it.  Unlike
    XGrammar's, the default limit is bounded (DEFAULT_CACHE_LIMIT_BYTES); max_threads defaults to
    "auto" (the thread policy's default) and takes XGrammar's 8."""
    from pushmask.core.threads import default_max_threads
    from pushmask.masks.compiler import DEFAULT_CACHE_LIMIT_BYTES

    info = compiler.tokenizer_info
    default = pm.GrammarCompiler(info)
    assert (default.max_threads, default.cache_enabled, default.cache_limit_bytes) == (
        default_max_threads(),
        True,
        DEFAULT_CACHE_LIMIT_BYTES,
    )
    assert pm.GrammarCompiler(info, max_threads=8).max_threads == 8
    with pytest.raises(TypeError):
        pm.GrammarCompiler(info, 8)  # keyword-only, as in XGrammar
    for bad in ({"max_threads": 0}, {"cache_limit_bytes": -2}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            pm.GrammarCompiler(info, **bad)
    with pytest.raises(pm.ArgumentTypeError, match="cache_enabled"):
        pm.GrammarCompiler(info, cache_enabled="yes")
    schemas = [
        {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]} for i in range(4)
    ]
    one = default.compile_json_schema(schemas[0])
    limit = 3 * one.memory_size_bytes  # room for about one grammar in the grammars' half
    small = pm.GrammarCompiler(info, max_threads=1, cache_enabled=True, cache_limit_bytes=limit)
    compiled = [small.compile_json_schema(schema) for schema in schemas]
    assert small.compile_json_schema(schemas[-1]) is compiled[-1]  # the newest stays
    assert small.compile_json_schema(schemas[0]) is not compiled[0]  # the oldest went
    assert 0 < small.get_cache_size_bytes() <= limit + one.memory_size_bytes
    small.clear_cache()
    assert small.get_cache_size_bytes() == 0 and accepted(compiled[0], ['{"k0": 1}']) == ['{"k0": 1}']
    off = pm.GrammarCompiler(info, cache_enabled=False)
    assert off.compile_json_schema(schemas[0]) is not off.compile_json_schema(schemas[0])
    assert off.get_cache_size_bytes() == 0


def test_a_restored_grammar_keeps_the_stop_tokens_it_was_compiled_with():
    """A grammar read back from pickle joins a compiler of its own vocabulary *and stop tokens*:
    a live compiler made first for the same tokens with other stops (the same vocab_hash: the
    EOS token stays special) must not lend it those stops.  Compilers that memoise their grammars
    (each grammar holds its compiler) live until the garbage collector finds the cycle, so such a
    compiler can be alive long after its test; a pickled grammar joined one and refused EOS."""
    tokenizer = hf_tokenizer("smollm2")
    eos = tokenizer.eos_token_id
    limits = pm.Limits(max_stack_tops=4095)  # a registry slot of this test's own
    no_stops = pm.TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[])
    first = pm.GrammarCompiler(no_stops, limits=limits)  # made first and alive: the old key's shared compiler
    info = pm.TokenizerInfo.from_huggingface(tokenizer)
    assert no_stops.vocab_hash == info.vocab_hash and eos in info.stop_token_ids and not no_stops.stop_token_ids
    compiled = pm.GrammarCompiler(info, limits=limits).compile_json_schema({"type": "integer"})
    tokens = tokenizer.encode("17", add_special_tokens=False) + [eos]
    for copy in (
        pickle.loads(pickle.dumps(compiled)),
        pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), info),
    ):
        assert copy.compiler is not first and copy.tokenizer_info.stop_token_ids == info.stop_token_ids
        matcher = pm.GrammarMatcher(copy)
        assert all(matcher.accept_token(t) for t in tokens) and matcher.is_terminated()
    # restored with the stop-less vocabulary, it takes that one's stops: EOS is no token of it
    copy = pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), no_stops)
    matcher = pm.GrammarMatcher(copy)
    assert copy.compiler is first and all(matcher.accept_token(t) for t in tokens[:-1])
    assert matcher.can_end() and not matcher.accept_token(eos)


def test_deserialize_refuses_other_vocabularies_and_bad_text(compiler):
    compiled = compiler.compile_grammar('root ::= "yes" | "no"')
    other = pm.TokenizerInfo.from_vocab(["y", "e", "s", "n", "o", "</s>"], stop_token_ids=[5])
    with pytest.raises(pm.DeserializeError, match="another vocabulary"):
        pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), other)
    with pytest.raises(pm.DeserializeError, match="invalid"):
        pm.CompiledGrammar.deserialize_json("{not json", compiler.tokenizer_info)
    with pytest.raises(pm.DeserializeError, match="not a serialized pushmask CompiledGrammar"):
        pm.CompiledGrammar.deserialize_json(compiler.tokenizer_info.serialize_json(), compiler.tokenizer_info)
    payload = json.loads(compiled.serialize_json())
    payload["version"] = 99
    with pytest.raises(pm.DeserializeError, match="version"):
        pm.CompiledGrammar.deserialize_json(json.dumps(payload), compiler.tokenizer_info)
    small = pm.GrammarMatcher(
        pm.CompiledGrammar.deserialize_json(
            pm.GrammarCompiler(other).compile_grammar('root ::= "yes" | "no"').serialize_json(), other
        )
    )
    assert small.accept_string("no") and small.can_end()


def test_token_terminals_survive_pickling(compiler):
    """A grammar with a token terminal keeps it through pickle and serialize_json: the token is
    allowed by id exactly where the original allows it, and its text spelling is not."""
    info = compiler.tokenizer_info
    tokenizer = hf_tokenizer("smollm2")
    special = tokenizer.eos_token_id
    compiled = compiler.compile_grammar(f'root ::= "a" <[{special}]> "b"')
    a, b = (tokenizer.encode(text, add_special_tokens=False) for text in ("a", "b"))
    for copy in (
        compiled,
        pickle.loads(pickle.dumps(compiled)),
        pm.CompiledGrammar.deserialize_json(compiled.serialize_json(), info),
    ):
        assert copy.token_terminals.keys() == {special}
        matcher = pm.GrammarMatcher(copy, override_stop_tokens=[])
        assert matcher.accept_tokens(a)
        assert matcher.get_next_token_mask().nonzero()[0].tolist() == [special]
        assert matcher.accept_token(special) and matcher.accept_tokens(b) and matcher.can_end()


def test_grammars_with_value_checks_refuse_to_leave_the_process(compiler):
    """Value checks hold jsonschema validators of this process: pickling and serialize_json say so
    instead of writing a grammar that would lose its checks."""
    compiled = compiler.compile_json_schema({"type": "array", "uniqueItems": True})
    assert compiled.value_checks
    for write in (lambda: pickle.dumps(compiled), compiled.serialize_json):
        with pytest.raises(ValueError, match="value checks"):
            write()
    with pytest.warns(UserWarning, match="widened 'uniqueItems'"):
        widened = compiler.compile_json_schema({"type": "array", "uniqueItems": True}, value_checks=False, lenient=True)
    assert not widened.value_checks
