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


def test_nothing_outside_tui_imports_textual():
    offenders = [
        str(p.relative_to(REPO))
        for pkg in ("arena", "agents", "lessons")
        for p in (REPO / pkg).rglob("*.py")
        if "import textual" in p.read_text() or "from textual" in p.read_text() or "from tui" in p.read_text()
    ]
    assert offenders == []
