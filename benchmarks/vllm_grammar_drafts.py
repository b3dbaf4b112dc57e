"""The grammar as vLLM's drafter: forward passes (engine steps) per output token and output
tokens per second through vLLM's CPU engine, with and without speculative decoding; same engine
(by default the tests' tiny random-weight Llama, dummy weights, SmolLM2's tokenizer; with
--model, a trained model's checkpoint folder and its tokenizer), same prompts, greedy.

    HF_HUB_OFFLINE=1 .venv-vllm/bin/python benchmarks/vllm_grammar_drafts.py [--schemas 6]
        [--max-tokens 128] [--compact] [--repeats 2] [--model /tmp/smollm2-hf]
        [--spec-tokens 4] [--counts]

Modes (each in a fresh interpreter, PUSHMASK_VLLM=1, PUSHMASK_VLLM_MAX_WHITESPACE=1):

- ``none``: no speculative decoding (vLLM's defaults: async scheduling on);
- ``grammar``: the grammar drafts alone (``GRAMMAR_ONLY_SPECULATIVE_CONFIG``: vLLM's
  custom-class method with a proposer that proposes nothing, 4 speculative tokens);
- ``ngram+grammar``: vLLM's n-gram proposer (4 tokens, lookup 1 to 3), with the grammar's
  forced tokens in front where it forces text.
- ``ngram``: the n-gram proposer alone (``PUSHMASK_VLLM_GRAMMAR_DRAFTS=0``).

The prompts hold each schema (as a server's would), one request per MaskBench-dev schema, all in
one batch: for the random model a plain prompt, for a --model the task's chat (a system message
asking for one JSON value following the schema, then "Give an example.") through the model's chat
template.  Each mode generates once to warm (grammars compiled, kernels loaded), then --repeats
times timed.  Per mode: engine steps that ran the model (one forward pass each, for the whole
batch), request steps (each request's part in a step, summed: a request's own forward passes),
output tokens, request steps per output token, output tokens per second (median over the
repeats), outputs that validate (jsonschema), and whether every output's token ids equal the
``none`` mode's.  With --counts, each speculative mode also prints one ``COUNTS`` line per
request of its last run (see ``_print_counts``): what the grammar forced at each step, the drafts
set and accepted, and where the model split forced text otherwise than the drafts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data" / "maskbench-dev"
sys.path[:0] = [str(REPO / "tests" / "vllm"), str(REPO / "tests")]  # tests/vllm/conftest.py first

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
MODES = {
    "none": None,
    "grammar": "GRAMMAR_ONLY",
    "ngram+grammar": NGRAM,
    "ngram": NGRAM,  # with PUSHMASK_VLLM_GRAMMAR_DRAFTS=0: the n-gram proposer's drafts alone
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemas", type=int, default=6)
    parser.add_argument("--max-schema-chars", type=int, default=600)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--compact", action="store_true", help="disable_any_whitespace (compact JSON)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--model", help="a trained model's HF checkpoint folder (default: the tiny random Llama)")
    parser.add_argument("--spec-tokens", type=int, default=4, help="num_speculative_tokens of every mode")
    parser.add_argument("--counts", action="store_true", help="per request: forced text, drafts set and accepted")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a mode, run in this interpreter
    parser.add_argument("--schema-file", help=argparse.SUPPRESS)  # the child's schemas
    args = parser.parse_args()
    if args.child:
        return run_mode(args)
    from conftest import SMOLLM2
    from transformers import AutoTokenizer

    from pushmask.jsonschemabench.corpus import generation_tasks

    tokenizer = AutoTokenizer.from_pretrained(args.model or SMOLLM2)
    tasks = generation_tasks(tokenizer, DATA, args.schemas, args.max_schema_chars)
    schemas = [(task.name, task.schema, task.messages) for task in tasks]
    print(
        f"{len(schemas)} MaskBench-dev schemas ({', '.join(n for n, _, _ in schemas)}), "
        f"{args.model or 'tiny random Llama'}, greedy, "
        f"max_tokens={args.max_tokens}, {'compact' if args.compact else 'flexible (at most 1)'} whitespace",
        flush=True,
    )
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "schemas.json").write_text(json.dumps(schemas))
        for mode in args.modes.split(","):
            command = [sys.executable, __file__, "--child", mode, "--max-tokens", str(args.max_tokens)]
            command += ["--repeats", str(args.repeats), "--schema-file", str(Path(folder) / "schemas.json")]
            command += ["--compact"] if args.compact else []
            command += ["--model", args.model] if args.model else []
            command += ["--counts"] if args.counts else []
            command += ["--spec-tokens", str(args.spec_tokens)]
            env = dict(os.environ, PUSHMASK_VLLM="1", PUSHMASK_VLLM_MAX_WHITESPACE="1", VLLM_CPU_KVCACHE_SPACE="1")
            env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", HF_HUB_OFFLINE="1")
            env["PUSHMASK_VLLM_GRAMMAR_DRAFTS"] = "0" if mode == "ngram" else "1"
            proc = subprocess.run(command, capture_output=True, text=True, env=env)
            line = next((row for row in proc.stdout.splitlines() if row.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"mode {mode} failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
            results[mode] = json.loads(line[len("RESULT ") :])
            if args.counts:
                print("\n".join(row for row in proc.stdout.splitlines() if row.startswith("COUNTS ")), flush=True)
    base = results.get("none")
    print(
        "| mode | engine steps | request steps | output tokens | request steps / token | vs none | tokens / s "
        "| vs none | valid | same tokens as none |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, r in results.items():
        per_token = r["request_steps"] / r["tokens"]
        rate = r["tokens"] / r["seconds"]
        same = "-" if base is None else str(r["token_ids"] == base["token_ids"])
        step_ratio = f"{per_token / (base['request_steps'] / base['tokens']):.2f}x" if base else "-"
        rate_ratio = f"{rate / (base['tokens'] / base['seconds']):.2f}x" if base else "-"
        print(
            f"| {mode} | {r['steps']} | {r['request_steps']} | {r['tokens']} | {per_token:.3f} | {step_ratio} "
            f"| {rate:.1f} | {rate_ratio} | {r['valid']}/{len(r['token_ids'])} | {same} |"
        )


def run_mode(args) -> None:
    """One mode in this interpreter: warm once, time --repeats generations, print one RESULT line."""
    import jsonschema
    from conftest import make_tiny_model
    from engine_run import count_steps
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from pushmask.integrations.vllm_grammar_drafts import GRAMMAR_ONLY_SPECULATIVE_CONFIG

    schemas = json.loads(Path(args.schema_file).read_text())
    speculative = MODES[args.child]
    if speculative == "GRAMMAR_ONLY":
        speculative = GRAMMAR_ONLY_SPECULATIVE_CONFIG
    if speculative:
        speculative = dict(speculative, num_speculative_tokens=args.spec_tokens)
    steps = count_steps()
    hook_events = _record_hook_events() if args.counts and speculative else None
    if args.model:  # trained weights; 1024 holds a schema's chat prompt and the answer
        engine = {"model": args.model, "max_model_len": 1024}
    else:  # random weights; 512 is the tiny model's max_position_embeddings
        tiny_model = make_tiny_model(Path(tempfile.mkdtemp()) / "tiny-llama")
        engine = {"model": str(tiny_model), "load_format": "dummy", "max_model_len": 512}
    llm = LLM(
        **engine,
        enforce_eager=True,
        max_num_seqs=len(schemas),
        dtype="float32",
        seed=0,
        structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": args.compact},
        **({"speculative_config": speculative} if speculative else {}),
    )
    if args.model:  # a chat model: the task's messages through its own chat template
        chat_prompt = llm.get_tokenizer().apply_chat_template
        prompts = [chat_prompt(messages, tokenize=False, add_generation_prompt=True) for _, _, messages in schemas]
    else:
        prompts = [
            f"Answer with one JSON value following this JSON Schema:\n{json.dumps(s)}\nAnswer:" for _, s, _ in schemas
        ]
    params = [
        SamplingParams(
            max_tokens=args.max_tokens, temperature=0.0, structured_outputs=StructuredOutputsParams(json=schema)
        )
        for _, schema, _ in schemas
    ]
    llm.generate(prompts, params, use_tqdm=False)  # warm: grammars compiled, kernels loaded
    seconds = []
    for _ in range(args.repeats):
        steps[:] = [0, 0]
        if hook_events is not None:
            hook_events.clear()
        started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds.append(time.perf_counter() - started)
    valid = 0
    for out, (_, schema, _) in zip(outputs, schemas):
        try:
            jsonschema.validate(json.loads(out.outputs[0].text), schema)
            valid += out.outputs[0].finish_reason == "stop"
        except (ValueError, jsonschema.ValidationError):
            pass
    token_ids = [list(out.outputs[0].token_ids) for out in outputs]
    result = {
        "steps": steps[0],
        "request_steps": steps[1],
        "tokens": sum(map(len, token_ids)),
        "seconds": statistics.median(seconds),
        "valid": valid,
        "token_ids": token_ids,
    }
    if hook_events is not None:
        _print_counts(args.child, hook_events, outputs, llm.get_tokenizer(), args.spec_tokens)
    print("RESULT " + json.dumps(result), flush=True)


def _record_hook_events() -> dict:
    """Per engine request id, one event per call of the grammar-drafts hook: [output tokens so
    far, the forced text the grammar reported, the drafts the request holds after the hook]."""
    import pushmask.integrations.vllm_grammar_drafts as hook

    events: dict = {}
    draft_forced_text = hook._draft_forced_text

    def recording_draft(scheduler, request_ids):
        draft_forced_text(scheduler, request_ids)  # drafting leaves the grammars as they were
        for req_id in request_ids:
            request = scheduler.requests.get(req_id)
            if request is None or request.is_finished():
                continue
            grammar = request.structured_output_request.grammar
            text = grammar.forced_text() if hasattr(grammar, "forced_text") else ""
            events.setdefault(req_id, []).append([len(request.output_token_ids), text, list(request.spec_token_ids)])

    hook._draft_forced_text = recording_draft
    return events


def _tokens_inside(tokenizer, ids: list[int], text: str) -> int:
    """How many of the output's next tokens spell a prefix of the forced text: the drafts the
    verifier would accept if they split the text as the model does (no cap)."""
    count, spelled = 0, ""
    for token in ids:
        spelled += tokenizer.decode([token])
        if not text.startswith(spelled):
            break
        count += 1
    return count


def _print_counts(mode: str, events: dict, outputs, tokenizer, limit: int) -> None:
    """One COUNTS line per request: hook calls (one per step the request ran in), calls that found
    forced text and its characters, output tokens that spell part of forced text (the most drafts
    could save), drafts set, drafts accepted (those matching the output from where they were set:
    greedy outputs equal the unspeculated ones), steps whose drafts were all accepted with forced
    text left over (capped_steps), steps where the model split forced text otherwise than the
    drafts (split_misses), and a few of those misses: [forced text, draft, model's token]."""
    for out in outputs:
        req_events = next(
            (v for k, v in events.items() if k == out.request_id or k.startswith(out.request_id + "-")), []
        )
        ids = list(out.outputs[0].token_ids)
        calls = forced_calls = forced_chars = drafted = accepted = capped_steps = split_misses = 0
        inside: set[int] = set()  # output positions whose token spells part of forced text
        misses = []
        for done, text, drafts in req_events:
            calls += 1
            forced_calls += bool(text)
            forced_chars += len(text)
            model_tokens = _tokens_inside(tokenizer, ids[done:], text)
            inside.update(range(done, done + model_tokens))
            drafted += len(drafts)
            k = 0
            while k < len(drafts) and done + k < len(ids) and drafts[k] == ids[done + k]:
                k += 1
            accepted += k
            capped_steps += k == limit and model_tokens > limit + 1  # forced text left after the bonus token
            if k < min(len(drafts), model_tokens):  # the model split the forced text otherwise
                split_misses += 1
                misses.append(
                    [text, tokenizer.decode(drafts[k : k + 1]), tokenizer.decode(ids[done + k : done + k + 1])]
                )
        row = {"mode": mode, "request": out.request_id, "tokens": len(ids), "hook_calls": calls}
        row.update(forced_calls=forced_calls, forced_chars=forced_chars, tokens_inside_forced=len(inside))
        row.update(drafted=drafted, accepted=accepted, capped_steps=capped_steps, split_misses=split_misses)
        row.update(first_misses=misses[:6])
        print("COUNTS " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
