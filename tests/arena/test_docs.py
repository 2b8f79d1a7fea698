"""The docs stay true to the program: the CLI reference is what docs/gen_cli_reference.py writes from the typer
app now.

`mkdocs build --strict` (run by .ci/run) checks the site's own links, anchors and navigation.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", ROOT / "docs" / "gen_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_app():
    gen = load_generator()
    committed = gen.OUT.read_text(encoding="utf-8")
    assert committed == gen.render(), "docs/reference/cli.md is stale: run python docs/gen_cli_reference.py"


def test_cli_reference_does_not_depend_on_the_terminal(monkeypatch):
    gen = load_generator()
    monkeypatch.setenv("COLUMNS", "40")
    narrow = gen.render()
    monkeypatch.setenv("COLUMNS", "300")
    assert gen.render() == narrow


def test_cli_reference_lists_every_option_of_run():
    import typer

    from arena.cli import app

    run = typer.main.get_command(app).commands["run"]
    text = load_generator().render()
    section = text.split("### `arena run`", 1)[1].split("\n### ", 1)[0]
    for param in run.params:
        assert f"`{param.opts[0]}" in section, param.opts[0]
