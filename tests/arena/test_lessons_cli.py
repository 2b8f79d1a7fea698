"""`arena lessons ...` as a user runs it: JSON contracts, manual ops as events, one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

APPROX = ["--solver", "openai:any"]  # count lesson tokens at ~4 chars/token: no tokenizer to load


def arena(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "arena.cli", *args], capture_output=True, text=True, cwd=cwd, env=dict(os.environ), timeout=300
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arena: error: ") and fragment in lines[0], proc.stderr


def test_manual_curation_round_trip(tmp_path: Path, library_url: str) -> None:
    """Every `arena lessons` command on one library: a SQLite file or a PostgreSQL database (``--db URL``)."""

    def lib(*args: str, cwd: Path) -> subprocess.CompletedProcess:
        return arena(*args, "--db", library_url, cwd=cwd)

    out = ok(lib("lessons", "add", "Keep the minus sign of negative terms.", "--family", "chain_sum", "--json", *APPROX, cwd=tmp_path))
    assert json.loads(out) == {"id": "chain_sum-00001", "duplicate": False}
    assert ok(lib("lessons", "add", "Read the whole question before starting.", *APPROX, cwd=tmp_path)).strip() == "global-00001"
    dup = lib("lessons", "add", "Before starting, read the whole question.", *APPROX, cwd=tmp_path)
    assert ok(dup).strip() == "global-00001" and "near-duplicate" in dup.stderr

    rows = json.loads(ok(lib("lessons", "list", "--json", cwd=tmp_path)))
    assert [r["id"] for r in rows] == ["chain_sum-00001", "global-00001"]
    assert {k: rows[1][k] for k in ("text", "status", "family", "helpful", "harmful")} == {
        "text": "Read the whole question before starting.", "status": "active", "family": "global", "helpful": 1, "harmful": 0,
    }  # fmt: skip
    assert json.loads(ok(lib("lessons", "list", "--family", "chain_sum", "--json", cwd=tmp_path)))[0]["id"] == "chain_sum-00001"

    ok(lib("lessons", "edit", "chain_sum-00001", "--text", "Keep the minus sign of every negative term.", *APPROX, cwd=tmp_path))
    ok(lib("lessons", "upvote", "chain_sum-00001", cwd=tmp_path))
    ok(lib("lessons", "downvote", "global-00001", "--why", "too vague", cwd=tmp_path))
    ok(lib("lessons", "retire", "global-00001", "--why", "replaced by a family lesson", cwd=tmp_path))
    shown = json.loads(ok(lib("lessons", "show", "chain_sum-00001", "--json", cwd=tmp_path)))
    assert [h["op"] for h in shown["history"]] == ["ADD", "EDIT", "UPVOTE"]
    assert shown["history"][1]["before"] == "Keep the minus sign of negative terms."
    assert shown["history"][1]["after"] == "Keep the minus sign of every negative term."
    assert all(h["at"] and h["origin"]["by"] == "cli" for h in shown["history"])
    retired = json.loads(ok(lib("lessons", "show", "global-00001", "--json", cwd=tmp_path)))
    assert retired["status"] == "retired" and retired["history"][-1]["rationale"] == "replaced by a family lesson"

    hits = json.loads(ok(lib("lessons", "search", "negative term sign", "--json", cwd=tmp_path)))
    assert hits[0]["id"] == "chain_sum-00001"
    assert "chain_sum-00001" in ok(lib("lessons", "search", "minus", cwd=tmp_path))

    ok(lib("lessons", "export", "out.jsonl", cwd=tmp_path))
    first = json.loads(ok(arena("lessons", "import", "out.jsonl", "--db", "other.db", "--json", *APPROX, cwd=tmp_path)))
    again = json.loads(ok(arena("lessons", "import", "out.jsonl", "--db", "other.db", "--json", *APPROX, cwd=tmp_path)))
    assert first["imported"] == ["chain_sum-00001", "global-00001"] and again["imported"] == []

    dot = ok(lib("lessons", "graph", "--format", "dot", cwd=tmp_path))
    assert dot.startswith("digraph")
    ok(lib("lessons", "graph", "--format", "graphml", "--lesson", "chain_sum-00001", "-o", "g.graphml", cwd=tmp_path))
    assert (tmp_path / "g.graphml").read_text().startswith("<?xml")


def test_add_counts_tokens_with_the_local_solver_tokenizer(tmp_path: Path) -> None:
    ok(arena("lessons", "add", "Keep the minus sign of negative terms.", "--json", cwd=tmp_path))
    shown = json.loads(ok(arena("lessons", "show", "global-00001", "--json", cwd=tmp_path)))
    assert shown["tokens"] == 8  # SmolLM2: "Keep| the| minus| sign| of| negative| terms|."
    one_line_error(
        arena("lessons", "add", "Read the whole question before starting.", "--library-tokens", "10", cwd=tmp_path),
        "library over budget: 8 + 7 > 10",
    )


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A library with one lesson, global-00001, built in-process once."""
    from lessons.library.curation import Provenance
    from lessons.library.store import LessonStore

    path = tmp_path_factory.mktemp("lib") / "arena.db"
    with LessonStore(str(path)) as store, store.curate() as c:
        c.add("Read the whole question before starting.", "global", "", Provenance(origin={"by": "cli"}), status="active")
    return path


def snapshot(path: Path) -> tuple:
    from lessons.library.store import LessonStore

    with LessonStore(str(path)) as store:
        return tuple(store.list_lessons()), tuple(store.lesson_events())


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["lessons", "show", "chain_sum-00099"], "no lesson 'chain_sum-00099'"),
        (["lessons", "retire", "global-00001", "--why", " "], "needs a reason"),
        (["lessons", "edit", "global-00001", "--text", "short", *APPROX], "at least 8 characters"),
        (["lessons", "merge", "global-00001", "--text", "Just one lesson here.", *APPROX], "at least 2 distinct"),
        (["lessons", "list", "--status", "zombie"], "lesson status must be one of"),
        (["lessons", "search", "the of 12"], "nothing to search for"),
        (["lessons", "graph", "--format", "svg"], "--format must be one of graphml, dot"),
        (["lessons", "graph", "--lesson", "nope-00001"], "no lesson 'nope-00001'"),
        (["lessons", "list", "--db", "missing.db"], "no database at missing.db"),
        (["lessons", "import", "missing.jsonl", *APPROX], "cannot read missing.jsonl"),
        (["lessons", "add", "Some fine lesson text.", "--solver", "gpt"], "--solver must be"),
        (["lessons", "upvote", "global-00002"], "no lesson 'global-00002'"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(library: Path, tmp_path: Path, args: list[str], fragment: str) -> None:
    shutil.copy(library, tmp_path / "arena.db")
    before = snapshot(tmp_path / "arena.db")
    one_line_error(arena(*args, cwd=tmp_path), fragment)
    assert snapshot(tmp_path / "arena.db") == before
    assert not (tmp_path / "missing.db").exists()
