"""Export → import keeps lessons and histories; bad lines import nothing; provenance graph lineage."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import pytest
from lesson_texts import DISTINCT_LESSONS

from lessons.library.curation import Provenance
from lessons.library.provenance import build_graph, lineage, subgraph_for, to_dot, write_graph
from lessons.library.store import EpisodeRecord, LessonStore, RolloutRecord
from lessons.library.transfer import TransferError, export_lessons, import_lessons
from lessons.ops import AddOp, EditOp, Reflection

CLI = Provenance(origin={"by": "cli"})


def words(text: str) -> int:
    return len(text.split())


@dataclass
class T:
    task_key: str
    family: str = "chain_sum"
    split: str = "train"
    question: str = "What is 3 + 4?"
    answer: str = "7"
    source: str = "jsonl"
    metadata: dict = field(default_factory=dict)


def open_store(path: Path | str) -> LessonStore:
    st = LessonStore(str(path))
    st.count_tokens = words
    return st


def record(store: LessonStore, sid: int, key: str, refl: Reflection, context: list[str]):
    r = RolloutRecord(0, [{"role": "user", "content": "q"}], "c", "7", 1.0, "ok", 5, 3, "stop", 0.1)
    return store.record_episode(EpisodeRecord(sid, key, 1, "chain_sum/train/00000", "sys", context, [r, r], refl))


@pytest.fixture
def history(library_url: str):
    """A small hand-built history: two episodes add lessons, one edits, a person merges and retires
    (on SQLite and on PostgreSQL; the libraries it is imported into are SQLite files)."""
    st = open_store(library_url)
    sid = st.create_session("s1", {}, 0)
    st.upsert_tasks(sid, [T("chain_sum/train/00000")])
    e1 = record(st, sid, "r001-a", Reflection(add=[AddOp(text=DISTINCT_LESSONS[0], scope="chain_sum")]), [])
    e2 = record(st, sid, "r001-b", Reflection(add=[AddOp(text=DISTINCT_LESSONS[1], scope="chain_sum")]), [])
    e3 = record(
        st, sid, "r002-a",
        Reflection(edit=[EditOp(lesson_id="chain_sum-00001", text="Carry the tens digit whenever a column overflows.")]),
        ["chain_sum-00001"],
    )  # fmt: skip
    with st.curate() as c:
        c.merge(["chain_sum-00001", "chain_sum-00002"], "Carry tens digits and keep minus signs.", "one topic", CLI)
        c.add(DISTINCT_LESSONS[2], "global", "hand-written", CLI, status="active")
        c.retire("global-00001", "too vague", CLI)
    yield st, (e1.episode_id, e2.episode_id, e3.episode_id)
    st.close()


def test_lineage_reaches_episodes_rollouts_sources_and_versions(history) -> None:
    st, (e1, e2, e3) = history
    g = build_graph(st)
    merged = lineage(g, "chain_sum-00003")
    assert merged["episodes"] == sorted([f"episode:{e1}", f"episode:{e2}", f"episode:{e3}"])
    assert len(merged["rollouts"]) == 6  # two rollouts per episode
    assert {"lesson:chain_sum-00001", "lesson:chain_sum-00002", "lesson:chain_sum-00001@v1"} <= set(merged["ancestors"])
    assert merged["descendants"] == []
    first = lineage(g, "chain_sum-00001")
    assert first["descendants"] == ["lesson:chain_sum-00003"]
    assert first["episodes"] == sorted([f"episode:{e1}", f"episode:{e3}"])
    assert g.edges["lesson:chain_sum-00001", "lesson:chain_sum-00003"]["relation"] == "merged_into"
    assert g.edges["lesson:chain_sum-00001@v1", "lesson:chain_sum-00001"]["relation"] == "edited_into"
    assert g.nodes["lesson:chain_sum-00001@v1"]["text"] == DISTINCT_LESSONS[0]
    assert g.edges[f"episode:{e1}", "lesson:chain_sum-00001"]["relation"] == "derived_from"
    assert lineage(g, "global-00001") == {"ancestors": [], "descendants": [], "episodes": [], "rollouts": []}
    with pytest.raises(KeyError):
        lineage(g, "nope-00001")


def test_graph_writes_graphml_and_dot(history, tmp_path: Path) -> None:
    st, _ = history
    g = subgraph_for(build_graph(st), ["chain_sum-00002"])
    write_graph(g, tmp_path / "g.graphml", "graphml")
    back = nx.read_graphml(tmp_path / "g.graphml")
    assert set(back.nodes) == set(g.nodes) and back.number_of_edges() == g.number_of_edges()
    dot = to_dot(g)
    assert dot.startswith("digraph") and '"lesson:chain_sum-00002" -> "lesson:chain_sum-00003"' in dot
    with pytest.raises(ValueError):
        write_graph(g, tmp_path / "g.x", "svg")


def test_export_import_round_trip_keeps_lessons_and_histories_and_is_idempotent(history, tmp_path: Path) -> None:
    st, _ = history
    n = export_lessons(st, tmp_path / "lessons.jsonl")
    assert n == 4
    dst = open_store(tmp_path / "dst.db")
    res = import_lessons(dst, tmp_path / "lessons.jsonl")
    assert res == {"imported": ["chain_sum-00001", "chain_sum-00002", "chain_sum-00003", "global-00001"], "skipped": [], "renamed": {}}

    def snapshot(store: LessonStore) -> list:
        out = []
        for les in store.list_lessons():
            evs = [(e.op, e.before, e.after, e.rationale, e.target) for e in store.lesson_events(les.lesson_id) if e.op != "IMPORT"]
            out.append((les.lesson_id, les.text, les.scope, les.status, les.helpful, les.harmful, les.created_at, evs))
        return out

    assert snapshot(dst) == snapshot(st)
    # episode links do not exist in the new database: kept in the event's origin
    add_ev = dst.lesson_events("chain_sum-00001")[0]
    assert add_ev.episode_id is None and add_ev.origin["episode"] == {"session": "s1", "episode_key": "r001-a"}
    assert lineage(build_graph(dst), "chain_sum-00001")["descendants"] == ["lesson:chain_sum-00003"]

    again = import_lessons(dst, tmp_path / "lessons.jsonl")
    assert again["imported"] == [] and len(again["skipped"]) == 4
    assert len(dst.list_lessons()) == 4
    dst.close()


def test_import_into_a_library_with_taken_ids_renames(history, tmp_path: Path) -> None:
    st, _ = history
    export_lessons(st, tmp_path / "lessons.jsonl")
    dst = open_store(tmp_path / "dst.db")
    with dst.curate() as c:
        c.add(DISTINCT_LESSONS[9], "global", "", CLI, status="active")  # takes global-00001
    res = import_lessons(dst, tmp_path / "lessons.jsonl")
    assert res["renamed"] == {"global-00001": "global-00002"}
    assert dst.get_lesson("global-00002").text == DISTINCT_LESSONS[2]
    assert import_lessons(dst, tmp_path / "lessons.jsonl")["imported"] == []  # still idempotent
    dst.close()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "lessons.jsonl:2: not JSON"),
        ('["a list"]', "lessons.jsonl:2: expected a JSON object"),
        ('{"id": "x-00001", "text": "Long enough text.", "created_at": "2026-01-01T00:00:00", "status": "weird"}', "lessons.jsonl:2: status"),
        ('{"id": "x-00001", "text": "tiny", "created_at": "2026-01-01T00:00:00"}', "lessons.jsonl:2: text: lesson text must be at least 8"),
        ('{"id": "x-00001", "text": "Long enough text."}', "lessons.jsonl:2: created_at: Field required"),
        ('{"id": "x-00001", "text": "Long enough text.", "created_at": "2026-01-01T00:00:00", "history": [{"op": "EXPLODE", "at": "2026-01-01T00:00:00"}]}', "lessons.jsonl:2: history.0.op"),
    ],
)
def test_bad_import_line_names_the_line_and_imports_nothing(tmp_path: Path, line: str, message: str) -> None:
    good = {"id": "chain_sum-00001", "text": DISTINCT_LESSONS[0], "created_at": "2026-01-01T00:00:00+00:00"}
    path = tmp_path / "lessons.jsonl"
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    dst = open_store(tmp_path / "dst.db")
    with pytest.raises(TransferError, match=message.replace(".", r"\.")):
        import_lessons(dst, path)
    assert dst.list_lessons() == []
    dst.close()


def test_import_over_the_budget_imports_nothing(history, tmp_path: Path) -> None:
    from lessons.library.curation import CurationPolicy

    st, _ = history
    export_lessons(st, tmp_path / "lessons.jsonl")
    dst = open_store(tmp_path / "dst.db")
    dst.curation_policy = CurationPolicy(library_tokens=3)
    with pytest.raises(TransferError, match="nothing imported: library over budget"):
        import_lessons(dst, tmp_path / "lessons.jsonl")
    assert dst.list_lessons() == []
    dst.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('"utility": NaN, "utility_ci95": [0, 1]', "utility"),
        ('"helpful": 1000000000000000000000000000000', "helpful"),
        ('"utility": 0.3', "utility and utility_ci95 go together"),
        ('"utility": 0.3, "utility_ci95": [0.5, 0.1]', "utility_ci95"),
        ('"family": "chain_sum:min_terms=2"', "family"),
    ],
)
def test_import_rejects_values_that_would_break_the_library(tmp_path: Path, extra: str, message: str) -> None:
    path = tmp_path / "lessons.jsonl"
    path.write_text('{"id": "chain_sum-00001", "text": "Keep the minus sign of negative terms.", '
                    f'"created_at": "2026-01-01T00:00:00+00:00", {extra}}}\n')
    dst = open_store(tmp_path / "dst.db")
    with pytest.raises(TransferError, match=f"lessons.jsonl:1: .*{message}"):
        import_lessons(dst, path)
    assert dst.list_lessons() == []
    dst.close()


def test_export_writes_through_links_and_to_stdout(history, tmp_path: Path, capsys) -> None:
    st, _ = history
    target = tmp_path / "real.jsonl"
    target.write_text("")
    (tmp_path / "link.jsonl").symlink_to(target)
    assert export_lessons(st, tmp_path / "link.jsonl") == 4
    assert (tmp_path / "link.jsonl").is_symlink() and len(target.read_text().splitlines()) == 4
    assert export_lessons(st, "-") == 4
    assert len(capsys.readouterr().out.splitlines()) == 4
