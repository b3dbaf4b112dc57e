"""Constrained infilling (masks/infill.py, samplers/infill_sampling.py) against brute force.

- can_complete equals exhaustive enumeration of every gap filling, judged by independent oracles
  (a balanced-brackets recognizer, json.loads, lark's Earley parser), exact for bounded gaps; for
  unbounded gaps, a True answer comes with a witness the oracle accepts and that matches the
  template, and a False answer means no filling up to a length bound is in the language.
- allowed_tokens equals checking each token on its own, on a toy vocabulary (every token) and on
  a real one (where [prefix, any gap] must also equal the left-to-right GrammarMatcher mask).
- Every output of the diffusion and fill-in-the-middle loops with a random toy model is in the
  language, however undecided positions are read (exact_runs 0, 1 or None).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from support import grammar_compiler, grammar_file_accepts, hf_tokenizer

import pushmask as pm
from pushmask.samplers.infill_sampling import _Chooser

GRAMMARS = Path(__file__).parent / "grammars"


# name -> (grammar file, toy vocabulary, byte alphabet of the templates, sample texts)
CASES = {
    "parens": (
        "parens.ebnf",
        ["(", ")", "[", "]", "()", "((", "))", "[]", ")["],
        "()[]",
        ["(()[])", "[[]]()", "()()[()]"],
    ),
    "json": (
        "json.gbnf",
        list('{}[]",:1 a') + ['{"', '":', '",', '"a"', "[]", "{}", "1,"],
        '{}[]",:1 a',
        ['{"a": [1, 11, "a"], "aa": {}}', '[{"a":1},[],"",1.1]', '{"a":{"a":[1,[1]]}}'],
    ),
    "arithmetic": (
        "arithmetic.lark",
        list("1a+*() ") + ["1+", "(a", ") ", "a*", "11"],
        "1a+*() ",
        ["(1+a)*11", "a * (1 + 1)", "1+a*a"],
    ),
}


def in_language(name: str, text: str) -> bool:
    """The independent membership test for the case's grammar file (a bracket recognizer,
    json.loads, lark's Earley parser)."""
    return grammar_file_accepts(CASES[name][0], text)


_COMPILED: dict[str, pm.CompiledGrammar] = {}


def toy(name: str) -> pm.CompiledGrammar:
    """The case's grammar over its toy vocabulary (plus a stop token)."""
    if name not in _COMPILED:
        file, vocab, _, _ = CASES[name]
        info = pm.TokenizerInfo.from_vocab(vocab + ["</s>"], stop_token_ids=[len(vocab)])
        compiler = pm.GrammarCompiler(info)
        text = (GRAMMARS / file).read_text()
        _COMPILED[name] = compiler.compile_lark(text) if file.endswith(".lark") else compiler.compile_grammar(text)
    return _COMPILED[name]


def fillings(gap: pm.Gap, vocab: list[str]) -> list[str]:
    """Every string a bounded gap (bytes gaps: with an alphabet) can hold."""
    units = vocab if gap.unit == "tokens" else list(gap.alphabet.decode())
    return ["".join(p) for n in range(gap.min, gap.max + 1) for p in itertools.product(units, repeat=n)]


def brute_force(name: str, segments: list[str], gaps: list[pm.Gap]) -> bool:
    vocab = CASES[name][1]
    for combo in itertools.product(*(fillings(g, vocab) for g in gaps)):
        if in_language(name, segments[0] + "".join(fill + segments[k + 1] for k, fill in enumerate(combo))):
            return True
    return False


def random_template(name: str, rng: random.Random, max_fillings: int = 4000) -> tuple[list[str], list[pm.Gap]]:
    """Pieces of a valid sample (sometimes damaged) with bounded gaps between them."""
    _, vocab, alphabet, samples = CASES[name]
    while True:
        text = rng.choice(samples)
        cuts = sorted(rng.sample(range(len(text) + 1), rng.randint(1, 3)))
        pieces = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        segments = pieces[0::2] + ([""] if len(pieces) % 2 == 0 else [])  # odd pieces become gaps
        if rng.random() < 0.3:  # damage one segment
            k = rng.randrange(len(segments))
            pos = rng.randint(0, len(segments[k]))
            segments[k] = segments[k][:pos] + rng.choice(alphabet) + segments[k][pos + 1 :]
        gaps = []
        for _ in range(len(segments) - 1):
            if rng.random() < 0.35:
                hi = rng.randint(0, 2)
                gaps.append(pm.Gap.tokens(hi, min=rng.randint(0, hi)))
            else:
                hi = rng.randint(0, 3)
                subset = (
                    alphabet if rng.random() < 0.5 else "".join(rng.sample(alphabet, rng.randint(1, len(alphabet))))
                )
                gaps.append(pm.Gap.bytes(hi, min=rng.randint(0, hi), alphabet=subset.encode()))
        if np.prod([len(fillings(g, vocab)) for g in gaps]) <= max_fillings:
            return segments, gaps


@pytest.mark.parametrize("name", sorted(CASES))
def test_can_complete_equals_enumeration(name):
    compiled = toy(name)
    rng = random.Random(name)
    answers = []
    for _ in range(120 if name != "arithmetic" else 40):
        segments, gaps = random_template(name, rng, 600 if name == "arithmetic" else 4000)
        expected = brute_force(name, segments, gaps)
        assert pm.can_complete(compiled, segments, gaps) == expected, (segments, gaps)
        witness = pm.find_completion(compiled, segments, gaps)
        assert (witness is not None) == expected
        if witness is not None:
            assert in_language(name, witness.decode()) and template_regex(segments, gaps, name).fullmatch(witness)
        answers.append(expected)
    assert 0.2 < np.mean(answers) < 0.9  # both answers are exercised


def template_regex(segments: list[str], gaps: list[pm.Gap | None], name: str) -> re.Pattern:
    """The template as a Python regex over bytes (the independent reading of what it matches)."""
    vocab = CASES[name][1]
    out = [re.escape(segments[0].encode())]
    for k, gap in enumerate(gaps):
        gap = gap or pm.Gap()
        hi = "" if gap.max is None else gap.max
        if gap.unit == "tokens":
            unit = b"(?:" + b"|".join(re.escape(t.encode()) for t in vocab) + b")"
        else:
            unit = (
                b"[" + b"".join(re.escape(bytes([c])) for c in gap.alphabet) + b"]" if gap.alphabet else b"[\x00-\xff]"
            )
        out.append(unit + b"{%d,%s}" % (gap.min, str(hi).encode()))
        out.append(re.escape(segments[k + 1].encode()))
    return re.compile(b"".join(out), re.DOTALL)


@pytest.mark.parametrize("name", ["parens", "json"])
def test_unbounded_gaps_against_witnesses_and_enumeration(name):
    compiled = toy(name)
    rng = random.Random(name + "unbounded")
    seen = set()
    for _ in range(60):
        segments, gaps = random_template(name, rng)
        unbounded = [pm.Gap.tokens() if g.unit == "tokens" else pm.Gap.bytes(alphabet=g.alphabet) for g in gaps]
        witness = pm.find_completion(compiled, segments, unbounded)
        assert pm.can_complete(compiled, segments, unbounded) == (witness is not None)
        if witness is not None:
            assert in_language(name, witness.decode())
            assert template_regex(segments, unbounded, name).fullmatch(witness), (segments, unbounded, witness)
        else:  # no filling up to a length bound either
            bounded = [pm.Gap(0, 2, g.unit, g.alphabet) for g in unbounded]
            assert not brute_force(name, segments, bounded)
        seen.add(witness is None)
    assert seen == {True, False}


def test_allowed_tokens_equal_checking_each_token():
    for name in ("parens", "json"):
        compiled = toy(name)
        vocab = CASES[name][1]
        stop = len(vocab)
        rng = random.Random(name + "masks")
        nonempty = 0
        for k in range(30):
            segments, gaps = random_template(name, rng)
            if k % 3 == 0:  # unbounded gaps too
                gaps = [pm.Gap(g.min, None, g.unit, g.alphabet) for g in gaps]
            template = pm.Template.from_segments(segments, gaps)
            for position, gap in enumerate(template.parts):
                if not isinstance(gap, pm.Gap):
                    continue
                mask = pm.allowed_tokens(compiled, template, position)
                for t, text in enumerate(vocab):
                    used = 1 if gap.unit == "tokens" else len(text)
                    fits = gap.max is None or gap.max >= used
                    expected = fits and pm.can_complete(compiled, template.replace(position, text, gap.less(used)))
                    assert mask[t] == expected, (template, position, text)
                empty_ok = gap.min == 0 and pm.can_complete(compiled, template.replace(position))
                assert mask[stop] == empty_ok
                nonempty += bool(mask[:stop].any())
        assert nonempty > 5


def test_growing_buffers_resume_the_saturation(monkeypatch):
    """Buffers that start at 1-4 rows grow many times mid-saturation; answers, witnesses and masks
    stay those of a run that never grows."""
    from pushmask.masks import infill

    rng = random.Random("resume")
    cases = []
    for name in ("parens", "json"):
        for _ in range(15):
            segments, gaps = random_template(name, rng)
            template = pm.Template.from_segments(segments, gaps)
            position = next((k for k, part in enumerate(template.parts) if isinstance(part, pm.Gap)), None)
            cases.append((toy(name), template, position))

    def answers():
        return [
            (
                pm.can_complete(c, t),
                pm.find_completion(c, t),
                None if p is None else pm.allowed_tokens(c, t, p).tolist(),
            )
            for c, t, p in cases
        ]

    expected = answers()
    monkeypatch.setattr(
        infill,
        "_first_capacities",
        lambda guess, record, max_items: (
            dict.fromkeys(("items", "sums", "ents", "calls", "edges", "exits"), 1) | {"items": 4}
        ),
    )
    assert answers() == expected


def test_saturation_kernels_unpack_their_records_in_field_order():
    """The saturation kernels take records (automata/saturation.py) as plain tuples and unpack them
    by position: each unpacking names the record's fields, in its class's order."""
    import ast
    import inspect

    from pushmask.automata import saturation

    records = {
        "template": saturation.TemplateAutomaton,
        "trie": saturation.TrieAutomaton,
        "stacks": saturation.StartStacks,
        "facts": saturation.Facts,
    }
    unpacked = {}
    for kernel in (saturation.saturate, saturation._call, saturation._return):
        tree = ast.parse(inspect.getsource(kernel.py_func))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in records:
                (target,) = node.targets
                assert isinstance(target, ast.Tuple)
                names = tuple(element.id for element in target.elts if isinstance(element, ast.Name))
                assert names == records[node.value.id]._fields, (kernel.__name__, node.value.id)
                unpacked.setdefault(kernel.__name__, []).append(node.value.id)
    assert unpacked == {"saturate": ["template", "trie", "stacks", "facts"], "_call": ["facts"], "_return": ["facts"]}


@pytest.fixture(scope="module")
def smollm2_json():
    return grammar_compiler("smollm2").compile_grammar((GRAMMARS / "json.gbnf").read_text())


@pytest.mark.parametrize("prefix", ['{"a": [1, 2', '{"name": "Bo', "[", '{"a": tr', ""])
def test_mask_before_an_open_gap_equals_the_matcher_mask(smollm2_json, prefix):
    """[prefix, any bytes] allows exactly what left-to-right matching allows after the prefix (text
    tokens; byte-level BPE has every byte as a token, so any bytes = any tokens)."""
    matcher = pm.GrammarMatcher(smollm2_json)
    assert matcher.accept_string(prefix)
    expected = matcher.get_next_token_mask()
    got = pm.allowed_tokens(smollm2_json, pm.Template([prefix, pm.Gap()]), 1)
    text = np.array([len(b) > 0 for b in smollm2_json.tokenizer_info.decoded_vocab])
    assert np.array_equal(got & text, expected & text)
    # The same parse picked up from the matcher's stacks.
    assert np.array_equal(pm.allowed_tokens(matcher, pm.Template([pm.Gap()]), 0), got)
    for tail in ([pm.Gap(), "}"], [pm.Gap.bytes(3), ", 3]}"], ["]"], [pm.Gap.tokens(1), "}"]):
        assert pm.can_complete(matcher, pm.Template(tail)) == pm.can_complete(
            smollm2_json, pm.Template([prefix, *tail])
        )


def test_mask_with_a_suffix_on_a_real_vocabulary(smollm2_json):
    info = smollm2_json.tokenizer_info
    template = pm.Template(['{"a": [1, ', pm.Gap.bytes(6), '], "b": "x"}'])
    mask = pm.allowed_tokens(smollm2_json, template, 1)
    rng = np.random.default_rng(0)
    allowed = np.flatnonzero(mask)
    assert 10 < len(allowed) < 2000
    sample = set(rng.choice(allowed, 60, replace=False).tolist()) | set(
        rng.choice(info.vocab_size, 200, replace=False).tolist()
    )
    for t in sample:
        data = info.decoded_vocab[t]
        if t in info.stop_token_ids:
            expected = pm.can_complete(smollm2_json, template.replace(1))
        else:
            expected = 0 < len(data) <= 6 and pm.can_complete(
                smollm2_json, template.replace(1, data, pm.Gap.bytes(6 - len(data)))
            )
        assert mask[t] == expected, data


def test_budget_instead_of_a_hang(smollm2_json):
    template = pm.Template(['{"a": "'] + [pm.Gap.tokens(1, min=1), "x"] * 40 + ['"}'])
    with pytest.raises(pm.LimitExceededError, match="max_items"):
        pm.can_complete(smollm2_json, template, max_items=50_000)


def test_bad_inputs_raise_clear_errors():
    compiled = toy("parens")
    with pytest.raises(ValueError, match="gaps between"):
        pm.can_complete(compiled, ["(", ")"], [])
    with pytest.raises(ValueError, match="max must be"):
        pm.Gap.bytes(2, min=3)
    with pytest.raises(ValueError, match="unit"):
        pm.Gap(unit="chars")
    with pytest.raises(ValueError, match="alphabet"):
        pm.Gap(unit="tokens", alphabet=b"a")
    with pytest.raises(ValueError, match="not a Gap"):
        pm.allowed_tokens(compiled, pm.Template(["(", None, ")"]), 0)
    with pytest.raises(IndexError):
        pm.allowed_tokens(compiled, pm.Template(["(", None]), 5)
    with pytest.raises(TypeError, match="segments"):
        pm.can_complete(compiled, "()")
    with pytest.raises(ValueError, match="prefix"):
        pm.fill_in_the_middle(compiled, lambda ids: np.zeros(10), ")", "", max_tokens=3)


def test_chooser_draws_from_the_masked_distribution():
    """Proposals in key order, then the mask: the pick is always the best key inside the mask."""
    compiled = toy("json")
    rng = np.random.default_rng(1)
    for max_proposals in (0, 2, 8):
        chooser = _Chooser(compiled, 1.0, 0, max_proposals)
        for _ in range(50):
            keys = chooser.keys(rng.normal(size=compiled.tokenizer_info.vocab_size))
            allowed = rng.random(len(keys)) < 0.2
            allowed[rng.integers(len(keys))] = True
            got = chooser.choose(keys, lambda t: bool(allowed[t]), lambda: allowed)
            assert got == int(np.argmax(np.where(allowed, keys, -np.inf)))


def random_logits(width: int, seed: int, rows: int | None = None):
    """A toy model: fresh random logits at every call."""
    rng = np.random.default_rng(seed)
    return lambda ids: rng.normal(size=(rows, width) if rows else width) * 3.0


@pytest.mark.parametrize("exact_runs", [0, 1, None])
@pytest.mark.parametrize("name", ["json", "arithmetic"])
def test_diffusion_outputs_are_in_the_language(name, exact_runs):
    compiled = toy(name)
    _, vocab, _, samples = CASES[name]
    width = len(vocab) + 1
    for seed in range(6):
        length = 6 + seed
        prefix, suffix = ("", "") if seed % 2 == 0 else (samples[0][:3], samples[0][-2:])
        result = pm.diffusion_generate(
            compiled,
            random_logits(width, seed, length),
            length,
            prefix=prefix,
            suffix=suffix,
            temperature=1.0,
            seed=seed,
            exact_runs=exact_runs,
            tokens_per_step=1 + seed % 3,
            max_proposals=seed % 4,
        )
        assert len(result.token_ids) == length and result.model_calls == -(-length // (1 + seed % 3))
        assert in_language(name, result.text), result.text
        assert result.text.startswith(prefix) and result.text.endswith(suffix)


@pytest.mark.parametrize("exact_runs", [0, 1, None])
@pytest.mark.parametrize("name", ["json", "arithmetic"])
def test_fill_in_the_middle_outputs_are_in_the_language(name, exact_runs):
    compiled = toy(name)
    _, vocab, _, samples = CASES[name]
    for seed in range(6):
        text = samples[seed % len(samples)]
        cut = 1 + seed % (len(text) - 2)
        prefix, suffix = text[:cut], text[cut + 1 :]
        result = pm.fill_in_the_middle(
            compiled,
            random_logits(len(vocab) + 1, seed),
            prefix,
            suffix,
            max_tokens=2 + seed,
            temperature=1.0,
            seed=seed,
            exact_runs=exact_runs,
            max_proposals=seed % 3,
        )
        assert len(result.token_ids) <= 2 + seed
        assert in_language(name, result.text), result.text
        assert result.text.startswith(prefix) and result.text.endswith(suffix)


def test_diffusion_on_a_real_vocabulary(smollm2_json):
    """A model that prefers the tokens of a fixed document: the output parses, and with every
    position free to take that document's tokens it is recovered."""
    info = smollm2_json.tokenizer_info
    target = hf_tokenizer("smollm2").encode('{"name": "Bo", "age": 7}', add_special_tokens=False)
    length = len(target) + 2
    eos = info.stop_token_ids[0]
    wanted = target + [eos] * 2

    def model(ids):
        logits = np.random.default_rng(len(ids)).normal(size=(length, info.vocab_size))
        logits[np.arange(length), wanted] += 12.0
        return logits

    result = pm.diffusion_generate(smollm2_json, model, length, tokens_per_step=3)
    assert json.loads(result.text) == {"name": "Bo", "age": 7}
