"""Every `arena …` command the README shows exists: its `--help` exits 0 (a command group registered twice
once made `arena bench distill` vanish while the README and bench/gpu_distill.sh still called it)."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from arena.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> set[tuple[str, ...]]:
    """Command paths (``("bench", "distill")``) of every ``arena WORD [WORD]`` the README mentions."""
    root = typer.main.get_command(app)
    found: set[tuple[str, ...]] = set()
    for m in re.finditer(r"\barena((?: [a-z][a-z-]*){1,2})", README.read_text()):
        path, group = [], root
        for word in m.group(1).split():
            sub = getattr(group, "commands", {}).get(word)
            if sub is None:
                break
            path.append(word)
            group = sub
        if path:
            found.add(tuple(path))
    return found


def test_the_readme_names_the_commands_we_ship():
    cmds = readme_commands()
    assert {("run",), ("distill",), ("eval",), ("tui",), ("bench", "distill"), ("bench", "rollouts"),
            ("bench", "learning"), ("lessons", "add"), ("critic", "verdicts")} <= cmds


def test_every_readme_command_has_help():
    runner = CliRunner()
    for path in sorted(readme_commands()):
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "Usage:" in res.output


def test_scripts_call_existing_commands():
    root = typer.main.get_command(app)
    script = (README.parent / "bench" / "gpu_distill.sh").read_text()
    for m in re.finditer(r"\barena ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", script):
        words, group = m.group(1).split(), root
        for w in words:
            assert w in getattr(group, "commands", {}), (m.group(0), "not an arena command")
            group = group.commands[w]
            if not hasattr(group, "commands"):
                break
