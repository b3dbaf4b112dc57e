"""`pushmask generate` pieces that need no model: the examples its --help names resolve outside the
checkout (they ship in the package), and --json-only holds the loader's stderr back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pushmask.integrations import model_cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_help_examples_resolve_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no examples/ here
    help_text = model_cli.argparse.ArgumentParser()
    model_cli.add_arguments(help_text)
    named = [word for word in help_text.epilog.split() if word.startswith("examples/")]
    assert named == ["examples/person.json", "examples/arithmetic.ebnf"]
    for name in named:
        path = model_cli.example_path(name)
        assert path.is_file() and path.read_bytes() == (EXAMPLES / Path(name).name).read_bytes()
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "person.json").write_text("{}")
    assert model_cli.example_path("examples/person.json") == Path("examples/person.json")  # a real file wins
    assert model_cli.example_path("elsewhere/person.json") == Path("elsewhere/person.json")  # not an example path
    assert model_cli.example_path("examples/missing.json") == Path("examples/missing.json")


def test_held_stderr_is_shown_only_on_failure(capsys):
    with model_cli._held_stderr(True):
        print("Converting and de-quantizing GGUF tensors... 100%", file=sys.stderr)
    assert capsys.readouterr().err == ""
    with pytest.raises(RuntimeError), model_cli._held_stderr(True):
        print("loading went wrong here", file=sys.stderr)
        raise RuntimeError("boom")
    assert "loading went wrong here" in capsys.readouterr().err
    with model_cli._held_stderr(False):
        print("progress", file=sys.stderr)
    assert capsys.readouterr().err == "progress\n"
