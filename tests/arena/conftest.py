"""Fixtures of the arena tests (tests/arena/).

Plain helpers live beside them: ``cli_helpers`` (the CLI in a subprocess), ``session_scripts`` (a finished
session on the tiny model, scripted solver/teacher replies), ``rubric_scripts`` (the
scripted rubric session) and, for every package, ``tiny_llama`` (tiny random checkpoints).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from tiny_llama import make_tiny

from lessons.library.store import LessonStore

if TYPE_CHECKING:
    from arena.episode.context import Roles


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama checkpoint (``tiny_llama.make_tiny``, seed 0), one per test module."""
    return make_tiny(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another tiny checkpoint of the same seed, for the CLI and cycle tests (base model of ``--base-model``)."""
    return make_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LessonStore]:
    """A fresh, empty lesson library at ``tmp_path/arena.db``, closed after the test."""
    st = LessonStore(str(tmp_path / "arena.db"))
    yield st
    st.close()


@pytest.fixture
def rubric_roles() -> Roles:
    """The scripted rubric session's fake solver, teacher and judge (``rubric_scripts.roles()``)."""
    import rubric_scripts  # imports the episode graph: only for the tests that ask

    return rubric_scripts.roles()


@pytest.fixture
def arena_inproc(capfd, monkeypatch):
    """`arena ARGS` through the console-script entry point in this process (no import cost per call)."""
    from arena import cli

    def run(*args):
        capfd.readouterr()  # drop what the test itself printed before
        monkeypatch.setattr(sys, "argv", ["arena", *args])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, exc.value.code, out, err)

    return run
