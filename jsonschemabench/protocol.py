"""The per-schema protocol, identical for every engine (the public MaskBench protocol, plus an
end check).

1. Time the compile, then one mask: `compile_us`, and `ttfm_us` = compile + first mask.
2. For each test: serialize with `json.dumps(data, ensure_ascii=False)`, tokenize without
   special tokens, and per token fill the full mask and commit the token (timed together, as
   MaskBench does: `mask_us` is the time from one mask to the next).
   A valid instance must be accepted token by token and the grammar must be able to end after
   the last token; an invalid one must be rejected somewhere (a token outside the mask, or no
   end after the last token).
3. Without tests (plain schema files) the schema is only compiled, unless `generate` asks for
   random mask-guided instances, which must then be valid JSON that `jsonschema` accepts.

Statuses, one per schema: pass, compile_error, validation_error (a valid instance rejected),
invalidation_error (an invalid instance accepted, or a generated instance that is invalid),
engine_error (an exception after a successful compile). The runner adds timeout, crash, oom.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from .engines import Engine, Session

STATUSES = (
    "pass",
    "compile_error",
    "validation_error",
    "invalidation_error",
    "engine_error",
    "timeout",
    "crash",
    "oom",
)


def _us_since(start_ns: int) -> float:
    return (time.perf_counter_ns() - start_ns) / 1000.0


def check_instance(session: Session, tokens: list[int], mask_us: list[float]) -> tuple[bool, str]:
    """Feed `tokens` through the protocol; (accepted whole and can end, where it stopped)."""
    session.reset()
    for position, token in enumerate(tokens):
        start = time.perf_counter_ns()
        session.fill_mask()
        ok = session.accept(token)
        mask_us.append(_us_since(start))
        if not ok:
            return False, f"token {position} (id {token}) not allowed"
    if not session.can_end():
        return False, "cannot end after the last token"
    return True, ""


def generate_instances(session: Session, hf_tokenizer: Any, count: int, seed: int, max_tokens: int = 256) -> list[dict]:
    """Random mask-guided walks: at each step pick a uniformly random allowed token; stop as
    soon as the grammar can end. Walks that hit `max_tokens` first are reported as unfinished."""
    rng = random.Random(seed)
    results = []
    for _ in range(count):
        session.reset()
        tokens: list[int] = []
        finished = False
        while len(tokens) < max_tokens:
            if tokens and session.can_end():
                finished = True
                break
            session.fill_mask()
            allowed = session.allowed_tokens()
            if len(allowed) == 0:
                break
            token = int(allowed[rng.randrange(len(allowed))])
            if not session.accept(token):
                raise RuntimeError(f"engine rejected token {token} from its own mask")
            tokens.append(token)
        results.append({"text": hf_tokenizer.decode(tokens), "finished": finished})
    return results


def _validate_generated(schema: Any, text: str) -> str:
    """'' when `text` is JSON that jsonschema accepts under `schema`, else the reason."""
    import jsonschema

    try:
        instance = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    try:
        validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        # Formats are asserted too: an engine that enforces "format" must produce valid ones.
        validator_class(schema, format_checker=validator_class.FORMAT_CHECKER).validate(instance)
    except jsonschema.ValidationError as exc:
        return f"jsonschema rejects it: {exc.message}"
    except jsonschema.SchemaError as exc:
        return f"jsonschema cannot check the schema: {exc.message}"
    return ""


def run_item(
    engine: Engine, hf_tokenizer: Any, task: dict, generate: int = 0, seed: int = 0, cold_cache: bool = False
) -> dict:
    """Run the protocol on one task ({"id", "schema", "tests"}) and return its record.

    cold_cache: clear the engine's cross-schema caches first, so compile and first mask run
    cold.  Every record ends with the worker's peak RSS and the engine's cache bytes so far.
    """
    record = _run_item(engine, hf_tokenizer, task, generate, seed, cold_cache)
    record.update(_memory_fields(engine))
    return record


def _memory_fields(engine: Engine) -> dict:
    import resource

    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"peak_rss_mb": round(peak_kb / 1024, 1), "cache_bytes": engine.cache_bytes()}


def _run_item(engine: Engine, hf_tokenizer: Any, task: dict, generate: int, seed: int, cold_cache: bool) -> dict:
    record: dict[str, Any] = {
        "id": task["id"],
        "engine": engine.name,
        "status": "pass",
        "num_tests": len(task["tests"]),
        "num_valid_tests": sum(1 for t in task["tests"] if t["valid"]),
        "compile_us": None,
        "ttfm_us": None,
        "num_tokens": 0,
        "mask_us": [],
        "failures": [],
    }
    schema = task["schema"]
    # Tokenize before timing anything: tokenization is the same for every engine.
    instances = []
    for index, test in enumerate(task["tests"]):
        text = json.dumps(test["data"], ensure_ascii=False)
        try:
            instances.append((index, test["valid"], hf_tokenizer.encode(text, add_special_tokens=False)))
        except Exception as exc:  # e.g. lone surrogates, which no UTF-8 tokenizer can encode
            record.setdefault("skipped_tests", []).append({"test": index, "detail": f"cannot tokenize: {exc}"})

    if cold_cache:
        engine.clear_cache()
    start = time.perf_counter_ns()
    try:
        session = engine.compile(schema)
        record["compile_us"] = _us_since(start)
        session.fill_mask()
        record["ttfm_us"] = _us_since(start)
    except MemoryError:
        raise
    except Exception as exc:  # any refusal of the schema counts as a compile error
        record["status"] = "compile_error"
        record["error_type"] = type(exc).__name__  # a clean refusal, or (TypeError, ...) an engine bug
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        return record

    mask_us: list[float] = record["mask_us"]
    wrong_accepts = wrong_rejects = 0
    try:
        for index, valid, tokens in instances:
            accepted, where = check_instance(session, tokens, mask_us)
            if accepted and not valid:
                wrong_accepts += 1
                record["failures"].append({"test": index, "valid": False, "detail": "invalid instance accepted"})
            elif valid and not accepted:
                wrong_rejects += 1
                record["failures"].append({"test": index, "valid": True, "detail": where})
        if generate and not task["tests"]:
            generated = generate_instances(session, hf_tokenizer, generate, seed)
            record["generated"] = len(generated)
            record["generated_finished"] = sum(g["finished"] for g in generated)
            for index, instance in enumerate(generated):
                if instance["finished"]:
                    problem = _validate_generated(schema, instance["text"])
                    if problem:
                        wrong_accepts += 1
                        record["failures"].append(
                            {"generated": index, "text": instance["text"][:500], "detail": problem}
                        )
    except MemoryError:
        raise
    except Exception as exc:  # a third-party engine's errors are undocumented: record any, go on
        record["status"] = "engine_error"
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    record["num_tokens"] = len(mask_us)
    record["wrong_accepts"] = wrong_accepts
    record["wrong_rejects"] = wrong_rejects
    if record["status"] == "pass":
        # An accepted invalid instance breaks soundness, which matters more than completeness.
        if wrong_accepts:
            record["status"] = "invalidation_error"
        elif wrong_rejects:
            record["status"] = "validation_error"
    return record
