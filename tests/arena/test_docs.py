"""The docs stay true to the program: the CLI reference is what docs/gen_reference.py writes from the typer
app now, the README fits on a screen, links only to files that exist and shares its commands and its picture of the
loop with the docs, and CI runs the README's test command.

`mkdocs build --strict` (run by .ci/run) checks the site's own links, anchors and navigation.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 250  # issue 33 §4: what it is, the loop, install, three commands, the headline, where to read next


def readme_blocks(path: Path = README) -> list[str]:
    """The fenced code blocks of a Markdown file, without their fences."""
    text = path.read_text(encoding="utf-8")
    return [b.strip("\n") for b in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_app():
    gen = load_generator()
    committed = gen.OUT.read_text(encoding="utf-8")
    assert committed == gen.render(), "docs/reference/cli.md is stale: run python docs/gen_reference.py"


def test_run_summary_reference_lists_the_typed_models_fields():
    from arena.session.summary import RunSummary

    gen = load_generator()
    committed = gen.SUMMARY_OUT.read_text(encoding="utf-8")
    assert committed == gen.render_summary(), "docs/reference/run-summary.md is stale: run python docs/gen_reference.py"
    fields = committed.split(gen.SUMMARY_MARK, 1)[1]
    for name, info in RunSummary.model_fields.items():
        key = info.serialization_alias or info.alias or name
        assert f"`{key}`" in fields or name in ("hints", "rubric", "curriculum"), key  # flattened parts: their own keys


def test_objectives_reference_is_generated_from_the_registry():
    from arena.objectives import objective_names

    gen = load_generator()
    committed = gen.OBJECTIVES_OUT.read_text(encoding="utf-8")
    assert committed == gen.render_objectives(), "docs/reference/objectives.md is stale: run python docs/gen_reference.py"
    rows = [line for line in committed.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(objective_names())


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


def test_readme_fits_on_a_screen():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; move detail into docs/"


def test_readme_links_point_to_files_that_exist():
    text = README.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        if not (ROOT / target.split("#", 1)[0]).exists():
            missing.append(target)
    assert missing == []


def test_ci_runs_the_readme_test_command():
    """.ci/run's last line is the README's test command, verbatim (the Quick start block that runs pytest)."""
    test_commands = [b for b in readme_blocks() if "python -m pytest" in b]
    assert len(test_commands) == 1
    ci_last = (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip().splitlines()[-1]
    assert ci_last == test_commands[0]


def test_install_page_shows_the_readme_commands():
    """docs/install.md repeats the Quick start's two commands; they must not drift apart."""
    quick_start = [b for b in readme_blocks() if b.startswith("python3 -m venv .venv && . .venv/bin/activate")]
    assert len(quick_start) == 2
    install = readme_blocks(ROOT / "docs" / "install.md")
    for command in quick_start:
        assert command in install


def test_readme_loop_picture_is_the_docs_one():
    """The loop's picture is drawn once for the docs (docs/snippets/loop.txt, which pages include) and in the README."""
    picture = (ROOT / "docs" / "snippets" / "loop.txt").read_text(encoding="utf-8").strip("\n")
    assert picture in readme_blocks()
