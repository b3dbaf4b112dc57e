"""Digests of what the compiler produces, for checking that a refactor changes nothing.

`python benchmarks/identity_digest.py OUT.json [--step N] [--tokenizer NAME]` compiles every N-th
MaskBench dev schema (property orders "definition" and "any"), the grammars in tests/grammars and
the hostile-input cases that compile, and writes, per input, the SHA-1 of the packed automaton
(`pda.blob`) and of every token bitmask filled along the first valid instance's tokens (or the
error's type and message).  Run it before and after a change and compare the two files with
`--compare BEFORE.json AFTER.json`: identical digests mean identical automata and masks.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import pushmask

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import hostile_inputs  # noqa: E402  (tests/ on the path above)
from support import DATA, hf_tokenizer, tokenizer_info  # noqa: E402


def mask_digest(compiled, token_ids) -> str:
    """SHA-1 over the bitmask before each token and at the end (after EOS would be allowed)."""
    matcher = pushmask.GrammarMatcher(compiled)
    bitmask = pushmask.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    digest = hashlib.sha1()
    for token_id in token_ids:
        matcher.fill_next_token_bitmask(bitmask)
        digest.update(np.asarray(bitmask).tobytes())
        if not matcher.accept_token(int(token_id)):
            digest.update(b"rejected")
            break
    else:
        matcher.fill_next_token_bitmask(bitmask)
        digest.update(np.asarray(bitmask).tobytes())
    return digest.hexdigest()


def outcome(compile_call, token_ids=None) -> dict:
    try:
        compiled = compile_call()
    except pushmask.PushmaskError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    result = {"pda": hashlib.sha1(compiled.pda.blob.tobytes()).hexdigest()}
    if token_ids is not None:
        result["masks"] = mask_digest(compiled, token_ids)
    return result


def collect(step: int, tokenizer_name: str) -> dict:
    compiler = pushmask.GrammarCompiler(tokenizer_info(tokenizer_name))
    encode = hf_tokenizer(tokenizer_name).encode
    out = {}
    for path in sorted((DATA / "maskbench-dev").glob("*.json"))[::step]:
        record = json.loads(path.read_text())
        valid = [t["data"] for t in record.get("tests", []) if t.get("valid")]
        tokens = encode(json.dumps(valid[0]), add_special_tokens=False) if valid else None
        for order in ("definition", "any"):
            out[f"{path.name}:{order}"] = outcome(
                lambda: compiler.compile_json_schema(record["schema"], property_order=order, strict_mode=False),
                tokens if order == "any" else None,
            )
    for path in sorted((REPO / "tests" / "grammars").iterdir()):
        if path.suffix == ".lark":
            out[path.name] = outcome(lambda: compiler.compile_lark(path.read_text()))
        else:
            out[path.name] = outcome(lambda: compiler.compile_grammar(path.read_text()))
    for case in hostile_inputs.CASES:
        if case.expect == "ok":
            out[case.id] = outcome(lambda: hostile_inputs._compile(compiler, case.kind, case.make()))
    return out


def compare(before_path: str, after_path: str) -> int:
    before, after = json.loads(Path(before_path).read_text()), json.loads(Path(after_path).read_text())
    differing = [key for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]
    for key in differing:
        print(f"{key}: {before.get(key)} -> {after.get(key)}")
    print(f"{len(before)} inputs before, {len(after)} after, {len(differing)} differ")
    return 1 if differing else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--step", type=int, default=10, help="take every N-th dev schema (default 10)")
    parser.add_argument("--tokenizer", default="smollm2")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    if not args.out:
        parser.error("give OUT.json, or --compare BEFORE AFTER")
    result = collect(args.step, args.tokenizer)
    Path(args.out).write_text(json.dumps(result, indent=0, sort_keys=True))
    print(f"{len(result)} inputs digested into {args.out}")


if __name__ == "__main__":
    main()
