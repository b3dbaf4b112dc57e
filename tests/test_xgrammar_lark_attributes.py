"""XGrammar's Lark rule attributes (grammar/lark_dialect.py, grammar/lark_frontend.py): the
language attributes (lazy, suffix, stop, max_chars) checked by brute force against an oracle built
on Python's `re` and against lark for the language without them; the matcher attributes refused
by name; XGrammar's checks of the attribute list in XGrammar's words (issue 45)."""

from __future__ import annotations

import itertools
import re

import lark
import numpy as np
import pytest

import pushmask as pm

NO_VOCAB = pm.GrammarCompiler(pm.TokenizerInfo([]), cache_enabled=False)


def _acceptor(grammar: pm.Grammar):
    """A function telling whether the grammar accepts a text (the grammar compiled once)."""
    compiled = NO_VOCAB.compile_grammar(grammar)

    def accepts(text: str) -> bool:
        matcher = pm.GrammarMatcher(compiled, terminate_without_stop_token=True)
        return matcher.accept_string(text) and matcher.is_terminated()

    return accepts


def _strings(alphabet: str, max_len: int):
    for length in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=length):
            yield "".join(chars)


def _lazy(body: str, text: str) -> bool:
    """`text` is a string of the regex `body` none of whose proper prefixes is one (committed-shortest)."""
    return re.fullmatch(body, text) is not None and not any(re.fullmatch(body, text[:k]) for k in range(len(text)))


def _budgeted(body: str, max_chars: int, text: str) -> bool:
    """`text` is a string of `body` that does not go on past a prefix of at least `max_chars`
    characters where `body` could end (XGrammar's character budget)."""
    return re.fullmatch(body, text) is not None and not any(
        re.fullmatch(body, text[:k]) for k in range(max_chars, len(text))
    )


def _framed(rule_language, text: str) -> bool:
    """`text` is "<" w ">" with w in the rule's language (w may itself hold < and >)."""
    return len(text) >= 2 and text[0] == "<" and text[-1] == ">" and rule_language(text[1:-1])


@pytest.mark.parametrize(
    ("attributes", "body", "regex"),
    [
        ("lazy", "/[ab]+/", "[ab]+"),
        ("lazy", "/a*b?/", "a*b?"),
        ("lazy", '"ab" | "abb" | "b"', "ab|abb|b"),
        ("lazy", '("a" | "b")* "<>"', "[ab]*<>"),
        ('suffix="ab"', "/[ab]*/", "[ab]*ab"),
        ('stop="<"', "/[ab]+/", "[ab]+<"),
        ("suffix=/b+/", '"a"*', "a*b+"),
        ('lazy, suffix=END\nEND: ">"', "/[ab<]*/", "[ab<]*>"),
    ],
)
def test_lazy_suffix_and_stop_end_the_rule_at_its_first_end(attributes, body, regex):
    header, _, extra = attributes.partition("\n")
    accepts = _acceptor(pm.Grammar.from_lark(f'start: "<" r ">"\nr[{header}]: {body}\n{extra}'))
    for text in _strings("ab<>", 6):
        assert accepts(text) == _framed(lambda w: _lazy(regex, w), text), text


@pytest.mark.parametrize(
    "rules",
    [
        'r[lazy]: TEXT "<>"\nTEXT: /(\\n|.)*/',
        'r[suffix="<>"]: TEXT\nTEXT: /[\\s\\S]*/',
        'r[stop="<>"]: ANY\nANY: TEXT\nTEXT: /.*/s',
    ],
)
def test_xgrammars_trigger_form_may_also_end_before_its_trigger(rules):
    """Any text then a fixed string is XGrammar's trigger form (a TagDispatch without a loop):
    text holding no trigger, then the trigger or nothing."""
    accepts = _acceptor(pm.Grammar.from_lark(f'start: r "!"\n{rules}'))
    for text in _strings("ab<>!", 5):
        rule_text = text[:-1]
        first_trigger = rule_text.find("<>")
        expected = text.endswith("!") and first_trigger in (-1, len(rule_text) - 2)
        assert accepts(text) == expected, text


@pytest.mark.parametrize(
    ("max_chars", "body", "regex"),
    [
        (0, "/(\\n|.)*/", "(\\n|.)*"),
        (2, "/(\\n|.)*/", "(\\n|.)*"),
        (1, '"ab" | "abb" | "b"', "ab|abb|b"),
        (2, "/a+b/ | /a*/", "a+b|a*"),
        (3, "/[ab]*b/", "[ab]*b"),
    ],
)
def test_max_chars_ends_the_rule_where_it_can_once_the_budget_is_spent(max_chars, body, regex):
    accepts = _acceptor(pm.Grammar.from_lark(f'start: "<" r ">"\nr[max_chars={max_chars}]: {body}'))
    for text in _strings("ab<>", 6):
        assert accepts(text) == _framed(lambda w: _budgeted(regex, max_chars, w), text), text


def test_max_chars_counts_code_points_and_masks_tokens_that_would_overrun():
    """XGrammar's own example: with max_chars=2 the mask allows exactly the tokens that begin a
    string of the language, checked by brute force over the vocabulary."""
    vocab = ["a", "ab", "abc", "a>", "ab>", ">", "中", "中文", "中文>"]
    info = pm.TokenizerInfo(vocab)
    grammar = 'start: reasoning ">"\nreasoning[max_chars=2]: TEXT\nTEXT: /(\\n|.)*/'
    matcher = pm.GrammarMatcher(
        pm.GrammarCompiler(info, cache_enabled=False).compile_lark(grammar), terminate_without_stop_token=True
    )
    bitmask = pm.allocate_token_bitmask(1, len(vocab))
    matcher.fill_next_token_bitmask(bitmask)
    allowed = {t for t in range(len(vocab)) if (int(bitmask[0, t // 32]) >> (t % 32)) & 1}
    language = [w + ">" for w in _strings("ab中文>", 2)]
    assert allowed == {t for t, text in enumerate(vocab) if any(s.startswith(text) for s in language)}
    assert allowed == {0, 1, 3, 4, 5, 6, 7, 8}


def test_lazy_masks_allow_exactly_the_tokens_that_begin_a_string_of_the_language():
    """Brute force over a small vocabulary: after each prefix, a token is allowed exactly when
    some string of the lazy language (checked with `re`, up to 6 characters) begins with it."""
    vocab = ["<", ">", "a", "b", "ab", "a>", "b>", ">>", "<a"]
    info = pm.TokenizerInfo(vocab, stop_token_ids=[])
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_lark('start: "<" r ">"\nr[lazy]: /[ab]+/')
    language = [text for text in _strings("ab<>", 6) if _framed(lambda w: _lazy("[ab]+", w), text)]
    for prefix in ("", "<", "<a"):
        matcher = pm.GrammarMatcher(compiled, terminate_without_stop_token=True)
        assert matcher.accept_string(prefix) or not prefix
        bitmask = pm.allocate_token_bitmask(1, len(vocab))
        matcher.fill_next_token_bitmask(bitmask)
        allowed = {t for t in range(len(vocab)) if (int(bitmask[0, t // 32]) >> (t % 32)) & 1}
        assert allowed == {t for t, token in enumerate(vocab) if any(s.startswith(prefix + token) for s in language)}


@pytest.mark.parametrize(
    "rules",
    [
        'start: r "!"\nr[lazy]: "ab" | "c" "d"',  # prefix-free: lazy changes nothing
        'start: r "!"\nr[max_chars=5]: /[abcd]{1,3}/',  # never reaches its budget
        'start: r+\nr[suffix="!"]: /[abcd]/',
    ],
)
def test_attributes_that_do_not_bind_leave_the_language_lark_reads_without_them(rules):
    plain = re.sub(r"^r\[[^\]]*\]", "r", rules, flags=re.MULTILINE).replace("r: /[abcd]/", 'r: /[abcd]/ "!"')
    parser = lark.Lark(plain, parser="earley", lexer="dynamic")
    accepts = _acceptor(pm.Grammar.from_lark(rules))
    for text in _strings("abcd!", 5):
        try:
            parser.parse(text)
            expected = True
        except lark.exceptions.LarkError:
            expected = False
        assert accepts(text) == expected, text


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('start[budget=10]: "a"', "rule attribute 'budget' is not supported by XGrammar Lark"),
        ('start[capture=""]: "a"', "capture name must not be empty"),
        ('start[capture="a b"]: "a"', "capture name must only contain letters, digits"),
        ('start[capture, capture]: "a"', "capture attribute is specified more than once"),
        ("TOKEN[lazy]: /a/\nstart: TOKEN", "attributes are only supported on rules"),
        ('start: h\nh[suffix=""]: /a/', "suffix must not be empty"),
        ("start: h\nh[suffix=end]: /a/", "suffix terminal name must be uppercase"),
        ('start: h\nh[stop="x",stop="y"]: /a/', "stop attribute is specified more than once"),
        ('start: h\nh[stop_capture="m"]: /a/', "stop_capture requires stop or suffix"),
        ('start: h\nh[stop="x", stop_capture=M]: /a/', "expected string literal after stop_capture="),
        ('start: h\nh[stop="x", suffix="y"]: /a/', "suffix cannot be combined with stop"),
        ("start: h\nh[suffix=/end/i]: /a/", "regular-expression flag 'i' is not supported with suffix or stop"),
        ('start[temperature=-0.1]: "a"', "temperature must be a finite non-negative number"),
        ('start[temperature=1e999]: "a"', "temperature must be a finite non-negative number"),
        ('start[temperature=abc]: "a"', "expected number after temperature="),
        ('start[max_tokens=0]: "a"', "max_tokens must be positive"),
        ('start[max_chars=-1]: "a"', "max_chars must be between 0 and 2147483647"),
        ('start: thing\nthing[lazy]: "a" thing | "b"', "terminal cannot reference rule 'thing'"),
        ("start: h\nh[suffix=MISSING]: /a/", "unknown name 'MISSING'"),
        ("start: h\nh[lazy]: /(\\n|.)*END/", "lazy regex suffix is only supported on a head used by dynamic dispatch"),
    ],
)
def test_attribute_lists_are_checked_in_xgrammars_words(text, words):
    with pytest.raises(pm.GrammarError) as caught:
        pm.Grammar.from_lark(text)
    assert words in str(caught.value)
    assert str(caught.value).startswith("Lark error at line ")
    assert isinstance(caught.value, RuntimeError)  # as XGrammar raises


@pytest.mark.parametrize(
    ("text", "attribute", "line", "column"),
    [
        ('start: "a" v\nv[capture]: /[0-9]+/', "capture", 2, 3),
        ('%ignore " "\nstart: h "z"\nh[max_tokens=3]: /[a-z]*/', "max_tokens", 3, 3),
        ('start: h\nh[stop="x", stop_capture="m"]: /a/', "stop_capture", 2, 13),
        ('start: h "z"\nh[lazy, max_chars=3]: /[a-z]*/', "max_chars", 2, 9),
        ('%ignore " "\nstart: h "z"\nh[max_chars=3]: /[a-z]*/', "max_chars", 3, 3),
        ('start: tool* tail\ntail: /[a-z]*/\nhead[lazy]: /[a-z]*/ "<t>"\ntool: head "x"', "lazy", 3, 6),
        ('start: (a | b)* t\nt: /[a-z]*/\nh[suffix="<t>"]: /[a-z]*/\na: h "x"\nb: "y"', "suffix", 3, 3),
    ],
)
def test_attributes_pushmask_cannot_honour_exactly_are_refused_by_name(text, attribute, line, column):
    with pytest.raises(pm.GrammarError) as caught:
        pm.Grammar.from_lark(text)
    assert f"attribute {attribute!r} is not supported" in str(caught.value)
    assert (caught.value.line, caught.value.column) == (line, column), str(caught.value)


def test_an_empty_attribute_list_and_optional_groups_in_a_body_are_no_attributes():
    accepts = _acceptor(pm.Grammar.from_lark('start[]: "a" x\nx: ["b"] "c"\n  | ["d"]'))
    assert [accepts(text) for text in ("ac", "abc", "a", "ad", "abd")] == [True, True, True, True, False]


def test_the_matchers_temperature_is_its_default_as_no_rule_sets_one():
    """XGrammar's GrammarMatcher(default_temperature=) and .temperature: where no rule sets a
    temperature (tests/test_rule_temperature.py has those that do), the temperature is the default
    (None when unset) wherever the match is."""
    compiled = NO_VOCAB.compile_lark('start: "a" /[0-9]+/ "z"')
    assert pm.GrammarMatcher(compiled).temperature is None
    matcher = pm.GrammarMatcher(compiled, default_temperature=0.25, terminate_without_stop_token=True)
    assert matcher.temperature == 0.25
    for piece in ("a", "12", "z"):
        assert matcher.accept_string(piece)
        assert matcher.temperature == 0.25
    assert matcher.is_terminated() and matcher.fork().temperature == 0.25
    assert matcher.get_captures() == []  # no rule is captured: `capture` is refused
    for bad in (-0.1, float("inf"), float("nan"), "1"):
        with pytest.raises(pm.InvalidArgumentError, match="default_temperature must be"):
            pm.GrammarMatcher(compiled, default_temperature=bad)


def test_batch_and_draft_tree_temperatures_are_filled_xgrammars_way():
    torch = pytest.importorskip("torch")
    info = pm.TokenizerInfo(["a", "b"], stop_token_ids=[])
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_lark('start: "a"+')
    with_default = pm.GrammarMatcher(compiled, default_temperature=0.5)
    without = pm.GrammarMatcher(compiled)
    temperatures = torch.zeros(3, dtype=torch.float32)
    pm.BatchGrammarMatcher.batch_fill_temperature([with_default, without], temperatures, indices=[2, 0])
    assert temperatures.tolist() == [-1.0, 0.0, 0.5]
    with pytest.raises(pm.InvalidArgumentError, match="indices size"):
        pm.BatchGrammarMatcher.batch_fill_temperature([with_default, without], temperatures, indices=[0])
    with pytest.raises(pm.InvalidArgumentError, match="out of bounds"):
        pm.BatchGrammarMatcher.batch_fill_temperature([with_default], temperatures, indices=[3])
    with pytest.raises(pm.InvalidArgumentError, match="temperatures tensor"):
        pm.BatchGrammarMatcher.batch_fill_temperature([with_default], torch.zeros(3, dtype=torch.float64))

    # draft tree 0 -> 1 -> 2 with tokens a, b: node 1 ("a") is filled, node 2 ("b") is refused
    next_token = torch.tensor([1, 2, -1], dtype=torch.int64)
    next_sibling = torch.full((3,), -1, dtype=torch.int64)
    draft = torch.tensor([0, 0, 1], dtype=torch.int64)
    bitmask = pm.allocate_token_bitmask(3, 2)
    for matcher, filled in ((with_default, 0.5), (without, -1.0)):
        node_temperatures = torch.zeros(3, dtype=torch.float32)
        assert matcher.traverse_draft_tree(next_token, next_sibling, draft, bitmask, temperatures=node_temperatures)
        assert node_temperatures.tolist() == [filled, filled, -1.0]
    with pytest.raises(pm.InvalidArgumentError, match="temperatures tensor"):
        with_default.traverse_draft_tree(next_token, next_sibling, draft, bitmask, temperatures=torch.zeros((3, 1)))


BUDGET_VOCAB = ["ab ", "c", " ", "<t>", "x<t>", "<", "t>"]


@pytest.mark.parametrize("budget", [1, 3])
def test_max_tokens_on_text_that_ends_anywhere_is_the_token_budget(budget):
    """`r[max_tokens=N]` on a rule whose text may stop anywhere: every token sequence up to length
    4 is accepted exactly when lark's parser reads its text as `r "<t>"` with at most N tokens
    starting inside r (some split of the text), and each prefix's mask equals what accept_token
    takes."""
    grammar_text = f'start: r "<t>"\nr[max_tokens={budget}]: TEXT\nTEXT: /(.|\\n)*/'
    plain = lark.Lark('start: TEXT? "<t>"\nTEXT: /(.|\\n)+/', parser="earley", lexer="dynamic_complete")
    info = pm.TokenizerInfo(BUDGET_VOCAB)
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_lark(grammar_text)

    def oracle(tokens: tuple[int, ...]) -> bool:
        pieces = [BUDGET_VOCAB[t] for t in tokens]
        text = "".join(pieces)
        starts = [sum(map(len, pieces[:k])) for k in range(len(pieces))]
        try:
            plain.parse(text)
        except lark.exceptions.LarkError:
            return False
        # r's text is everything before one closing "<t>" that ends the text
        return text.endswith("<t>") and sum(start < len(text) - 3 for start in starts) <= budget

    bitmask = pm.allocate_token_bitmask(1, info.vocab_size)
    for length in range(1, 5):
        for tokens in itertools.product(range(len(BUDGET_VOCAB)), repeat=length):
            matcher = pm.GrammarMatcher(compiled, terminate_without_stop_token=True)
            accepted = True
            for token in tokens:
                matcher.fill_next_token_bitmask(bitmask)
                allowed = bool((int(bitmask[0, token // 32]) >> (token % 32)) & 1)
                assert allowed == matcher.fork().accept_token(token), (tokens, token)
                if not matcher.accept_token(token):
                    accepted = False
                    break
            assert (accepted and matcher.is_terminated()) == oracle(tokens), tokens


def test_max_tokens_budget_in_batch_fills_and_rollback():
    """The Lark token budget through the batch API with 2 threads (rows equal to single fills,
    matchers at different points of the budget) and through rollback (the budget spent again)."""
    info = pm.TokenizerInfo(BUDGET_VOCAB)
    compiled = pm.GrammarCompiler(info, cache_enabled=False).compile_lark(
        'start: r "<t>"\nr[max_tokens=2]: TEXT\nTEXT: /(.|\\n)*/'
    )
    matchers = [pm.GrammarMatcher(compiled, terminate_without_stop_token=True) for _ in range(4)]
    for matcher, tokens in zip(matchers, [[], [0], [0, 1], [5, 6]]):
        for token in tokens:
            assert matcher.accept_token(token)
    batch = pm.allocate_token_bitmask(len(matchers), info.vocab_size)
    pm.BatchGrammarMatcher(max_threads=2).batch_fill_next_token_bitmask(matchers, batch)
    single = pm.allocate_token_bitmask(1, info.vocab_size)
    for k, matcher in enumerate(matchers):
        matcher.fill_next_token_bitmask(single)
        assert np.array_equal(batch[k].numpy(), single[0].numpy()), k
    spent = matchers[2]  # two tokens inside r: only the closing "<t>" (or its pieces) may follow
    assert not spent.fork().accept_token(0) and spent.fork().accept_token(3)
    spent.rollback(1)
    assert spent.fork().accept_token(0)  # one token inside r again: text may go on
