"""Every `arena …` command the README and the docs site (docs/**/*.md) show exists: its `--help` exits 0 (a
command group registered twice once made `arena bench distill` vanish while the README and
bench/gpu_distill.sh still called it), and every `arena …` line of a code example names a real command and
only options that command has."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from arena.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_REFERENCE = DOCS / "reference" / "cli.md"  # generated from the app itself (docs/gen_reference.py)


def doc_files(*, generated: bool = True) -> list[Path]:
    """README.md and every page of the docs site; ``generated=False`` leaves out the generated CLI reference."""
    pages = sorted(DOCS.rglob("*.md"))
    return [README, *(p for p in pages if generated or p != CLI_REFERENCE)]


def commands_in(text: str) -> set[tuple[str, ...]]:
    """Command paths (``("bench", "distill")``) of every ``arena WORD [WORD]`` that ``text`` mentions."""
    root = typer.main.get_command(app)
    found: set[tuple[str, ...]] = set()
    for m in re.finditer(r"\barena((?: [a-z][a-z-]*){1,2})", text):
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


def readme_commands() -> set[tuple[str, ...]]:
    """Command paths the README mentions."""
    return commands_in(README.read_text())


def documented_commands(*, generated: bool = True) -> set[tuple[str, ...]]:
    """Command paths the README and the docs pages mention."""
    return set().union(*(commands_in(p.read_text()) for p in doc_files(generated=generated)))


def leaf_commands() -> set[tuple[str, ...]]:
    """Every command of the app that runs something (groups left out), as a path."""
    out: set[tuple[str, ...]] = set()

    def walk(cmd, path: tuple[str, ...]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs is None:
            out.add(path)
            return
        for name, sub in subs.items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return out


def test_the_readme_names_the_main_commands():
    assert {("run",), ("distill",), ("tui",)} <= readme_commands()


def test_the_docs_name_the_commands_we_ship():
    cmds = documented_commands(generated=False)
    assert {("run",), ("distill",), ("eval",), ("tui",), ("bench", "distill"), ("bench", "rollouts"),
            ("bench", "learning"), ("lessons", "add"), ("critic", "verdicts")} <= cmds
    # every command has a hand-written page that names it, not only the generated reference
    assert sorted(leaf_commands() - cmds) == []


def test_every_readme_command_has_help():
    runner = CliRunner()
    for path in sorted(documented_commands()):
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "Usage:" in res.output


def example_invocations(text: str) -> list[tuple[str, list[str], bool]]:
    """``(line, words after 'arena', fenced)`` of every ``arena …`` call in a fenced code block (``fenced``) or
    an inline code span.

    Backslash-continued lines are joined; a call ends at ``;``, ``&&``, ``||``, ``|`` or a ``#`` comment.
    """
    chunks: list[tuple[str, bool]] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        chunks += [(line, True) for line in block.replace("\\\n", " ").splitlines()]
    chunks += [(span, False) for span in re.findall(r"(?<!`)`(arena [^`\n]+)`(?!`)", text)]
    calls = []
    for line, fenced in chunks:
        # at a command's position: a line's start, after ; && || | ( or do, behind VAR=value assignments
        for m in re.finditer(r"(?:^|[;&|(]|\bdo\b)\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*arena (.*)", line):
            call = re.split(r"\s(?:;|&&|\|\||\||#)|;", m.group(1))[0]
            calls.append((line.strip(), call.split(), fenced))
    return calls


def option_names(cmd) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def test_examples_call_real_commands_with_real_options():
    """A code example runs a command that exists with options it has; prose may name a group (`arena lessons`)."""
    root = typer.main.get_command(app)
    bad = []
    for page in doc_files():
        for line, words, fenced in example_invocations(page.read_text()):
            cmd, i = root, 0
            while hasattr(cmd, "commands") and i < len(words) and words[i] in cmd.commands:
                cmd, i = cmd.commands[words[i]], i + 1
            if hasattr(cmd, "commands"):
                if fenced:
                    bad.append((page.name, line, "not a command"))
                continue
            for word in words[i:]:
                flag = re.match(r"\[?(--[a-z][a-z0-9-]*)", word)
                if flag and flag.group(1) not in option_names(cmd):
                    bad.append((page.name, line, flag.group(1)))
    assert bad == []


def test_scripts_call_existing_commands():
    root = typer.main.get_command(app)
    script = (ROOT / "bench" / "gpu_distill.sh").read_text()
    for m in re.finditer(r"\barena ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", script):
        words, group = m.group(1).split(), root
        for w in words:
            assert w in getattr(group, "commands", {}), (m.group(0), "not an arena command")
            group = group.commands[w]
            if not hasattr(group, "commands"):
                break
