"""``arena report``: the numbers behind each figure by hand, the files as a person opens them, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import report_fixture
from cli_helpers import arena, assert_one_line_error

from arena.report import ReportError, gather, write_compare_report, write_session_report
from arena.report.figures import compare_figure, reliability_bins, session_figures
from arena.stats import wilson_interval
from lessons.library.curation import approx_tokens
from lessons.library.store import LessonStore


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return report_fixture.build(tmp_path_factory.mktemp("report") / "arena.db")


@pytest.fixture(scope="module")
def wake_sleep(db: Path):
    with LessonStore(str(db)) as store:
        return gather(store, "wake-sleep", str(db))


def test_heldout_points_are_the_stored_evaluations_paired_with_before(wake_sleep) -> None:
    got = [(p.label, p.stage, p.lessons, p.n, p.pass_at_1) for p in wake_sleep.heldout]
    assert got == [("before", 0.0, True, 10, 0.2), ("cycle 1", 1.0, True, 10, 0.4), ("cycle 1", 1.0, False, 10, 0.3),
                   ("after", 2.0, True, 10, 0.7), ("after", 2.0, False, 10, 0.4)]
    assert wake_sleep.heldout[3].ci95 == pytest.approx(wilson_interval(7, 10))
    assert wake_sleep.heldout[0].vs_before is None
    # after (passes tasks 0-3, 5-7) vs before (0, 5): 5 discordant pairs all one way, exact McNemar p = 2 / 2^5
    after = wake_sleep.heldout[3].vs_before
    assert (after["diff"], after["a_only"], after["b_only"], after["p_value"]) == (0.5, 5, 0, pytest.approx(0.0625))
    # cycle 1 (0, 1, 5, 6) vs before: 2 discordant, p = 2 / 2^2; without lessons (0, 2, 5): 1, p = 1
    assert (wake_sleep.heldout[1].vs_before["diff"], wake_sleep.heldout[1].vs_before["p_value"]) == (0.2, pytest.approx(0.5))
    assert wake_sleep.heldout[2].vs_before["p_value"] == pytest.approx(1.0)
    # with vs without lessons at one stage: after (0-3, 5-7) vs (0, 1, 5, 6): 3 discordant one way, p = 2 / 2^3
    after_vs_none = wake_sleep.heldout[3].vs_no_lessons
    assert (after_vs_none["diff"], after_vs_none["p_value"]) == (0.3, pytest.approx(0.25))
    assert wake_sleep.heldout[1].vs_no_lessons["diff"] == 0.1  # cycle 1: (0, 1, 5, 6) vs (0, 2, 5)
    assert wake_sleep.heldout[0].vs_no_lessons is None and wake_sleep.heldout[2].vs_no_lessons is None


def test_round_rates_and_hint_counts_by_hand(wake_sleep) -> None:
    r1, r2 = wake_sleep.rounds
    # round 1: A 1 0 0 1, B 0 0 0 0 (guided 1 0): mean 2/8, pass@1 (2/4 + 0) / 2, pass@4 (1 + 0) / 2
    assert (r1.round, r1.episodes, r1.mean_reward, r1.pass_at_1, r1.pass_at_k) == (1, 2, 0.25, 0.25, 0.5)
    assert (r1.all_fail, r1.guided, r1.rescued) == (1, 1, 1)
    # round 2: A 1 1 1 0, B 0 0 0 0 (guided 0 0)
    assert (r2.mean_reward, r2.pass_at_1, r2.pass_at_k, r2.all_fail, r2.guided, r2.rescued) == (0.375, 0.375, 0.5, 1, 1, 0)
    assert (wake_sleep.rollouts, wake_sleep.cycles, wake_sleep.library_tokens) == (4, 2, 200)


def test_library_timeline_replays_add_promote_distill(db: Path, wake_sleep) -> None:
    tl = wake_sleep.timeline
    # start: global-00001 active; then ADD (candidate), PROMOTE after two helpful votes, DISTILL by adapter-0001
    assert tl.counts["candidate"] == [0, 1, 0, 0]
    assert tl.counts["active"] == [1, 1, 2, 1]
    assert tl.counts["distilled"] == [0, 0, 0, 1]
    assert tl.counts["retired"] == [0, 0, 0, 0]
    assert [op for _, op, _ in tl.events] == ["ADD", "DISTILL"]
    assert tl.times == sorted(tl.times) and tl.times[0] == tl.start and tl.times[-1] <= tl.end
    with LessonStore(str(db)) as store:
        size = {lid: (i.tokens or approx_tokens(i.text)) for lid in ("global-00001", "chain_sum-00001")
                for i in [store.get_lesson(lid)]}
    g, c = size["global-00001"], size["chain_sum-00001"]
    assert tl.live_tokens == [g, g + c, g + c, g]  # a distilled lesson leaves the prompt, and the budget


def test_lessons_most_in_context_and_adapter_provenance(wake_sleep) -> None:
    assert [(u.lesson_id, u.in_context, u.helpful, u.harmful, u.status) for u in wake_sleep.lessons] == [
        ("chain_sum-00001", 3, 2, 0, "distilled"), ("global-00001", 2, 0, 0, "active")]
    (a,) = wake_sleep.adapters
    assert (a.adapter_id, a.objective, a.cycle, a.parent, a.examples, a.rollouts) == ("adapter-0001", "distill", 1, None, 3, 3)
    assert (a.distilled, a.in_context, a.session) == (["chain_sum-00001"], ["chain_sum-00001"], "wake-sleep")
    assert (a.heldout["pass_at_1"], a.base["pass_at_1"]) == (0.4, 0.2)


def test_rubric_session_calibration_and_hack_flags(db: Path) -> None:
    with LessonStore(str(db)) as store:
        data = gather(store, "rubric-run", str(db))
    assert data.rubric and data.threshold == 0.8
    # judge rewards 0.9 0.2 0.85 0.1 at threshold 0.8: two of four pass (not none, as at threshold 1)
    assert (data.rounds[0].pass_at_1, data.rounds[0].pass_at_k) == (0.5, 1.0)
    assert data.calibration == list(zip(report_fixture.JUDGE, report_fixture.VERIFIER, strict=True))
    assert data.hack_flags == {"verifier_disagrees": 1}
    # judge 0.1, 0.2, 0.85, 0.9 fall in bins 1, 2, 8, 9; the verifier passes only the 0.9 one
    assert reliability_bins(data.calibration) == [(0.1, 0.0, 1), (0.2, 0.0, 1), (0.85, 0.0, 1), (0.9, 1.0, 1)]
    names = [f.name for f in session_figures(data)]
    assert names == ["heldout", "rounds", "hints", "library", "calibration"]
    caption = session_figures(data)[-1].caption
    assert caption.startswith("4 rollouts graded by both")


def _non_blank_png(path: Path) -> tuple[int, int]:
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 400, img.shape
    rgb = img[..., :3]
    assert float(np.std(rgb)) > 0.02  # not one flat colour
    assert float((rgb.mean(axis=2) < 0.5).mean()) > 0.005  # some dark ink: axes, text, points
    return img.shape[1], img.shape[0]


def test_cli_writes_one_self_contained_page_and_a_png_per_figure(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "report"
    proc = arena("report", "--db", str(db), "--session", "wake-sleep", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)
    assert files["html"] == str(out / "report.html")
    assert [Path(p).name for p in files["figures"]] == ["heldout.png", "rounds.png", "hints.png", "library.png"]
    for p in files["figures"]:
        _non_blank_png(Path(p))
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 4
    assert "http://" not in page and "https://" not in page and "<script" not in page
    for text in ("Session wake-sleep", "adapter-0001", "chain_sum-00001", "McNemar", "n = 10 held-out tasks per point",
                 "+0.500 [", "0.0625"):
        assert text in page, text
    assert not list(out.glob(".*.tmp"))


def test_compare_puts_sessions_on_one_figure(db: Path, tmp_path: Path) -> None:
    files = write_compare_report(str(db), ["wake-sleep", "rubric-run", "wake-sleep"], tmp_path / "cmp")
    assert [p.name for p in files.figures] == ["compare.png"]
    _non_blank_png(files.figures[0])
    page = files.html.read_text()
    assert "wake-sleep, rubric-run" in page and "2 sessions; n = 2, 10 held-out tasks" in page


def test_compare_takes_library_files_as_their_newest_session(db: Path, tmp_path: Path) -> None:
    """`arena bench learning` keeps one library per condition: `--compare a.db b.db` compares them."""
    other = report_fixture.one_session(tmp_path / "sft.db", "sft", [1, 1, 0])
    proc = arena("report", "--db", str(db), "--compare", "wake-sleep", str(other), "--out", str(tmp_path / "cmp"), "--json")
    assert proc.returncode == 0, proc.stderr
    page = Path(json.loads(proc.stdout)["html"]).read_text()
    assert "Sessions compared: wake-sleep, sft: sft" in page and "n = 3, 10 held-out tasks" in page


def test_compare_of_library_files_needs_no_db_and_refuses_one_session_twice(db: Path, tmp_path: Path) -> None:
    other = report_fixture.one_session(tmp_path / "sft.db", "sft", [1, 0])
    proc = arena("report", "--compare", str(other), str(db), "--out", "cmp", cwd=tmp_path)  # no arena.db here
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cmp" / "compare.png").is_file()
    # the newest session of a library file is the same session as its name: refused
    with LessonStore(str(db)) as store:
        newest = store.latest_session_with_episodes()
    same = arena("report", "--db", str(db), "--compare", newest, str(db), "--out", str(tmp_path / "x"))
    assert_one_line_error(same, "is the same session as")
    assert not (tmp_path / "x").exists()


def test_a_failed_write_leaves_the_earlier_report_as_it_was(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "report.html").mkdir(parents=True)  # a directory where the page goes
    (out / "heldout.png").write_bytes(b"an earlier figure")
    assert_one_line_error(arena("report", "--db", str(db), "--session", "wake-sleep", "--out", str(out)),
                          "report.html is a directory")
    assert (out / "heldout.png").read_bytes() == b"an earlier figure"
    assert sorted(p.name for p in out.iterdir()) == ["heldout.png", "report.html"]  # no temporary file left


def test_default_out_directory_stays_in_the_working_directory() -> None:
    from arena.cli.report import safe_name

    assert safe_name("run-2026.12.02") == "run-2026.12.02"
    assert safe_name("../../etc") == "_.._etc" and "/" not in safe_name("a/b") and safe_name("..") == "session"


def test_empty_parts_draw_a_figure_that_says_so(db: Path, tmp_path: Path) -> None:
    with LessonStore(str(db)) as store:
        sid = store.create_session("only-before", {"families": ["chain_sum"], "rollouts": 2}, seed=3)
        store.record_evaluation(sid, "heldout_before", "heldout", True, [], (0.0, 1.0), {})  # n = 0: nothing graded
    files = write_session_report(str(db), "only-before", tmp_path / "empty")
    for p in files.figures:
        _non_blank_png(p)
    with LessonStore(str(db)) as store:
        data = gather(store, "only-before", str(db))
    assert data.rounds == [] and data.heldout[0].pass_at_1 is None and data.adapters == [] and data.lessons == []
    page = files.html.read_text()
    assert "No lesson was in the solver" in page and "No adapter was trained" in page


def test_compare_of_one_session_and_unknown_sessions_are_report_errors(db: Path, tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="at least two different sessions"):
        write_compare_report(str(db), ["wake-sleep", "wake-sleep"], tmp_path / "x")
    with pytest.raises(ReportError, match="no session named 'nope'"):
        write_compare_report(str(db), ["wake-sleep", "nope"], tmp_path / "x")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--session", "nope"], ["no session named 'nope'", "wake-sleep"]),
        (["--session", "fresh"], ["session 'fresh' has no held-out evaluation yet"]),
        (["--session", "wake-sleep", "--out", "{file}"], ["is not a directory"]),
        (["--session", "wake-sleep", "--out", "/proc/arena-report/sub"], ["cannot create --out /proc/arena-report/sub"]),
        (["--compare", "wake-sleep"], ["at least two different sessions"]),
        (["wake-sleep"], ["unexpected argument 'wake-sleep'", "--compare"]),
        (["--compare", "--session", "wake-sleep", "rubric-run"], ["not --session"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2(db: Path, tmp_path: Path, args: list[str], fragments: list[str]) -> None:
    file = tmp_path / "a-file"
    file.write_text("keep me")
    args = [a.format(file=file) for a in args]
    proc = arena("report", "--db", str(db), *args, cwd=tmp_path)  # /proc: not creatable even by root
    assert_one_line_error(proc, *fragments)
    assert file.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]  # no report directory left behind


def test_missing_and_non_database_files_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(arena("report", "--db", str(tmp_path / "none.db")), "no database at")
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database\n" * 100)
    proc = arena("report", "--db", str(bad), "--session", "x", "--out", str(tmp_path / "o"))
    assert_one_line_error(proc)
    assert bad.read_text() == "not a database\n" * 100
    assert not (tmp_path / "o").exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    assert_one_line_error(arena("report", "--db", str(empty), "--session", "x"), "is an empty file, not a library")
    assert_one_line_error(arena("report", "--db", str(empty)), "is an empty file, not a library")  # the default session
    assert empty.stat().st_size == 0  # a report never writes a schema into the file it reads


def test_compare_figure_with_no_graded_point_says_so() -> None:
    fig = compare_figure([("a", []), ("b", [])])
    assert fig.caption.startswith("2 sessions; n = 0")
    assert fig.png.startswith(b"\x89PNG")


def test_report_as_a_person_sees_it_in_headless_chromium(db: Path, tmp_path: Path) -> None:
    """Open the page in Chromium: every figure decoded, no console error, no request outside the page."""
    import os

    import browser

    if browser.find_chromium() is None:
        if os.environ.get("ARENA_REQUIRE_BROWSER"):  # .ci/run sets it: there the browser test must run
            pytest.fail("ARENA_REQUIRE_BROWSER is set but no Chromium was found (apt-get install chromium)")
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium; .ci/run installs it)")
    files = write_session_report(str(db), "rubric-run", tmp_path / "rubric")
    seen = browser.check_page(files.html, tmp_path / "screenshot.png")
    assert seen.title == "Session rubric-run"
    assert [alt for alt, _, _ in seen.images] == ["Held-out pass@1", "Train rates per round", "Hints per round",
                                                  "Library over time", "Critic calibration"]
    assert all(w > 0 and h > 0 for _, w, h in seen.images), seen.images
    assert seen.console_errors == []
    assert seen.requests == []
    width, height = _non_blank_png(seen.screenshot)
    assert height > 1500  # the whole page, not the first screen
