"""The four top-level packages must be ours: another PyPI distribution also installs a top-level `agents`."""

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["arena", "agents", "lessons", "tui"])
def test_package_resolves_to_this_repository(name):
    mod = importlib.import_module(name)
    assert Path(mod.__file__).resolve().parent == REPO / name


def test_console_script_is_declared():
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["arena"] == "arena.cli:main"
    assert set(meta["tool"]["setuptools"]["packages"]) >= {"arena", "agents", "lessons", "tui"}


def test_every_package_directory_is_declared():
    """pyproject's explicit package list names every package directory of ours, and nothing else.

    A subpackage missing from the list is left out of a wheel (and of a non-editable install)."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for top in ("arena", "agents", "lessons", "tui")
        for init in (REPO / top).rglob("__init__.py")
    }
    assert set(meta["tool"]["setuptools"]["packages"]) == on_disk


def test_package_data_globs_match_files():
    """Every package-data pattern (migration template, shipped task files, the TUI's stylesheet) finds its files."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    data = meta["tool"]["setuptools"]["package-data"]
    assert data, "no package data declared"
    for package, patterns in data.items():
        for pattern in patterns:
            assert list((REPO / package.replace(".", "/")).glob(pattern)), f"{package}: {pattern} matches nothing"


def _ui_imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, enclosing function) of every import of textual or tui in a file."""
    import ast

    found: list[tuple[str, str | None]] = []

    def visit(node: ast.AST, func: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            names = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module:
                names = [child.module]
            found.extend((n, func) for n in names if n.split(".")[0] in ("textual", "tui", "textual_plotext"))
            visit(child, func)

    visit(ast.parse(path.read_text()), None)
    return found


def test_nothing_outside_tui_imports_textual():
    """Only `arena tui` (the command function in arena/cli/) may import tui, and only lazily."""
    offenders = [
        f"{p.relative_to(REPO)}: {mod} (in {func or 'module scope'})"
        for pkg in ("arena", "agents", "lessons")
        for p in (REPO / pkg).rglob("*.py")
        for mod, func in _ui_imports(p)
        if not (p == REPO / "arena" / "cli" / "tui.py" and func == "tui" and mod.startswith("tui"))
    ]
    assert offenders == []
    assert ("tui.app", "tui") in _ui_imports(REPO / "arena" / "cli" / "tui.py")
