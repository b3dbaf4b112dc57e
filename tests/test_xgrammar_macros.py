"""XGrammar's EBNF macros (issue 45): Substring, TagDispatch, TokenTagDispatch, Token,
ExcludeToken, and Regex's json_string= / flags=.  Languages are checked against brute-force
oracles (every short string over the macro's alphabet, Python's `re`), token masks against a
per-token check on a small vocabulary."""

from __future__ import annotations

import itertools
import re

import pytest

import pushmask as pm
from pushmask.testing import _get_masked_tokens_from_bitmask, _is_grammar_accept_string


def acceptor(grammar: pm.Grammar):
    """Whether a text is in the grammar's language, with the grammar compiled once."""
    info = pm.TokenizerInfo([], stop_token_ids=[])
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_grammar(grammar)

    def accepts(text: str) -> bool:
        matcher = pm.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.can_end()

    return accepts


def strings(alphabet: str, max_length: int):
    for length in range(max_length + 1):
        for letters in itertools.product(alphabet, repeat=length):
            yield "".join(letters)


@pytest.mark.parametrize("chunks", [["a", "b", "a", "b", "b"], ["ab", "a", "b", "ba"], ["ab", "abc"], ["a", "", "a"]])
def test_substring_is_exactly_the_runs_of_consecutive_chunks(chunks):
    runs = {"".join(chunks[i:j]) for i in range(len(chunks) + 1) for j in range(i, len(chunks) + 1)}
    ebnf = "root ::= Substring(" + ", ".join(f'"{chunk}"' for chunk in chunks) + ")"
    accepts = acceptor(pm.Grammar.from_ebnf(ebnf))
    for text in strings("".join(sorted(set("".join(chunks)))), len("".join(chunks))):
        assert accepts(text) == (text in runs), text


def test_substring_mask_matches_per_token_acceptance():
    vocab = ["a", "b", "ab", "c", "d", "cd", "abcd", "<", ">", "b>", "ba", "ac", "</s>"]
    info = pm.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_grammar('root ::= "<" Substring("ab", "cd") ">"')
    matcher = pm.GrammarMatcher(compiled)
    bitmask = pm.allocate_token_bitmask(1, info.vocab_size)
    for step in "<abcd>":
        matcher.fill_next_token_bitmask(bitmask)
        rejected = set(_get_masked_tokens_from_bitmask(bitmask, info.vocab_size))
        for token_id, piece in enumerate(vocab[:-1]):
            assert matcher.fork().accept_string(piece) == (token_id not in rejected), piece
        assert matcher.accept_string(step)
    assert matcher.is_completed() or matcher.can_end()


def dispatch_oracle(text: str, tags: dict[str, set[str]], excludes: list[str], loop: bool) -> bool:
    """TagDispatch by its definition: free text holding no tag and no excluded string, each tag
    followed by a string of its rule, then free text again (loop) or the end.  The free text
    and its tag together hold no excluded string and no tag but the one they end with (the
    first tag in the text dispatches; excluded strings bind the tag too)."""
    avoid = list(tags) + excludes

    def free(s: str) -> bool:
        return not any(a in s for a in avoid)

    def led_by_free_text(s: str) -> bool:  # free text, then a tag that ends s
        return not any(
            s.startswith(a, at) and not (a in tags and at + len(a) == len(s)) for a in avoid for at in range(len(s))
        )

    def rest(s: str) -> bool:  # after the free text that starts s
        if free(s):
            return True
        for cut in range(len(s)):
            if not free(s[:cut]):
                break
            for tag, bodies in tags.items():
                if s.startswith(tag, cut) and led_by_free_text(s[: cut + len(tag)]):
                    after = s[cut + len(tag) :]
                    for body in bodies:
                        if after.startswith(body) and (rest(after[len(body) :]) if loop else after == body):
                            return True
        return False

    return rest(text)


@pytest.mark.parametrize("loop", [True, False])
@pytest.mark.parametrize("excludes", [[], ["ba"], ["bc"], ["b"]])
def test_tag_dispatch_is_exactly_its_definition(loop, excludes):
    options = ", loop_after_dispatch=" + ("true" if loop else "false")
    if excludes:
        options += ", excludes=(" + ", ".join(f'"{e}"' for e in excludes) + ",)"
    ebnf = f'root ::= TagDispatch(("ab", r1), ("c", r2){options})\nr1 ::= "x" | "xy"\nr2 ::= "y"\n'
    accepts = acceptor(pm.Grammar.from_ebnf(ebnf))
    for text in strings("abcxy", 5):
        expected = dispatch_oracle(text, {"ab": {"x", "xy"}, "c": {"y"}}, excludes, loop)
        assert accepts(text) == expected, text


def test_tag_dispatch_excludes_end_the_free_text_before_what_follows():
    grammar = pm.Grammar.from_ebnf(
        'root ::= d stop "w"\nd ::= TagDispatch(("t1", r), excludes=("ll", "t3"))\nstop ::= "t3" | "ll"\nr ::= "x"'
    )
    assert _is_grammar_accept_string(grammar, "t1xllw")
    assert _is_grammar_accept_string(grammar, "qqt1xqt3w")
    assert not _is_grammar_accept_string(grammar, "t1xllt3w", require_termination=False)
    assert not _is_grammar_accept_string(grammar, "t1x")


VOCAB = ["<s>", "</s>", "hello", "trigger", "content", "blocked"]


def accepted_ids(ebnf: str, tokens_before: list[int] = ()) -> set[int]:
    info = pm.TokenizerInfo(VOCAB, stop_token_ids=[1])
    matcher = pm.GrammarMatcher(pm.GrammarCompiler(info, cache_enabled=False).compile_grammar(ebnf))
    for token in tokens_before:
        assert matcher.accept_token(token)
    bitmask = pm.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return set(range(info.vocab_size)) - set(_get_masked_tokens_from_bitmask(bitmask, info.vocab_size))


def test_token_and_exclude_token_match_by_id():
    assert accepted_ids('root ::= Token(4, 2, 4) "x"') == {2, 4}
    assert accepted_ids("root ::= ExcludeToken(5, 2) Token(3)") == {0, 3, 4}  # never the stop token
    assert accepted_ids("root ::= ExcludeToken(5, 2) Token(3)", [4]) == {3}
    # the text "hello" is not the token 2: a Token(...) is matched by id only
    assert accepted_ids('root ::= Token(2) | "content"') == {2, 4}


def test_token_tag_dispatch_loops_over_any_token_but_triggers_and_excludes():
    ebnf = "root ::= TokenTagDispatch((3, body), excludes=(5,))\nbody ::= Token(4)"
    assert accepted_ids(ebnf) == {0, 1, 2, 3, 4}
    assert accepted_ids(ebnf, [3]) == {4}
    assert accepted_ids(ebnf, [2, 3, 4, 0]) == {0, 1, 2, 3, 4}


def test_union_keeps_each_grammars_token_classes():
    first = pm.Grammar.from_ebnf("root ::= ExcludeToken(2) Token(4)")
    second = pm.Grammar.from_ebnf("root ::= ExcludeToken(3) Token(5)")
    both = pm.Grammar.union(first, second)
    info = pm.TokenizerInfo(VOCAB, stop_token_ids=[1])
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_grammar(both)
    for first_token, second_tokens in ((2, {5}), (3, {4})):
        matcher = pm.GrammarMatcher(compiled)
        assert matcher.accept_token(first_token)
        assert {t for t in (2, 3, 4, 5) if matcher.fork().accept_token(t)} == second_tokens, first_token


JSON_FORBIDDEN = re.compile(r'["\\\x00-\x1f]')


@pytest.mark.parametrize(
    ("pattern", "flags", "json_string"),
    [
        (r"\S+", None, True),
        (".+", None, True),
        ("a.b", None, False),
        ("a.b", "", False),
        ("a.b", "s", False),
        ("[a-c]+.", "i", True),
        ("(?i)ab", "s", False),
        ("^[a-c]+.$", None, False),
        ("^a.$", "i", True),
    ],
)
def test_regex_options_match_pythons_re(pattern, flags, json_string):
    options = ""
    if flags is not None:
        options += f', flags="{flags}"'
    if json_string:
        options += ", json_string=true"
    escaped = pattern.replace("\\", "\\\\")
    accepts = acceptor(pm.Grammar.from_ebnf(f'root ::= Regex("{escaped}"{options})'))
    python_flags = re.DOTALL if flags is None else 0
    python_flags |= re.IGNORECASE if flags and "i" in flags else 0
    python_flags |= re.DOTALL if flags and "s" in flags else 0
    for text in strings('aBc\n"\\ \t', 3):
        expected = bool(re.fullmatch(pattern, text, python_flags)) and not (json_string and JSON_FORBIDDEN.search(text))
        assert accepts(text) == expected, repr(text)


@pytest.mark.parametrize(
    ("ebnf", "message"),
    [
        ("root ::= Regex()", "Regex expects exactly one string argument"),
        ("root ::= Regex(abc)", "Regex pattern must be a string literal"),
        ('root ::= Regex("a", foo=true)', "Regex does not support the named argument foo"),
        ('root ::= Regex("a", json_string=1)', "json_string must be a boolean"),
        ('root ::= Regex("a", flags="m")', "regular-expression flag 'm' is not supported"),
        ('root ::= Substring("a", foo=true)', r"Substring\(\) does not accept named arguments"),
        ('root ::= Substring("a", 1)', r"Substring\(\) arguments must be strings"),
        ('root ::= "a" (=Substring("b"))', "Substring should not be in lookahead assertion"),
        ('root ::= TagDispatch(("", r))\nr ::= "a"', "Tag must be a non-empty string literal"),
        ('root ::= TagDispatch("t", r)\nr ::= "a"', "Each tag dispatch element must be a tuple"),
        ('root ::= TagDispatch(("t" r))\nr ::= "a"', r"Expect , or \) in tuple"),
        (
            'root ::= TagDispatch(("t", r), stop_str=true)\nr ::= "a"',
            "Unknown named argument for TagDispatch: stop_str",
        ),
        ('root ::= TagDispatch(("tag1", r), excludes=("tag",))\nr ::= "a"', "must not be a prefix of trigger string"),
        ('root ::= TagDispatch(("t", undefined))', "undefined rule 'undefined'"),
        ("root ::= TokenTagDispatch((3, r), excludes=(3,))\nr ::= Token(2)", "both a trigger and excluded"),
        ("root ::= Token()", "at least one token id"),
        ('root ::= Token("a")', "must be token ids"),
        ("root ::= Token((1, 2))", "must be token ids"),
    ],
)
def test_bad_macros_are_grammar_errors_with_a_position(ebnf, message):
    """XGrammar's wording, with pushmask's line and column."""
    with pytest.raises(pm.GrammarError, match=message) as caught:
        pm.Grammar.from_ebnf(ebnf)
    assert isinstance(caught.value, RuntimeError) and caught.value.line == 1


def test_a_rule_named_like_a_macro_is_still_a_rule():
    grammar = pm.Grammar.from_ebnf('root ::= Token "!"\nToken ::= "t"')
    assert _is_grammar_accept_string(grammar, "t!")


@pytest.mark.parametrize(
    ("pattern", "same_as"),
    [
        (r"\x41\u0042\u{43}", "ABC"),
        (r"\u{1F600}+", "\U0001f600+"),
        (r"[\u{41}-\u{43}]x", "[A-C]x"),
        (r"x\cAy", "x\x01y"),
        ("(?<name>ab)+c", "(?:ab)+c"),
    ],
)
def test_regex_escapes_and_named_groups_of_other_dialects(pattern, same_as):
    accepts = acceptor(pm.Grammar.from_ebnf(f'root ::= Regex("{pattern.replace(chr(92), chr(92) * 2)}")'))
    for text in strings("ABCxab\x01\U0001f600", 4):
        assert accepts(text) == bool(re.fullmatch(same_as, text)), repr(text)


@pytest.mark.parametrize("pattern", [r"\u{110000}", r"\u{}", r"\u{12", "(?<=a)b", r"(?<n>a)\k<n>"])
def test_regex_escapes_beyond_unicode_and_lookbehinds_are_refused(pattern):
    with pytest.raises(pm.GrammarError, match="Regex"):
        compiled_regex(pattern)


def compiled_regex(pattern: str, options: str = "") -> None:
    """Read `Regex(pattern)` (which does not raise: XGrammar's order) and compile it."""
    grammar = pm.Grammar.from_ebnf(f'root ::= Regex("{pattern.replace(chr(92), chr(92) * 2)}"{options})')
    _is_grammar_accept_string(grammar, "a")


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"a\b", "Word boundary assertion"),
        (r"(a)\1", "Backreference"),
        (r"(?<n>a)\k<n>", "Backreference"),
        ("(?<=a)b", "Lookbehind assertion"),
        ("a(?=b)c", "Lookahead assertion"),
        (r"\p{L}", "Unicode property escape"),
        ("[^]", "Empty character class"),
        (r"\uZZ", "must be followed by four hexadecimal digits"),
        (r"\x4", "must be followed by two hexadecimal digits"),
        (r"\u{110000}", "beyond the Unicode range"),
    ],
)
def test_regex_refusals_use_xgrammars_words_and_are_runtime_errors(pattern, words):
    with pytest.raises(RuntimeError, match=words) as caught:
        compiled_regex(pattern)
    assert isinstance(caught.value, pm.GrammarError)


def test_regex_errors_give_the_column_in_the_pattern_as_written():
    for options in ("", ', flags="is"'):
        with pytest.raises(pm.GrammarError, match=r"possessive .* \(pattern column 3\)"):
            compiled_regex("^a++", options)
