"""Provenance: a networkx ``DiGraph`` of where each lesson came from and where it went.

Built from the database on demand (nothing is stored twice):

- ``episode:<id>`` → ``lesson:<lesson_id>``, relation ``derived_from`` (ADD; also the
  episode of each EDIT, ``edited_by``, and MERGE, ``merged_by``);
- ``rollout:<id>`` → ``episode:<id>``, relation ``in_group``, for the rollouts an event
  names as its evidence (so ancestors reach the rollouts that produced a lesson);
- ``lesson:<a>`` → ``lesson:<b>``, relation ``merged_into``;
- ``lesson:<id>@v<k>`` → ``lesson:<id>@v<k+1>`` / ``lesson:<id>``, relation ``edited_into``:
  each text a lesson had before an EDIT is a version node (the lesson's own node is its
  current text), so an edit history reads as a chain;
- ``lesson:<id>`` → ``adapter:<id>``, relation ``distilled_into`` / ``trained_into``, from
  the ``adapter_lessons`` table when the database has one (distillation).
- ``adapter:<parent>`` → ``adapter:<child>``, relation ``sampled_for`` (attribute ``cycle``):
  the parent adapter sampled the rollouts the child's sleep trained on (``arena run --cycles``).

Queries are networkx's: :func:`lineage` gives a lesson's ancestors (episodes, rollouts,
merged sources, versions) and descendants (what it was merged or distilled into).
:func:`write_graph` writes GraphML (``networkx.write_graphml``) or DOT (``pydot``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import networkx as nx
from sqlalchemy import inspect, select
from sqlalchemy import text as sql_text

from lessons.db.schema import EpisodeRow, LessonEventRow, LessonRow, SessionRow, TaskRow
from lessons.library.store import LessonStore

FORMATS = ("graphml", "dot")

_EVENT_RELATION = {"ADD": "derived_from", "EDIT": "edited_by", "MERGE": "merged_by", "IMPORT": "derived_from"}


def lesson_node(lesson_id: str) -> str:
    """The node name of a lesson (its current text)."""
    return f"lesson:{lesson_id}"


def build_graph(store: LessonStore) -> nx.DiGraph:
    """The provenance graph of the whole library (see the module docstring).

    Node attributes: ``kind`` (episode, rollout, lesson, lesson_version, adapter) and a
    short ``label``; lessons also ``status``, ``scope``, ``text``; episodes ``session``,
    ``round``, ``task_key``. Edge attribute: ``relation``. All attributes are strings or
    numbers, so GraphML can hold them.
    """
    g = nx.DiGraph()
    with store.read() as s:  # one read transaction for a consistent snapshot
        lessons = {row.id: row for row in s.scalars(select(LessonRow))}
        for row in lessons.values():
            g.add_node(
                lesson_node(row.lesson_id),
                kind="lesson",
                label=row.lesson_id,
                status=row.status,
                scope=row.scope,
                text=row.text,
                helpful=row.helpful,
                harmful=row.harmful,
            )
        events = s.scalars(select(LessonEventRow).order_by(LessonEventRow.id)).all()
        episode_ids = {ev.episode_id for ev in events if ev.episode_id is not None}
        episode_ids |= {row.source_episode_id for row in lessons.values() if row.source_episode_id is not None}
        if episode_ids:
            q = (
                select(EpisodeRow.id, EpisodeRow.round, EpisodeRow.episode_key, SessionRow.name, TaskRow.task_key)
                .join(SessionRow, EpisodeRow.session_id == SessionRow.id)
                .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
                .where(EpisodeRow.id.in_(episode_ids))
            )
            for eid, rnd, key, session, task_key in s.execute(q):
                g.add_node(f"episode:{eid}", kind="episode", label=f"{session}/{key}", session=session, round=rnd, task_key=task_key)

        versions: dict[int, int] = {}  # lesson row id -> number of superseded versions so far
        for ev in events:
            row = lessons.get(ev.lesson_id)
            if row is None:
                continue
            node = lesson_node(row.lesson_id)
            rel = _EVENT_RELATION.get(ev.op)
            if ev.op == "MERGE" and ev.target_lesson_id is not None:
                rel = None  # the source side of a merge: the edge below, not an episode edge
                target = lessons.get(ev.target_lesson_id)
                if target is not None:
                    g.add_edge(node, lesson_node(target.lesson_id), relation="merged_into")
            if ev.op == "EDIT":
                k = versions.get(row.id, 0) + 1
                versions[row.id] = k
                vnode = f"{node}@v{k}"
                g.add_node(vnode, kind="lesson_version", label=f"{row.lesson_id} v{k}", text=ev.before or "")
                if k > 1:
                    g.remove_edge(f"{node}@v{k - 1}", node)
                    g.add_edge(f"{node}@v{k - 1}", vnode, relation="edited_into")
                g.add_edge(vnode, node, relation="edited_into")
            if rel is not None and ev.episode_id is not None and g.has_node(f"episode:{ev.episode_id}"):
                g.add_edge(f"episode:{ev.episode_id}", node, relation=rel)
                for rid in ev.rollout_ids or []:
                    g.add_node(f"rollout:{rid}", kind="rollout", label=f"rollout {rid}")
                    g.add_edge(f"rollout:{rid}", f"episode:{ev.episode_id}", relation="in_group")
        for row in lessons.values():
            if row.source_episode_id is not None and g.has_node(f"episode:{row.source_episode_id}"):
                g.add_edge(f"episode:{row.source_episode_id}", lesson_node(row.lesson_id), relation="derived_from")
        _add_adapters(s, g, lessons)
    return g


def _add_adapters(s: Any, g: nx.DiGraph, lessons: dict[int, LessonRow]) -> None:
    """lesson → adapter edges from ``adapter_lessons`` (written by distillation), if that table exists."""
    tables = set(inspect(s.connection()).get_table_names())
    if not {"adapters", "adapter_lessons"} <= tables:
        return
    cols = {c["name"] for c in inspect(s.connection()).get_columns("adapters")}
    name_col = "adapter_id" if "adapter_id" in cols else "id"
    adapters = {row[0]: str(row[1]) for row in s.execute(sql_text(f"SELECT id, {name_col} FROM adapters"))}
    link_cols = {c["name"] for c in inspect(s.connection()).get_columns("adapter_lessons")}
    rel_col = "relation" if "relation" in link_cols else None
    q = f"SELECT adapter_id, lesson_id{', ' + rel_col if rel_col else ''} FROM adapter_lessons"
    for rec in s.execute(sql_text(q)):
        adapter, lesson = adapters.get(rec[0]), lessons.get(rec[1])
        if adapter is None or lesson is None:
            continue
        g.add_node(f"adapter:{adapter}", kind="adapter", label=adapter)
        relation = f"{rec[2]}_into" if rel_col and rec[2] else "distilled_into"
        g.add_edge(lesson_node(lesson.lesson_id), f"adapter:{adapter}", relation=relation.replace("in_context_into", "trained_into"))
    if "parent_adapter" in cols:  # wake–sleep cycles: parent adapter → the adapter of the next sleep
        for child, parent, cycle in s.execute(sql_text(
            f"SELECT {name_col}, parent_adapter, cycle FROM adapters WHERE parent_adapter IS NOT NULL"
        )):
            for name in (parent, child):
                g.add_node(f"adapter:{name}", kind="adapter", label=str(name))
            g.add_edge(f"adapter:{parent}", f"adapter:{child}", relation="sampled_for", cycle=cycle)


def lineage(g: nx.DiGraph, lesson_id: str) -> dict[str, list[str]]:
    """A lesson's ancestors and descendants in the provenance graph.

    Returns:
        ``{"ancestors": [...], "descendants": [...], "episodes": [...], "rollouts": [...]}``:
        node names, sorted; ``episodes`` / ``rollouts`` are the ancestors of that kind (the
        episodes and rollouts that produced the lesson, through edits and merges too).

    Raises:
        KeyError: no such lesson in the graph.
    """
    node = lesson_node(lesson_id)
    if node not in g:
        raise KeyError(f"no lesson {lesson_id!r}")
    anc, desc = nx.ancestors(g, node), nx.descendants(g, node)
    return {
        "ancestors": sorted(anc),
        "descendants": sorted(desc),
        "episodes": sorted(n for n in anc if g.nodes[n].get("kind") == "episode"),
        "rollouts": sorted(n for n in anc if g.nodes[n].get("kind") == "rollout"),
    }


def subgraph_for(g: nx.DiGraph, lesson_ids: Iterable[str]) -> nx.DiGraph:
    """The lessons, their ancestors and their descendants (a copy).

    Raises:
        KeyError: a lesson that is not in the graph.
    """
    keep: set[str] = set()
    for lid in lesson_ids:
        node = lesson_node(lid)
        if node not in g:
            raise KeyError(f"no lesson {lid!r}")
        keep |= {node} | nx.ancestors(g, node) | nx.descendants(g, node)
    return g.subgraph(keep).copy()


def write_graph(g: nx.DiGraph, path: str | os.PathLike[str], fmt: str) -> None:
    """Write ``g`` as GraphML or DOT.

    Args:
        g: a provenance graph.
        path: the output file (``-`` is not accepted here; the CLI handles stdout).
        fmt: ``"graphml"`` or ``"dot"``.

    Raises:
        ValueError: unknown format.
        OSError: the file cannot be written.
    """
    if fmt == "graphml":
        nx.write_graphml(g, path)
    elif fmt == "dot":
        with open(path, "w", encoding="utf-8") as f:
            f.write(to_dot(g))
    else:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def to_dot(g: nx.DiGraph) -> str:
    """DOT text of ``g`` (via ``pydot``; node names and attributes quoted)."""
    import pydot

    dot = pydot.Dot("provenance", graph_type="digraph", rankdir="LR")
    shapes = {"episode": "box", "rollout": "point", "lesson": "ellipse", "lesson_version": "note", "adapter": "component"}
    for node, attrs in g.nodes(data=True):
        label = str(attrs.get("label", node))
        if attrs.get("kind") == "lesson":
            label = f"{label} ({attrs.get('status')})"
        dot.add_node(pydot.Node(_quote(node), label=_quote(label), shape=shapes.get(attrs.get("kind", ""), "ellipse")))
    for u, v, attrs in g.edges(data=True):
        dot.add_edge(pydot.Edge(_quote(u), _quote(v), label=_quote(str(attrs.get("relation", "")))))
    return dot.to_string()


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
