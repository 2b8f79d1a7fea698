"""Eight processes curating one library at once, plus a reader: on SQLite and on PostgreSQL.

Each writer process interleaves ADD, UPVOTE (of one shared lesson), EDIT and MERGE, each op its
own transaction, all in one scope so every ADD and MERGE contends for the next readable id. Writers
serialise (SQLite: BEGIN IMMEDIATE on the file's write lock; PostgreSQL: one transaction-level
advisory lock, lessons.db.engine), so ids stay contiguous and readable (``chain_sum-00001`` …) and
no counter loses an update. A reader process lists the library throughout and must never see a
duplicate id or a counter that goes backwards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

from lessons.library.curation import Provenance
from lessons.library.store import LessonStore

WRITERS = 8
ROUNDS = 9  # per writer: 9 ADD + 9 UPVOTE + 9 EDIT + 3 MERGE
MERGE_EVERY = 3

_SYLLABLES = ["".join(p) for p in product("bdfgklmnprstvz", "aeiou")]


def word(n: int) -> str:
    """The n-th made-up word: three syllables, so no two lessons share a content term."""
    k = len(_SYLLABLES)
    return _SYLLABLES[n % k] + _SYLLABLES[(n // k) % k] + _SYLLABLES[(n // k // k) % k]


def lesson_text(writer: int, rnd: int, version: int) -> str:
    base = ((writer * 100 + rnd) * 3 + version) * 4
    return " ".join(word(base + j) for j in range(4)) + "."


WRITER = r"""
import json, sys
from lessons.library.curation import CurationPolicy, Provenance
from lessons.library.store import LessonStore
sys.path.insert(0, sys.argv[4])
from test_concurrent_curation import MERGE_EVERY, ROUNDS, lesson_text

url, writer, shared = sys.argv[1], int(sys.argv[2]), sys.argv[3]
st = LessonStore(url)
st.count_tokens = lambda text: len(text.split())
st.curation_policy = CurationPolicy(library_tokens=100_000)
prov = Provenance(origin={"by": "cli", "writer": writer})
added, edited, merged = [], {}, []
for rnd in range(ROUNDS):
    with st.curate() as c:
        lid = c.add(lesson_text(writer, rnd, 0), "chain_sum", "", prov)
    added.append(lid)
    with st.curate() as c:
        c.vote(shared, "helpful", prov)
    with st.curate() as c:
        c.edit(lid, lesson_text(writer, rnd, 1), "", prov)
    edited[lid] = lesson_text(writer, rnd, 1)
    if rnd % MERGE_EVERY == MERGE_EVERY - 1:
        with st.curate() as c:
            mid = c.merge([added[-2], lid], lesson_text(writer, rnd, 2), "", prov)
        merged.append([added[-2], lid, mid, lesson_text(writer, rnd, 2)])
st.close()
print(json.dumps({"added": added, "edited": edited, "merged": merged}))
"""

READER = r"""
import json, pathlib, sys, time
from lessons.library.store import LessonStore

url, shared, stop = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
st = LessonStore(url)
reads, most, helpful, problems = 0, 0, 0, []
while not stop.exists():
    ids = [les.lesson_id for les in st.list_lessons()]
    if len(ids) != len(set(ids)):
        problems.append(f"duplicate ids in one read: {sorted(ids)}")
    most = max(most, len(ids))
    now = st.get_lesson(shared).helpful
    if now < helpful:
        problems.append(f"helpful went back from {helpful} to {now}")
    helpful = now
    reads += 1
    time.sleep(0.01)
st.close()
print(json.dumps({"reads": reads, "most": most, "problems": problems}))
"""


def test_eight_processes_curating_at_once_lose_nothing(library_url: str, tmp_path: Path) -> None:
    with LessonStore(library_url) as st, st.curate() as c:  # migrated and seeded before the processes start
        shared = c.add("Write the final answer alone on the last line.", "global", "", Provenance(origin={"by": "cli"}))
    here = str(Path(__file__).parent)
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, library_url, shared, str(stop)], stdout=subprocess.PIPE, text=True)
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, library_url, str(w), shared, here], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(WRITERS)
    ]
    results, failures = [], []
    try:
        for w, proc in enumerate(writers):
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0:
                failures.append(f"writer {w} exited {proc.returncode}: {err[-2000:]}")
            else:
                results.append(json.loads(out))
    finally:  # a failed writer must not leave the reader (or other writers) running
        time.sleep(0.1)
        stop.touch()
        for proc in writers:
            if proc.poll() is None:
                proc.kill()
        try:
            out, _ = reader.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            reader.kill()
            raise
    assert failures == []
    assert reader.returncode == 0
    seen = json.loads(out)

    merges = ROUNDS // MERGE_EVERY
    n_family = WRITERS * (ROUNDS + merges)  # every ADD and every MERGE made one chain_sum lesson
    with LessonStore(library_url) as st:
        lessons = {les.lesson_id: les for les in st.list_lessons()}
        # ids: one per lesson made, contiguous and readable, whatever the interleaving
        assert sorted(lessons) == [f"chain_sum-{n:05d}" for n in range(1, n_family + 1)] + [shared]
        created = [lid for r in results for lid in r["added"]] + [m[2] for r in results for m in r["merged"]]
        assert sorted(created) == sorted(lid for lid in lessons if lid != shared)  # no id handed out twice
        # counters: every UPVOTE of every process counted once
        assert lessons[shared].helpful == WRITERS * ROUNDS
        upvotes = [ev for ev in st.lesson_events(shared) if ev.op == "UPVOTE"]
        assert len(upvotes) == WRITERS * ROUNDS
        # every EDIT kept; merged sources retired, the merged lesson live with its text
        for r in results:
            retired = {src for m in r["merged"] for src in m[:2]}
            for lid, text in r["edited"].items():
                assert lessons[lid].text == text
                assert lessons[lid].status == ("retired" if lid in retired else "candidate")
            for src_a, src_b, mid, text in r["merged"]:
                assert lessons[mid].text == text and lessons[mid].status == "candidate"
        ops = [ev.op for ev in st.lesson_events()]
        assert ops.count("ADD") == WRITERS * ROUNDS + 1 and ops.count("EDIT") == WRITERS * ROUNDS  # + the shared lesson
        assert ops.count("MERGE") == 3 * WRITERS * merges  # per merge: one on the new lesson, one on each source
    assert seen["problems"] == [] and seen["reads"] > 0 and seen["most"] <= n_family + 1
