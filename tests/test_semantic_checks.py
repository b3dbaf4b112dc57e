"""Value checks in the matcher (masks/value_checks.py): uniqueItems on open item types, oneOf
whose branches overlap and the distinct names of undeclared members minProperties counts, against independent oracles -- jsonschema's verdicts, json.loads, and
brute force over a small vocabulary (every token's bit against the completions of the text)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import (  # noqa: E402
    decodable_prefix,
    grammar_compiler,
    hf_tokenizer,
    json_prefix_completes,
    unique_strings_prefix_ok,
)

import pushmask as pm  # noqa: E402
from pushmask.core.errors import UnsupportedSchemaError  # noqa: E402
from pushmask.grammar.json_checks import json_key  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402

UNIQUE_STRINGS = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
UNIQUE_NUMBERS = {"type": "array", "items": {"type": "number"}, "uniqueItems": True}
UNIQUE_ANY = {"type": "array", "uniqueItems": True}
UNIQUE_NESTED = {
    "type": "object",
    "properties": {
        "tags": {
            "type": "array",
            "uniqueItems": True,
            "items": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        }
    },
}
# oneOfs whose overlap no negation can remove (not dependentSchemas, not uniqueItems)
ONE_OF_REQUIRED = {
    "type": "object",
    "oneOf": [{"required": ["a"], "dependentSchemas": {"a": {"required": ["c"]}}}, {"required": ["b"]}],
}
ONE_OF_IN_ITEMS = {
    "type": "array",
    "items": {"oneOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "maxItems": 2}]},
}
ONE_OF_UNIQUE = {"oneOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "items": {"type": "integer"}}]}
# minProperties past the declared members: the undeclared ones counted, their names distinct
MIN_EXTRA = {"type": "object", "minProperties": 3, "maxProperties": 4}
MIN_OPEN = {"type": "object", "minProperties": 2, "additionalProperties": {"type": ["integer", "object"]}}
CHECKED = [
    UNIQUE_STRINGS,
    UNIQUE_NUMBERS,
    UNIQUE_ANY,
    UNIQUE_NESTED,
    ONE_OF_REQUIRED,
    ONE_OF_IN_ITEMS,
    ONE_OF_UNIQUE,
    MIN_EXTRA,
    MIN_OPEN,
]


def _compile(compiler, schema, **options):
    """Members in any order, so every serialisation of a valid object is in the language."""
    return compiler.compile_ir(
        json_schema_to_grammar(schema, property_order="any", additional_properties_default=True, **options)
    )


def _random_value(rng: random.Random, depth: int = 0):
    """Small JSON values with many equal pairs (1 and 1.0, reordered objects, true and 1)."""
    kind = rng.choice(["int", "float", "str", "bool", "null", "list", "dict"] if depth < 2 else ["int", "str", "bool"])
    if kind == "int":
        return rng.choice([0, 1, 2, -1])
    if kind == "float":
        return rng.choice([1.0, 0.5, 2.0])
    if kind == "str":
        return rng.choice(["a", "b", "ab", ""])
    if kind == "bool":
        return rng.choice([True, False])
    if kind == "null":
        return None
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 2))]
    keys = rng.sample(["a", "b", "c"], rng.randint(0, 3))
    return {k: _random_value(rng, depth + 1) for k in keys}


def _random_instance(rng: random.Random, schema):
    if schema is UNIQUE_STRINGS:
        return [rng.choice(["a", "b", "ab", "", "a\u00e9"]) for _ in range(rng.randint(0, 4))]
    if schema is UNIQUE_NUMBERS:
        return [rng.choice([1, 1.0, 2, 0.5, -0.0, 0, 10]) for _ in range(rng.randint(0, 4))]
    if schema is UNIQUE_ANY:
        pool = [
            1,
            1.0,
            True,
            0,
            False,
            None,
            "a",
            {"a": 1, "b": [2]},
            {"b": [2.0], "a": 1},
            [1],
            [True],
            _random_value(rng),
        ]
        return [rng.choice(pool) for _ in range(rng.randint(0, 4))]
    if schema is UNIQUE_NESTED:
        return {"tags": [[rng.choice([1, 2]) for _ in range(rng.randint(0, 2))] for _ in range(rng.randint(0, 3))]}
    if schema is ONE_OF_IN_ITEMS:
        return [[rng.choice([1, 2, "a"]) for _ in range(rng.randint(0, 4))] for _ in range(rng.randint(0, 3))]
    if schema is ONE_OF_UNIQUE:
        return [rng.choice([1, 2, 1.0, "a"]) for _ in range(rng.randint(0, 3))]
    if schema in (MIN_EXTRA, MIN_OPEN):
        names = rng.sample(["a", "b", "c", "d", "e"], rng.randint(0, 5))
        return {k: rng.choice([1, {"a": 1}, {}]) for k in names}
    return {k: _random_value(rng, 1) for k in rng.sample(["a", "b", "c"], rng.randint(0, 3))}


def test_json_key_is_uniqueitems_equality():
    """Two values have equal keys exactly when jsonschema says [a, b] breaks uniqueItems."""
    rng = random.Random(0)
    validator = jsonschema.Draft202012Validator({"uniqueItems": True})
    pairs = [(1, 1.0), (True, 1), (False, 0), ({"a": 1, "b": 2}, {"b": 2, "a": 1.0}), ([1], [1.0]), (None, None)]
    pairs += [(_random_value(rng), _random_value(rng)) for _ in range(3000)]
    for a, b in pairs:
        assert (json_key(a) == json_key(b)) == (not validator.is_valid([a, b])), (a, b)


@pytest.mark.parametrize("schema", CHECKED, ids=lambda s: json.dumps(s)[:60])
def test_schemas_compile_to_checked_rules(schema):
    """Each test schema is one the grammar alone cannot express: without value checks it is
    unsupported, with them it compiles to checked rules."""
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_grammar(schema, value_checks=False)
    assert json_schema_to_grammar(schema).checks


@pytest.mark.parametrize("schema", CHECKED, ids=lambda s: json.dumps(s)[:60])
def test_tokenized_instances_match_jsonschema(schema):
    """Random instances, valid and invalid by jsonschema, fed token by token (Llama-3) and as one
    string: accepted (and able to end) exactly when valid."""
    compiler, tokenizer = grammar_compiler("llama3"), hf_tokenizer("llama3")
    compiled = _compile(compiler, schema)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(1)
    seen = {True: 0, False: 0}
    for _ in range(120):
        instance = _random_instance(rng, schema)
        valid = validator.is_valid(instance)
        seen[valid] += 1
        for text in (json.dumps(instance, separators=(",", ":")), json.dumps(instance, indent=1)):
            matcher = pm.GrammarMatcher(compiled)
            accepted = all(matcher.accept_token(t) for t in tokenizer.encode(text, add_special_tokens=False))
            assert (accepted and matcher.can_end()) == valid, text
            assert pm.GrammarMatcher(compiled).accept_string(text) or not valid, text
    assert seen[True] >= 10 and seen[False] >= 10, seen


@pytest.mark.parametrize("schema", CHECKED, ids=lambda s: json.dumps(s)[:60])
def test_mask_guided_walks_validate(schema):
    """Random walks that take only masked-in tokens (Llama-3, a token budget of 24): no mask is
    empty before the stop token, every walk finishes within the budget in JSON that jsonschema
    accepts, every prefix can still be completed to JSON and, for an array of strings, to a
    valid one (json.loads and jsonschema on closing tails), and each mask agrees with
    accept_token on the token taken and on a sample of the rejected ones."""
    compiled = _compile(grammar_compiler("llama3"), schema)
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(2)
    info = compiled.tokenizer_info
    for _ in range(8):
        matcher = pm.GrammarMatcher(compiled, max_tokens=24)
        plain = pm.GrammarMatcher(compiled)  # the same text without a budget: mask vs accept_token
        taken = []
        while not matcher.is_terminated():
            allowed = np.flatnonzero(matcher.get_next_token_mask())
            assert len(allowed), f"empty mask after {info.decode_tokens(taken)!r}"
            token = int(rng.choice(allowed))
            plain_allowed = plain.get_next_token_mask()
            assert plain_allowed[token]
            for other in rng.sample(range(info.vocab_size), 20) + allowed.tolist()[:20]:
                if other not in info.stop_token_ids:
                    assert plain.fork().accept_token(other) == plain_allowed[other]
            assert matcher.accept_token(token) and plain.accept_token(token)
            taken.append(token)
            if token not in info.stop_token_ids:
                prefix = decodable_prefix(info.decode_tokens(taken))
                assert json_prefix_completes(prefix), prefix
                assert schema is not UNIQUE_STRINGS or unique_strings_prefix_ok(prefix), prefix
        assert len(taken) <= 25
        text = info.decode_tokens([t for t in taken if t not in info.stop_token_ids]).decode("utf-8")
        assert validator.is_valid(json.loads(text)), text
        assert schema not in (MIN_EXTRA, MIN_OPEN) or _names_distinct(text), text


def _names_distinct(text: str) -> bool:
    """Are the member names of the top-level object distinct?  (json.loads keeps the last of a
    repeated name; only the object minProperties counts is checked, nested ones may repeat.)"""
    names = [name for name, _ in json.loads(text, object_pairs_hook=list)]
    return len(set(names)) == len(names)


# -- brute force over a small vocabulary -------------------------------------------------------

SMALL_VOCAB = [
    "[",
    "]",
    ",",
    '"',
    "a",
    "b",
    " ",
    '"a"',
    '"b"',
    'a"',
    '",',
    '"]',
    "{",
    "}",
    ":",
    "1",
    "2",
    '"a":',
    '"b":',
    '"c":',
    "}]",
    ",{",
    "</s>",
]
STOP = len(SMALL_VOCAB) - 1


@pytest.fixture(scope="module")
def small_compiler():
    info = pm.TokenizerInfo.from_vocab(SMALL_VOCAB, stop_token_ids=[STOP])
    return pm.GrammarCompiler(info)


def _unique_strings_oracle(text: str) -> bool:
    """Is `text` the start of an array of distinct strings?  Tries completions that close an
    open string with letters no item holds, then the array."""
    validator = jsonschema.Draft202012Validator(UNIQUE_STRINGS)
    for tail in ("", "]", '"]', 'Zq"]', '"Zq"]', ' "Zq"]', "[]"):
        try:
            value = json.loads(text + tail)
        except ValueError:
            continue
        if validator.is_valid(value):
            return True
    return False


def _closed_value_oracle(schema, widened):
    """For a checked root value: the text must be a prefix of the widened (unchecked) grammar,
    and once json.loads reads it whole, jsonschema must accept it (the check point)."""
    validator = jsonschema.Draft202012Validator(schema)

    def oracle(text: str) -> bool:
        if not pm.GrammarMatcher(widened).accept_string(text):
            return False
        try:
            value = json.loads(text)
        except ValueError:
            return True  # not closed yet
        return validator.is_valid(value)

    return oracle


MIN_NESTED = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "minProperties": 3,
    "additionalProperties": {"type": ["integer", "object"], "additionalProperties": {"type": "integer"}},
}
# the undeclared names from a pattern only (additionalProperties false): endlessly many still
MIN_PATTERNED = {
    "type": "object",
    "minProperties": 3,
    "patternProperties": {"^[ab]+$": MIN_NESTED["additionalProperties"]},
    "additionalProperties": False,
}


def _distinct_names_oracle(schema, widened, fresh: tuple[str, ...]):
    """Is `text` a prefix of the widened (unchecked) grammar that some tried completion turns
    into a valid instance with distinct member names (values: integers, or objects of them)?
    Completions tried: close the open name or string (`fresh[0]` finishes a name), finish the
    member, then up to three fresh members (names no walk writes: `fresh[1:]`)."""
    validator = jsonschema.Draft202012Validator(schema)
    members = [",".join(f'"{name}":1' for name in fresh[1 : 1 + k]) for k in range(4)]
    more = ["}"] + [f",{m}}}" for m in members[1:]] + [members[3] + "}", "{" + members[3] + "}"]
    closers = ("", '"', f'{fresh[0]}"', f'"{fresh[0]}"')
    tails = [a + b + c + d for a in closers for b in ("", ":1", "1", ":{}") for c in ("", "}", '"}') for d in more]

    def completes(text: str) -> bool:
        for tail in tails:
            try:
                value = json.loads(text + tail)
            except ValueError:
                continue
            if validator.is_valid(value) and _names_distinct(text + tail):
                return True
        return False

    def oracle(text: str) -> bool:
        return pm.GrammarMatcher(widened).accept_string(text) and completes(text)

    return oracle


@pytest.mark.filterwarnings("ignore:pushmask. widened")
@pytest.mark.parametrize("which", ["unique_strings", "one_of_required", "min_properties", "min_properties_patterned"])
def test_masks_equal_brute_force(small_compiler, which):
    """Along random mask-guided walks, every token's bit equals the oracle on text + token, and
    the stop token is allowed exactly when the text is a valid instance."""
    schema = {
        "unique_strings": UNIQUE_STRINGS,
        "one_of_required": ONE_OF_REQUIRED,
        "min_properties": MIN_NESTED,
        "min_properties_patterned": MIN_PATTERNED,
    }[which]
    compiled = _compile(small_compiler, schema)
    validator = jsonschema.Draft202012Validator(schema)
    if which == "unique_strings":
        oracle = _unique_strings_oracle
    elif which.startswith("min_properties"):
        widened = _compile(small_compiler, schema, value_checks=False, lenient=True)
        fresh = ("Zq", "Z1", "Z2", "Z3") if schema is MIN_NESTED else ("babbab", "abbaab", "baabba", "aabbab")
        oracle = _distinct_names_oracle(schema, widened, fresh)
    else:
        widened = _compile(small_compiler, schema, value_checks=False, lenient=True)
        oracle = _closed_value_oracle(schema, widened)
    rng = random.Random(3)
    checked_steps = 0
    for _ in range(25):
        matcher = pm.GrammarMatcher(compiled)
        text = ""
        for _ in range(14):
            mask = matcher.get_next_token_mask()
            for t, piece in enumerate(SMALL_VOCAB[:STOP]):
                assert bool(mask[t]) == oracle(text + piece), (text, piece)
            assert mask.any(), f"empty mask after {text!r}"
            try:
                ends = validator.is_valid(json.loads(text)) and (
                    not which.startswith("min_properties") or _names_distinct(text)
                )
            except ValueError:
                ends = False
            assert bool(mask[STOP]) == ends, text
            checked_steps += 1
            choices = [t for t in np.flatnonzero(mask).tolist() if t != STOP]
            if not choices:
                break
            t = rng.choice(choices)
            assert matcher.accept_token(t)
            text += SMALL_VOCAB[t]
    assert checked_steps >= 200


# -- rollback, fork, jump-forward, batch fill, memoised masks ---------------------------------


def test_rollback_fork_and_memoised_masks(small_compiler):
    """States with the same stacks but different items get different masks; rollback and fork
    restore the items seen."""
    compiled = _compile(small_compiler, UNIQUE_STRINGS)
    a_item = SMALL_VOCAB.index('"a"')
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_string('["b",')
    assert matcher.get_next_token_mask()[a_item]
    matcher.rollback(1)
    assert matcher.accept_string('["a",')  # same PDA stacks as after '["b",'
    assert not matcher.get_next_token_mask()[a_item]
    assert not matcher.accept_token(a_item)
    fork = matcher.fork()
    matcher.rollback(1)
    assert matcher.accept_string('["b",') and matcher.accept_token(a_item)
    assert not fork.accept_token(a_item) and fork.accept_token(SMALL_VOCAB.index('"b"'))
    assert fork.accept_token(SMALL_VOCAB.index("]")) and fork.can_end()


def test_jump_forward_stops_before_a_failing_close(small_compiler):
    """The forced bytes '"' that would close a duplicate item are not proposed."""
    schema = {"type": "array", "uniqueItems": True, "items": {"anyOf": [{"const": "abcdef"}, {"type": "integer"}]}}
    compiled = _compile(small_compiler, schema)
    assert compiled.value_checks
    matcher = pm.GrammarMatcher(compiled)
    assert matcher.accept_string('["a')
    assert matcher.find_jump_forward_string() == 'bcdef"'
    assert matcher.accept_string('bcdef",')
    assert matcher.accept_string('"a')
    assert matcher.find_jump_forward_string() == "bcdef"


def test_batch_fill_matches_single_fills(small_compiler):
    compiled = _compile(small_compiler, UNIQUE_STRINGS)
    texts = ['["a",', '["b",', '["a","b",', "[", '["a"']
    matchers = [pm.GrammarMatcher(compiled) for _ in texts]
    for m, text in zip(matchers, texts):
        assert m.accept_string(text)
    words = (len(SMALL_VOCAB) + 31) // 32
    batch = pm.allocate_token_bitmask(len(texts), len(SMALL_VOCAB))
    pm.batch_fill_next_token_bitmask(matchers, batch)
    for i, m in enumerate(matchers):
        single = pm.allocate_token_bitmask(1, len(SMALL_VOCAB))
        m.fill_next_token_bitmask(single)
        assert np.array_equal(np.asarray(batch[i, :words]), np.asarray(single[0, :words]))
