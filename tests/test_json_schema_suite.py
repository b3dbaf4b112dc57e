"""The official JSON Schema Test Suite against the JSON Schema compiler and the real matcher.

For every test group (one schema, several instances) of tests/{draft}/*.json (not optional/):
compile the schema; then each instance, serialised with json.dumps both compactly
(separators (",", ":")) and with the default ", " / ": ", must be accepted by the matcher
exactly when the suite says it is valid.  The compact text is fed token by token
(Llama-3 tokenizer, accept_token), the default text with accept_string; for a fixed subset
of groups every token is also checked against the filled next-token bitmask.

Outcome per group: "pass", "unsupported" (SchemaError / UnsupportedSchemaError /
LimitExceededError at compile time), "fail" (a valid instance rejected: a completeness gap)
or "unsound" (an invalid instance accepted).  tests/json_schema_suite_expected.json is a
ratchet: a group recorded as "pass" must keep passing, and no group may become unsound that
was not recorded so.  When more groups pass, the test prints a hint to refresh the file:

    .venv/bin/python tests/test_json_schema_suite.py --update

Remote references (http://localhost:1234/...) are served from the suite's remotes/ folder
(support.retrieve).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from support import DRAFTS, accepts_text, grammar_compiler, groups, hf_tokenizer, retrieve  # noqa: E402

import pushmask as pm  # noqa: E402
from pushmask.core.errors import LimitExceededError, SchemaError  # noqa: E402
from pushmask.grammar.json_options import JsonOptions  # noqa: E402
from pushmask.grammar.json_schema import json_schema_to_grammar  # noqa: E402

EXPECTED = Path(__file__).resolve().parent / "json_schema_suite_expected.json"
MASK_CHECK_EVERY = 15  # every 15th group also checks each token against the bitmask


def accepts_tokens(compiled, token_ids, check_mask: bool) -> bool:
    matcher = pm.GrammarMatcher(compiled)
    bitmask = pm.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size) if check_mask else None
    for tid in token_ids:
        if check_mask:
            matcher.fill_next_token_bitmask(bitmask, 0)
            allowed = bool((int(bitmask[0, tid // 32]) >> (tid % 32)) & 1)
            ok = matcher.accept_token(tid)
            assert allowed == ok, f"bitmask says {allowed} but accept_token says {ok} for token {tid}"
        elif not matcher.accept_token(tid):
            return False
        if check_mask and not ok:
            return False
    return matcher.can_end()


def run_group(compiler, tokenizer, schema, tests, check_mask: bool) -> tuple[str, str]:
    """(outcome, detail) for one group."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = json_schema_to_grammar(schema, JsonOptions.validation(retrieve=retrieve))
        compiled = compiler.compile_ir(grammar)
    except (SchemaError, LimitExceededError) as exc:
        return "unsupported", str(exc)
    outcome, detail = "pass", ""
    for test in tests:
        compact = json.dumps(test["data"], separators=(",", ":"))
        spaced = json.dumps(test["data"])
        ids = tokenizer.encode(compact, add_special_tokens=False)
        results = [accepts_tokens(compiled, ids, check_mask), accepts_text(compiled, spaced)]
        if test["valid"] and not all(results) and outcome == "pass":
            outcome, detail = "fail", f"valid instance rejected: {test['description']}: {compact[:80]}"
        if not test["valid"] and any(results):
            return "unsound", f"invalid instance accepted: {test['description']}: {compact[:80]}"
    return outcome, detail


def evaluate(draft: str) -> dict[str, tuple[str, str]]:
    compiler = grammar_compiler("llama3")
    tokenizer = hf_tokenizer("llama3")
    out = {}
    for n, (gid, schema, tests) in enumerate(groups(draft)):
        out[gid] = run_group(compiler, tokenizer, schema, tests, check_mask=(n % MASK_CHECK_EVERY == 0))
    return out


def load_expected() -> dict:
    return json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}


@pytest.mark.parametrize("draft", DRAFTS)
def test_json_schema_test_suite(draft):
    expected = load_expected().get(draft, {})
    results = evaluate(draft)
    counts: dict[str, int] = {}
    for outcome, _ in results.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    print(f"{draft}: {counts}")
    regressions = [
        f"{gid}: expected pass, got {o} ({d})"
        for gid, (o, d) in results.items()
        if expected.get(gid) == "pass" and o != "pass"
    ]
    new_unsound = [
        f"{gid}: {d}" for gid, (o, d) in results.items() if o == "unsound" and expected.get(gid) != "unsound"
    ]
    improved = [gid for gid, (o, _) in results.items() if o == "pass" and expected.get(gid) != "pass"]
    if improved:
        print(
            f"{len(improved)} group(s) now pass that the ratchet does not record ({improved[:5]}...); "
            "run `.venv/bin/python tests/test_json_schema_suite.py --update` to raise the floor"
        )
    assert not new_unsound, "unsound (accepted an invalid instance):\n" + "\n".join(new_unsound)
    assert not regressions, "regressed:\n" + "\n".join(regressions)


def test_expected_file_is_consistent():
    """The ratchet names real groups, uses known outcomes, and records a substantial pass count."""
    expected = load_expected()
    assert set(expected) == set(DRAFTS)
    for draft in DRAFTS:
        ids = {gid for gid, _, _ in groups(draft)}
        assert set(expected[draft]) <= ids
        assert set(expected[draft].values()) <= {"pass", "fail", "unsupported", "unsound"}
        passing = sum(1 for o in expected[draft].values() if o == "pass")
        assert passing >= 0.6 * len(ids), f"{draft}: only {passing} of {len(ids)} groups recorded as passing"


if __name__ == "__main__":
    if "--update" not in sys.argv:
        sys.exit("usage: python tests/test_json_schema_suite.py --update   (rewrites the ratchet file)")
    data = {}
    for draft in DRAFTS:
        res = evaluate(draft)
        data[draft] = {gid: outcome for gid, (outcome, _) in res.items()}
        counts: dict[str, int] = {}
        for outcome in data[draft].values():
            counts[outcome] = counts.get(outcome, 0) + 1
        print(draft, counts)
        for gid, (o, d) in res.items():
            if o == "unsound":
                print("  UNSOUND", gid, d)
    EXPECTED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
