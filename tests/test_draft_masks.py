"""Draft masks in one call (masks/draft.py) equal what step by step accept / fill / rollback gives,
on random draft trees over dev schemas and grammar files, for all four tokenizers; the matcher
is left where it was, and accepting the draft's nodes reaches the states step by step reaches."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from support import DATA, GRAMMARS, TOKENIZER_NAMES, UNIQUE_STRINGS, grammar_compiler, hf_tokenizer, require_shared  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.masks.draft import batch_fill_draft_bitmasks, fill_draft_bitmasks  # noqa: E402


def _dev_items(tokenizer_name: str, n: int, skip: int):
    """n dev schemas (every skip-th file with a valid instance) and the instance's tokens."""
    hf = hf_tokenizer(tokenizer_name)
    items = []
    paths = sorted(require_shared(DATA / "maskbench-dev").glob("*.json"))
    for path in paths[::skip]:
        item = json.loads(path.read_text())
        valid = [t["data"] for t in item.get("tests", []) if t["valid"]]
        if valid:
            text = json.dumps(valid[0], ensure_ascii=False)
            items.append((item["schema"], hf.encode(text, add_special_tokens=False)))
        if len(items) == n:
            break
    return items


def _allowed(row: np.ndarray, vocab_size: int) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size])


class StepOracle:
    """Each node's mask by step by step accept / fill / rollback on a matcher of its own."""

    def __init__(self, matcher: pm.GrammarMatcher):
        self.matcher = matcher
        self.words = (matcher.vocab_size + 31) // 32

    def node(self, path: list[int]) -> tuple[bool, np.ndarray | None]:
        """(whether every token of the path is accepted in turn, the mask after it)."""
        taken = 0
        for token in path:
            if (
                self.matcher.is_terminated()
                or not (0 <= token < self.matcher.vocab_size)
                or not self.matcher.accept_token(token)
            ):
                self.matcher.rollback(taken)
                return False, None
            taken += 1
        row = np.zeros((1, self.words), dtype=np.int32)
        self.matcher.fill_next_token_bitmask(row, 0)
        self.matcher.rollback(taken)
        return True, row[0]


def _random_tree(oracle: StepOracle, rng: random.Random, n: int, stop_ids, chain: bool):
    """A draft of n nodes grown at random, with the oracle's answer for each node: tokens mostly
    from the parent's allowed set, sometimes any id (usually refused) or a stop token."""
    vocab = oracle.matcher.vocab_size
    ok, root = oracle.node([])
    assert ok
    tokens, parents, paths, expected = [], [], [], [(True, root)]
    for i in range(n):
        if chain:
            p = i - 1
        else:
            live = [-1] + [k for k in range(i) if expected[k + 1][0]]
            p = rng.choice(live[-3:]) if rng.random() < 0.7 else rng.choice([-1] + list(range(i)))
        parent_ok, parent_row = expected[p + 1]
        r = rng.random()
        if parent_ok and r < 0.75:
            allowed = _allowed(parent_row, vocab)
            token = int(rng.choice(allowed.tolist())) if len(allowed) else rng.randrange(vocab)
        elif r < 0.85:
            token = int(rng.choice(list(stop_ids)))
        else:
            token = rng.randrange(vocab + 8)  # a few ids past the vocabulary, as padded models draft
        path = ([] if p < 0 else paths[p]) + [token]
        tokens.append(token)
        parents.append(p)
        paths.append(path)
        expected.append(oracle.node(path) if parent_ok else (False, None))
    return tokens, parents, expected


def _check(matcher, tokens, parents, expected, result, bitmask, first_row):
    for node in range(-1, len(tokens)):
        ok, row = expected[node + 1]
        if node >= 0:
            assert bool(result.accepted[node]) == ok, (node, tokens[node])
        if ok:
            got = np.asarray(bitmask)[first_row + 1 + node]
            assert (got == row).all(), (node, tokens[: node + 1])
        else:  # a refused node repeats its parent's row
            source = parents[node]
            while not expected[source + 1][0]:
                source = parents[source]
            assert (np.asarray(bitmask)[first_row + 1 + node] == expected[source + 1][1]).all()


def _prefix(matcher, tokens, steps):
    for token in tokens[:steps]:
        assert matcher.accept_token(token)


CASES = []
for _name in TOKENIZER_NAMES:
    CASES.append((_name, "dev"))
    CASES.append((_name, "grammars"))


@pytest.mark.parametrize("name,kind", CASES)
def test_draft_masks_equal_step_by_step(name, kind):
    compiler = grammar_compiler(name)
    info = compiler.tokenizer_info
    rng = random.Random(f"{name}-{kind}")
    if kind == "dev":
        problems = [
            (compiler.compile_json_schema(schema, strict_mode=False), tokens)
            for schema, tokens in _dev_items(name, 3, 97)
        ]
        hf = hf_tokenizer(name)
        problems.append(
            (
                compiler.compile_json_schema(UNIQUE_STRINGS),  # value checks in the masks
                hf.encode('["ab", "cd", "e"]', add_special_tokens=False),
            )
        )
    else:
        problems = []
        for file in ("json.gbnf", "arithmetic.lark", "c.gbnf"):
            text = (GRAMMARS / file).read_text()
            kind_of = "lark" if file.endswith(".lark") else "ebnf"
            problems.append((compiler.compile(kind_of, text), None))
    stop_ids = info.stop_token_ids
    for case, (compiled, instance) in enumerate(problems):
        for trial in range(3):
            budgeted = trial == 2
            matcher = pm.GrammarMatcher(compiled, max_tokens=400 if budgeted else None)
            twin = pm.GrammarMatcher(compiled, max_tokens=400 if budgeted else None)
            if instance is not None:
                steps = rng.randrange(len(instance) + 1)
                _prefix(matcher, instance, steps)
                _prefix(twin, instance, steps)
            else:  # grammar files: a random walk from the masks
                oracle = StepOracle(twin)
                for _ in range(rng.randrange(12)):
                    allowed = [t for t in _allowed(oracle.node([])[1], info.vocab_size).tolist() if t not in stop_ids]
                    if not allowed:
                        break
                    token = rng.choice(allowed)
                    assert matcher.accept_token(token) and twin.accept_token(token)
            chain = trial == 0
            tokens, parents, expected = _random_tree(StepOracle(twin), rng, rng.randrange(1, 9), stop_ids, chain)
            first_row = rng.randrange(3)
            bitmask = np.full((first_row + len(tokens) + 1, (info.vocab_size + 31) // 32), -1, dtype=np.int32)
            before = matcher.num_accepted_tokens, matcher._state
            result = fill_draft_bitmasks(
                matcher, tokens, bitmask, parents=None if chain else parents, first_row=first_row
            )
            assert (matcher.num_accepted_tokens, matcher._state) == before  # left where it was
            _check(matcher, tokens, parents, expected, result, bitmask, first_row)
            if chain:
                inside = next((k for k, t in enumerate(tokens) if not 0 <= t < info.vocab_size), len(tokens))
                assert result.accepted_prefix() == matcher.validate_tokens(tokens[:inside])
            # Accepting a path through the draft reaches the mask step by step reaches.
            leaf = max((k for k in range(len(tokens)) if expected[k + 1][0]), default=None)
            if leaf is not None:
                path = []
                node = leaf
                while node >= 0:
                    path.append(node)
                    node = parents[node]
                for node in reversed(path):
                    result.accept(node)
                row = np.zeros((1, bitmask.shape[1]), dtype=np.int32)
                matcher.fill_next_token_bitmask(row, 0)
                assert (row[0] == expected[leaf + 1][1]).all(), (name, kind, case)
                matcher.rollback(len(path))


def test_batch_form_fills_every_request_in_vllm_layout():
    """Several requests in one call, rows one after the other (k + 1 per request), a torch bitmask:
    each request's rows equal its own single call's."""
    import torch

    compiler = grammar_compiler("smollm2")
    info = compiler.tokenizer_info
    items = _dev_items("smollm2", 3, 211)
    matchers, drafts = [], []
    for schema, tokens in items:
        compiled = compiler.compile_json_schema(schema, strict_mode=False)
        matcher = pm.GrammarMatcher(compiled)
        _prefix(matcher, tokens, 3)
        matchers.append(matcher)
        drafts.append(tokens[3:7] + [5])
    words = (info.vocab_size + 31) // 32
    bitmask = torch.zeros((sum(len(d) + 1 for d in drafts), words), dtype=torch.int32)
    results = batch_fill_draft_bitmasks(matchers, drafts, bitmask)
    row = 0
    for matcher, draft, result in zip(matchers, drafts, results):
        single = np.zeros((len(draft) + 1, words), dtype=np.int32)
        fill_draft_bitmasks(matcher, draft, single)
        assert result.first_row == row
        assert (bitmask[row : row + len(draft) + 1].numpy() == single).all()
        assert result.accepted[:4].all()
        row += len(draft) + 1


def test_bad_trees_get_clear_errors():
    compiled = grammar_compiler("smollm2").compile_regex("[ab]+")
    matcher = pm.GrammarMatcher(compiled)
    bitmask = np.zeros((4, (matcher.vocab_size + 31) // 32), dtype=np.int32)
    with pytest.raises(ValueError, match="parent 1 must be -1"):
        fill_draft_bitmasks(matcher, [1, 2], bitmask, parents=[-1, 1])
    with pytest.raises(ValueError, match="2 draft tokens but 1 parent"):
        fill_draft_bitmasks(matcher, [1, 2], bitmask, parents=[-1])
    with pytest.raises(pm.ArgumentTypeError, match=r"draft tokens\[1\] must be an int, got float"):
        fill_draft_bitmasks(matcher, [1, 2.5], bitmask)  # not read as token 2
    result = fill_draft_bitmasks(matcher, [1], bitmask)
    with pytest.raises(ValueError, match="refused"):
        result.accept(0)
