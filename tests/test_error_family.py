"""One error family: every public entry point refuses wrong arguments with a pm.PushmaskError
subclass whose message names the argument (issue 41).

A table of named cases (call, bad argument, expected class, the words the message must hold)
and a fuzz that feeds a pool of wrong values to each argument of each entry point, where any
error but a PushmaskError fails.  `python tests/test_error_family.py` prints the table as
Markdown (call, bad argument, class, message).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import pushmask as pm

VOCAB = [bytes([b]) for b in range(256)] + [b"</s>"]
STOP = 256
INFO = pm.TokenizerInfo.from_vocab(VOCAB, "raw", stop_token_ids=[STOP])
COMPILER = pm.GrammarCompiler(INFO)
GRAMMAR = COMPILER.compile_grammar('root ::= "a" "b"*')
WORDS = (INFO.vocab_size + 31) // 32


def matcher() -> pm.GrammarMatcher:
    return pm.GrammarMatcher(GRAMMAR)


def terminated() -> pm.GrammarMatcher:
    """A matcher that took "a" and then the stop token."""
    done = matcher()
    assert done.accept_string("a") and done.accept_token(STOP) and done.is_terminated()
    return done


def bitmask(rows: int = 1) -> np.ndarray:
    return np.full((rows, WORDS), -1, dtype=np.int32)


def logits(rows: int = 1) -> np.ndarray:
    return np.zeros((rows, INFO.vocab_size), dtype=np.float32)


# (call, bad argument, thunk, expected class, words the message must hold: the argument's name)
CASES = [
    ("GrammarMatcher.accept_token", "token_id=50152", lambda: matcher().accept_token(50152),
     pm.InvalidArgumentError, ["token_id", "50152", "257"]),
    ("GrammarMatcher.accept_token", "token_id=1.5", lambda: matcher().accept_token(1.5),
     pm.ArgumentTypeError, ["token_id"]),
    ("GrammarMatcher.accept_token", "after the stop token", lambda: terminated().accept_token(97),
     pm.MatcherStateError, ["accept_token", "reset()", "rollback()"]),
    ("GrammarMatcher.accept_string", "after the stop token", lambda: terminated().accept_string("b"),
     pm.MatcherStateError, ["accept_string", "reset()"]),
    ("GrammarMatcher.accept_string", "text=97", lambda: matcher().accept_string(97),
     pm.ArgumentTypeError, ["text", "accept_token"]),
    ("GrammarMatcher.rollback", "num_tokens=5 (fresh matcher)", lambda: matcher().rollback(5),
     pm.InvalidArgumentError, ["num_tokens", "[0, 0]"]),
    ("GrammarMatcher.rollback", "num_tokens=-1", lambda: matcher().rollback(-1),
     pm.InvalidArgumentError, ["num_tokens"]),
    ("GrammarMatcher.fill_next_token_bitmask", "bitmask [1, 2] (too narrow)",
     lambda: matcher().fill_next_token_bitmask(np.zeros((1, 2), np.int32)),
     pm.InvalidArgumentError, ["bitmask", f"needs {WORDS}", "allocate_token_bitmask"]),
    ("GrammarMatcher.fill_next_token_bitmask", "bitmask float32",
     lambda: matcher().fill_next_token_bitmask(np.zeros((1, WORDS), np.float32)),
     pm.ArgumentTypeError, ["bitmask", "int32"]),
    ("GrammarMatcher.fill_next_token_bitmask", "index=1 of a 1-D bitmask",
     lambda: matcher().fill_next_token_bitmask(np.zeros(WORDS, np.int32), 1),
     pm.IndexOutOfRangeError, ["index", "1-D"]),
    ("GrammarMatcher.fill_next_token_bitmask", "index=2 of 2 rows",
     lambda: matcher().fill_next_token_bitmask(bitmask(2), 2), pm.IndexOutOfRangeError, ["index", "[0, 2)"]),
    ("GrammarMatcher.fill_next_token_bitmask", "index=-1 (refused, as XGrammar does)",
     lambda: matcher().fill_next_token_bitmask(bitmask(2), -1), pm.IndexOutOfRangeError, ["index", "got -1"]),
    ("GrammarMatcher.fill_next_token_bitmask", "bitmask [2, 2, words]",
     lambda: matcher().fill_next_token_bitmask(np.zeros((2, 2, WORDS), np.int32)),
     pm.InvalidArgumentError, ["bitmask", "shape"]),
    ("GrammarMatcher", "compiled_grammar=text", lambda: pm.GrammarMatcher('root ::= "a"'),
     pm.ArgumentTypeError, ["compiled_grammar", "compile"]),
    ("GrammarMatcher", "override_stop_tokens=[999]", lambda: pm.GrammarMatcher(GRAMMAR, override_stop_tokens=[999]),
     pm.InvalidArgumentError, ["override_stop_tokens", "999"]),
    ("GrammarMatcher", "max_tokens=-1", lambda: pm.GrammarMatcher(GRAMMAR, max_tokens=-1),
     pm.InvalidArgumentError, ["max_tokens"]),
    ("batch_fill_next_token_bitmask", "indices=[5] of 1 row",
     lambda: pm.batch_fill_next_token_bitmask([matcher()], bitmask(1), [5]),
     pm.IndexOutOfRangeError, ["indices", "[0, 1)"]),
    ("batch_fill_next_token_bitmask", "the same matcher twice",
     lambda: (lambda m: pm.batch_fill_next_token_bitmask([m, m], bitmask(2)))(matcher()),
     pm.InvalidArgumentError, ["matchers", "fork()"]),
    ("BatchGrammarMatcher", "max_threads=0", lambda: pm.BatchGrammarMatcher(0),
     pm.InvalidArgumentError, ["max_threads"]),
    ("BatchGrammarMatcher.batch_accept_token", "tokens=[97, 98] for 1 matcher",
     lambda: pm.BatchGrammarMatcher.batch_accept_token([matcher()], [97, 98]),
     pm.InvalidArgumentError, ["tokens", "1 matchers"]),
    ("allocate_token_bitmask", "batch_size=0", lambda: pm.allocate_token_bitmask(0, 10),
     pm.InvalidArgumentError, ["batch_size"]),
    ("allocate_token_bitmask", "vocab_size='32000'", lambda: pm.allocate_token_bitmask(1, "32000"),
     pm.ArgumentTypeError, ["allocate_token_bitmask: vocab_size"]),
    ("apply_token_bitmask_inplace", "bitmask with 2 rows for 1 logits row",
     lambda: pm.apply_token_bitmask_inplace(logits(1), bitmask(2)), pm.InvalidArgumentError, ["bitmask", "indices"]),
    ("apply_token_bitmask_inplace", "indices=[3] of 2 rows",
     lambda: pm.apply_token_bitmask_inplace(logits(2), bitmask(2), indices=[3]),
     pm.IndexOutOfRangeError, ["indices[0]"]),
    ("apply_token_bitmask_inplace", "vocab_size='x'",
     lambda: pm.apply_token_bitmask_inplace(logits(1), bitmask(1), vocab_size="x"),
     pm.ArgumentTypeError, ["apply_token_bitmask_inplace: vocab_size"]),
    ("apply_token_bitmask_inplace", "logits int64",
     lambda: pm.apply_token_bitmask_inplace(np.zeros((1, 8), np.int64), bitmask(1)),
     pm.ArgumentTypeError, ["logits", "floating"]),
    ("TokenizerInfo", "vocab_size=3 < 257 tokens", lambda: pm.TokenizerInfo(VOCAB, vocab_type="raw", vocab_size=3),
     pm.InvalidArgumentError, ["vocab_size"]),
    ("TokenizerInfo", "stop_token_ids=[300]",
     lambda: pm.TokenizerInfo(VOCAB, vocab_type="raw", stop_token_ids=[300]),
     pm.InvalidArgumentError, ["stop_token_ids", "300"]),
    ("TokenizerInfo.from_vocab", "vocab_type='bpe'", lambda: pm.TokenizerInfo.from_vocab(VOCAB, "bpe"),
     pm.InvalidArgumentError, ["vocab_type"]),
    ("TokenizerInfo.from_huggingface", "tokenizer=None", lambda: pm.TokenizerInfo.from_huggingface(None),
     pm.ArgumentTypeError, ["tokenizer"]),
    ("GrammarCompiler", "tokenizer_info=None", lambda: pm.GrammarCompiler(None),
     pm.ArgumentTypeError, ["tokenizer_info"]),
    ("GrammarCompiler.compile_grammar", "ebnf=None", lambda: COMPILER.compile_grammar(None),
     pm.ArgumentTypeError, ["ebnf"]),
    ("GrammarCompiler.compile_lark", "a regex missing its ]",
     lambda: COMPILER.compile_lark('start: A\nA: /[a/\n'), pm.GrammarError, ["/[a/", "line 2, column 4"]),
    ("GrammarCompiler.compile_json_schema", '{"type": "strin"}',
     lambda: COMPILER.compile_json_schema({"type": "strin"}), pm.SchemaError, ["did you mean 'string'?", "#/type"]),
    ("GrammarCompiler.compile", "kind='yaml'", lambda: COMPILER.compile("yaml", "a"),
     pm.InvalidArgumentError, ["kind", "json_schema"]),
    ("Grammar.from_ebnf", "ebnf_string=b'...'", lambda: pm.Grammar.from_ebnf(b'root ::= "a"'),
     pm.ArgumentTypeError, ["ebnf_string"]),
    ("Grammar.union", "no grammar", lambda: pm.Grammar.union(), pm.InvalidArgumentError, ["union"]),
    ("Limits", "max_nesting=0", lambda: pm.Limits(max_nesting=0), pm.InvalidArgumentError, ["max_nesting"]),
]  # fmt: skip


def _raise(thunk) -> pm.PushmaskError:
    with pytest.raises(pm.PushmaskError) as caught:
        thunk()
    return caught.value


@pytest.mark.parametrize(
    ("call", "argument", "thunk", "expected", "words"), CASES, ids=[c[0] + ": " + c[1] for c in CASES]
)
def test_named_case_raises_the_family_and_names_the_argument(call, argument, thunk, expected, words):
    error = _raise(thunk)
    assert type(error) is expected, (call, argument, type(error), error)
    for word in words:
        assert word in str(error), (call, argument, word, str(error))


def test_second_bases_keep_old_except_clauses_working():
    """Code that caught the plain Python errors these calls raised before still catches them."""
    assert issubclass(pm.InvalidArgumentError, ValueError)
    assert issubclass(pm.IndexOutOfRangeError, IndexError) and issubclass(pm.IndexOutOfRangeError, ValueError)
    assert issubclass(pm.MatcherStateError, RuntimeError)
    assert issubclass(pm.ArgumentTypeError, TypeError)
    with pytest.raises(ValueError):
        matcher().accept_token(50152)
    with pytest.raises(RuntimeError):
        terminated().accept_token(97)


HUGE = 10**9
WRONG_VALUES = [
    None, "x", b"x", 1.5, -1, 0, HUGE, True, [], [None], [1.5], ["a"], {}, {"type": 7}, object(),
    np.float32(2), np.zeros(3, np.float32), np.zeros((2, 2, 2), np.int32),
]  # fmt: skip

ENTRY_POINTS = {
    "TokenizerInfo(encoded_vocab)": lambda v: pm.TokenizerInfo(v, vocab_type="raw"),
    "TokenizerInfo(vocab_type)": lambda v: pm.TokenizerInfo(VOCAB, vocab_type=v),
    "TokenizerInfo(stop_token_ids)": lambda v: pm.TokenizerInfo(VOCAB, vocab_type="raw", stop_token_ids=v),
    "TokenizerInfo(special_token_ids)": lambda v: pm.TokenizerInfo(VOCAB, vocab_type="raw", special_token_ids=v),
    "TokenizerInfo.from_vocab(tokens)": lambda v: pm.TokenizerInfo.from_vocab(v),
    "TokenizerInfo.from_huggingface(tokenizer)": lambda v: pm.TokenizerInfo.from_huggingface(v),
    "TokenizerInfo.token_id(token)": lambda v: INFO.token_id(v),
    "GrammarCompiler(tokenizer_info)": lambda v: pm.GrammarCompiler(v),
    "GrammarCompiler(limits)": lambda v: pm.GrammarCompiler(INFO, limits=v),
    "Limits(max_rule_states)": lambda v: pm.Limits(max_rule_states=v),
    "compile_grammar(ebnf)": lambda v: COMPILER.compile_grammar(v),
    "compile_grammar(root_rule_name)": lambda v: COMPILER.compile_grammar('root ::= "a"', root_rule_name=v),
    "compile_lark(text)": lambda v: COMPILER.compile_lark(v),
    "compile_lark(start)": lambda v: COMPILER.compile_lark('start: "a"', start=v),
    "compile_regex(pattern)": lambda v: COMPILER.compile_regex(v),
    "compile_json_schema(schema)": lambda v: COMPILER.compile_json_schema(v),
    "compile_json_schema(options)": lambda v: COMPILER.compile_json_schema({}, v),
    "compile_json_schema(any_whitespace)": lambda v: COMPILER.compile_json_schema({}, any_whitespace=v),
    "compile_structural_tag(tags)": lambda v: COMPILER.compile_structural_tag(v),
    "compile_structural_tag(triggers)": lambda v: COMPILER.compile_structural_tag([], v),
    "compile(kind)": lambda v: COMPILER.compile(v, "a"),
    "CompiledGrammar.deserialize_json(text)": lambda v: pm.CompiledGrammar.deserialize_json(v, INFO),
    "CompiledGrammar.deserialize_json(tokenizer_info)": lambda v: pm.CompiledGrammar.deserialize_json(
        GRAMMAR.serialize_json(), v
    ),
    "GrammarMatcher(compiled_grammar)": lambda v: pm.GrammarMatcher(v),
    "GrammarMatcher(override_stop_tokens)": lambda v: pm.GrammarMatcher(GRAMMAR, override_stop_tokens=v),
    "GrammarMatcher(max_rollback_tokens)": lambda v: pm.GrammarMatcher(GRAMMAR, max_rollback_tokens=v),
    "GrammarMatcher(max_tokens)": lambda v: pm.GrammarMatcher(GRAMMAR, max_tokens=v),
    "accept_token(token_id)": lambda v: matcher().accept_token(v),
    "accept_string(text)": lambda v: matcher().accept_string(v),
    "accept_tokens(token_ids)": lambda v: matcher().accept_tokens(v),
    "validate_tokens(token_ids)": lambda v: matcher().validate_tokens(v),
    "check_token(token_id)": lambda v: matcher().check_token(v),
    "rollback(num_tokens)": lambda v: matcher().rollback(v),
    "fill_next_token_bitmask(bitmask)": lambda v: matcher().fill_next_token_bitmask(v),
    "fill_next_token_bitmask(index)": lambda v: matcher().fill_next_token_bitmask(bitmask(2), v),
    "terminated accept_token(token_id)": lambda v: terminated().accept_token(v),
    "terminated accept_string(text)": lambda v: terminated().accept_string(v),
    "terminated fill_next_token_bitmask(bitmask)": lambda v: terminated().fill_next_token_bitmask(v),
    "allocate_token_bitmask(batch_size)": lambda v: pm.allocate_token_bitmask(v, 257),
    "allocate_token_bitmask(vocab_size)": lambda v: pm.allocate_token_bitmask(1, v),
    "get_bitmask_shape(batch_size)": lambda v: pm.get_bitmask_shape(v, 10),
    "reset_token_bitmask(bitmask)": lambda v: pm.reset_token_bitmask(v),
    "apply_token_bitmask_inplace(logits)": lambda v: pm.apply_token_bitmask_inplace(v, bitmask(1)),
    "apply_token_bitmask_inplace(bitmask)": lambda v: pm.apply_token_bitmask_inplace(logits(1), v),
    "apply_token_bitmask_inplace(vocab_size)": lambda v: pm.apply_token_bitmask_inplace(
        logits(1), bitmask(1), vocab_size=v
    ),
    "apply_token_bitmask_inplace(indices)": lambda v: pm.apply_token_bitmask_inplace(logits(2), bitmask(2), indices=v),
    "batch_fill_next_token_bitmask(matchers)": lambda v: pm.batch_fill_next_token_bitmask(v, bitmask(2)),
    "batch_fill_next_token_bitmask(bitmask)": lambda v: pm.batch_fill_next_token_bitmask([matcher()], v),
    "batch_fill_next_token_bitmask(indices)": lambda v: pm.batch_fill_next_token_bitmask([matcher()], bitmask(2), v),
    "BatchGrammarMatcher(max_threads)": lambda v: pm.BatchGrammarMatcher(v),
    "BatchGrammarMatcher.batch_accept_token(matchers)": lambda v: pm.BatchGrammarMatcher.batch_accept_token(v, [97]),
    "BatchGrammarMatcher.batch_accept_token(tokens)": lambda v: pm.BatchGrammarMatcher.batch_accept_token(
        [matcher()], v
    ),
    "BatchGrammarMatcher.batch_accept_string(strings)": lambda v: pm.BatchGrammarMatcher.batch_accept_string(
        [matcher()], v
    ),
    "Grammar.from_ebnf(ebnf_string)": lambda v: pm.Grammar.from_ebnf(v),
    "Grammar.from_regex(regex_string)": lambda v: pm.Grammar.from_regex(v),
    "Grammar.from_json_schema(schema)": lambda v: pm.Grammar.from_json_schema(v),
    "Grammar.from_structural_tag(tags)": lambda v: pm.Grammar.from_structural_tag(v),
    "Grammar.union(grammars)": lambda v: pm.Grammar.union(v),
    "Grammar.concat(grammars)": lambda v: pm.Grammar.concat(v),
    "JsonOptions(whitespace)": lambda v: pm.JsonOptions(whitespace=v),
}


@pytest.mark.parametrize("entry_point", sorted(ENTRY_POINTS))
def test_fuzz_wrong_values_raise_only_the_family(entry_point):
    """Each wrong value either is taken (some are valid: 0 tokens to roll back, an empty list) or
    is refused with a PushmaskError; a TypeError, IndexError, AttributeError... from inside
    pushmask fails the test."""
    call = ENTRY_POINTS[entry_point]
    escaped = []
    for value in WRONG_VALUES:
        if value is HUGE and ("vocab_size" in entry_point or "batch_size" in entry_point):
            continue  # a valid size, that allocates that much
        try:
            call(value)
        except pm.PushmaskError as error:
            assert str(error), (entry_point, value)
        except Exception as error:  # noqa: BLE001 -- what the test looks for
            escaped.append(f"{value!r:.40}: {type(error).__name__}: {error}")
    assert not escaped, (entry_point, escaped)


def test_one_dimensional_bitmask_is_one_row():
    """As in XGrammar: a 1-D bitmask is a single row (index 0), filled as row 0 of a 2-D one."""
    m = matcher()
    assert m.accept_string("a")
    flat, rows = np.zeros(WORDS, np.int32), np.zeros((1, WORDS), np.int32)
    m.fill_next_token_bitmask(flat)
    m.fill_next_token_bitmask(rows, 0)
    assert (flat == rows[0]).all()
    allowed = set(np.flatnonzero(np.unpackbits(flat.view(np.uint8), bitorder="little")[: INFO.vocab_size]))
    assert allowed == {t for t in range(INFO.vocab_size) if m.check_token(t)}  # brute force, token by token
    with pytest.raises(pm.IndexOutOfRangeError, match="1-D"):
        m.fill_next_token_bitmask(flat, 1)


def test_fill_after_termination_allows_only_the_stop_tokens():
    """A finished row of a batch step keeps a mask: only its stop tokens (documented in limits.md)."""
    done = terminated()
    row = bitmask(1)
    done.fill_next_token_bitmask(row)
    allowed = np.flatnonzero(np.unpackbits(row[0].view(np.uint8), bitorder="little")[: INFO.vocab_size])
    assert allowed.tolist() == [STOP]
    with pytest.raises(pm.MatcherStateError):
        done.accept_token(STOP)


@pytest.mark.parametrize(
    ("lines", "bad"),
    [
        (["start: A", "A: /[a/"], "/[a/"),
        (["start: A", "", "// a comment with /(/ in it", 'A: "x"', "  | /(b/"], "/(b/"),  # lark reads it
        (['start: "x" B', "B: /b/ /c{2,1}/i"], "/c{2,1}/i"),
    ],
)
def test_lark_bad_regex_reports_the_grammar_line(lines, bad):
    """The line and column are where the regex is written (found here by text search), and the
    reason is the one Python's `re` gives for that regex, without lark's doubled "error:"."""
    text = "\n".join(lines) + "\n"
    line = next(i for i, written in enumerate(lines, 1) if bad in written and not written.startswith("//"))
    column = lines[line - 1].index(bad) + 1
    pattern, flags = bad[1:].rsplit("/", 1)
    with pytest.raises(re.error) as reason:
        re.compile(f"(?{flags}:{pattern})" if flags else pattern)
    with pytest.raises(pm.GrammarError) as caught:
        COMPILER.compile_lark(text)
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert bad in str(error) and reason.value.msg in str(error)
    assert "error:" not in str(error)


TYPE_NAMES = ["array", "boolean", "integer", "null", "number", "object", "string"]  # JSON Schema's type names


@pytest.mark.parametrize(
    ("schema", "pointer", "nearest"),
    [
        ({"type": "strin"}, "#/type", "string"),
        ({"properties": {"a": {"type": ["null", "intger"]}}}, "#/properties/a/type/1", "integer"),
        ({"$schema": "http://json-schema.org/draft-07/schema#", "items": {"type": "bool"}}, "#/items/type", "boolean"),
        ({"type": "zzzz"}, "#/type", None),
    ],
)
def test_misspelt_type_names_the_valid_types_and_the_nearest(schema, pointer, nearest):
    with pytest.raises(pm.SchemaError) as caught:
        COMPILER.compile_json_schema(schema)
    error = caught.value
    assert error.pointer == pointer
    assert all(repr(name) in error.message for name in TYPE_NAMES)
    if nearest is None:
        assert "did you mean" not in error.message
    else:
        assert error.message.endswith(f"did you mean {nearest!r}?")


def error_table() -> str:
    """The cases as a Markdown table: call, bad argument, class, message."""
    out = ["| call | bad argument | class | message |", "|---|---|---|---|"]
    for call, argument, thunk, _, _ in CASES:
        try:
            thunk()
        except pm.PushmaskError as error:
            message = str(error).replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{call}` | {argument} | `{type(error).__name__}` | {message} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(error_table())
