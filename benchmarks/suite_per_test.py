"""Per-test counts of the official JSON Schema Test Suite (README "JSON Schema"): every instance
token by token with the Llama-3 tokenizer, then EOS; pass / wrong accept / wrong reject / in groups
that do not compile, and why those do not.

    python benchmarks/suite_per_test.py draft2020-12              # validation preset, value checks on
    python benchmarks/suite_per_test.py draft2020-12 --no-checks
    python benchmarks/suite_per_test.py all --preset defaults     # every draft, strict mode on

Presets: "validation" is the spec language (strict_mode=False), as validate-corpus compiles;
"defaults" is compile_json_schema's default strict mode (additional_properties_default="declared").
Both take members in any order (the instances list them in other orders than the schemas) and
compile an unsatisfiable schema to the empty language.
"""

import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_json_schema_suite as suite  # noqa: E402
from support import accepts_text  # noqa: E402

from pushmask.core.errors import LimitExceededError, SchemaError  # noqa: E402

PRESETS = {
    "validation": {"additional_properties_default": True, "property_order": "any"},
    "defaults": {"additional_properties_default": "declared", "property_order": "any"},
}


def main(draft: str, checks: bool, preset: str = "validation") -> dict:
    compiler = suite.grammar_compiler("llama3")
    tokenizer = suite.hf_tokenizer("llama3")
    counts = {"pass": 0, "wrong_accept": 0, "wrong_reject": 0, "not_compiled": 0}
    why: dict[str, int] = {}
    start = time.time()
    for n, (group_id, schema, tests) in enumerate(suite.groups(draft)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grammar = suite.json_schema_to_grammar(
                    schema, retrieve=suite.retrieve, value_checks=checks, unsatisfiable="empty", **PRESETS[preset]
                )
            compiled = compiler.compile_ir(grammar)
        except (SchemaError, LimitExceededError) as exc:
            counts["not_compiled"] += len(tests)
            why[str(exc)[:70]] = why.get(str(exc)[:70], 0) + len(tests)
            continue
        for test in tests:
            ids = tokenizer.encode(json.dumps(test["data"], separators=(",", ":")), add_special_tokens=False)
            accepted = suite.accepts_tokens(compiled, ids, n % suite.MASK_CHECK_EVERY == 0) and accepts_text(
                compiled, json.dumps(test["data"])
            )
            if accepted == test["valid"]:
                counts["pass"] += 1
            elif accepted:
                counts["wrong_accept"] += 1
                print("WRONG ACCEPT", group_id, test["description"])
            else:
                counts["wrong_reject"] += 1
    print(draft, preset, "checks" if checks else "no checks", counts, f"{time.time() - start:.1f}s", flush=True)
    for reason, count in sorted(why.items(), key=lambda item: -item[1]):
        print(f"  {count:4d} {reason}")
    return counts


if __name__ == "__main__":
    args = sys.argv[1:]
    preset = args[args.index("--preset") + 1] if "--preset" in args else "validation"
    presets = list(PRESETS) if preset == "both" else [preset]
    drafts = [a for a in args if a.startswith("draft") or a == "all"]
    drafts = list(suite.DRAFTS) if drafts == ["all"] else drafts
    for name in presets:
        for draft in drafts:
            main(draft, "--no-checks" not in args, name)
