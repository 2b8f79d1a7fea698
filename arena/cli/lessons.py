"""`arena lessons ...`: read, search, curate, export and audit the lesson library from the shell.

Manual ops are the teacher's ops (:mod:`lessons.library.curation`): each writes a lesson_event with
``origin {"by": "cli"}``, obeys the library budget (``--library-tokens``, counted with the
solver's tokenizer), and a near-duplicate ``add`` upvotes the existing lesson. Every
error is one line on stderr with exit code 2; nothing is written by a command that fails.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from arena.cli.support import fail, quiet_libraries

lessons_app = typer.Typer(help="Read, search, curate, export and audit the lesson library.", no_args_is_help=True)

DbOpt = Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
BudgetOpt = Annotated[int, typer.Option(help="Token budget of all live lessons (as in `arena run`).")]
SolverOpt = Annotated[
    str, typer.Option(help="Whose tokenizer counts lesson tokens: local (SmolLM2) or openai:MODEL (~4 chars/token).")
]


def _open(db: str, must_exist: bool = True):
    """Open the store; a missing SQLite file is an error for commands that only read or change lessons."""
    from arena.config import check_db
    from lessons.library.store import LessonStore, StoreError

    check_db(db)
    if must_exist and "://" not in db and not Path(db).exists():
        raise StoreError(f"no database at {db}; run `arena run --db {db}` or `arena lessons add --db {db} TEXT` first")
    return LessonStore(db)


def _configure(store: Any, library_tokens: int, solver: str) -> None:
    """Curation settings of a manual op: the budget and the solver's token count."""
    from lessons.library.curation import CurationPolicy

    if library_tokens < 1:
        raise ValueError(f"--library-tokens must be >= 1, got {library_tokens}")
    store.curation_policy = CurationPolicy(library_tokens=library_tokens)
    store.count_tokens = token_counter(solver)


def check_tokenizer_spec(solver: str) -> None:
    """Refuse a ``--solver`` whose tokenizer cannot count tokens without its model (:func:`agents.backends.registry.token_counter`).

    Raises:
        ValueError: ``--solver must be 'local' or 'openai:MODEL', got 'x'``.
    """
    from agents.backends.registry import counts_tokens_offline, offline_tokenizer_choices

    if not counts_tokens_offline(solver):
        raise ValueError(f"--solver must be {offline_tokenizer_choices()}, got {solver!r}")


def token_counter(solver: str):
    """The token count of the solver's tokenizer: SmolLM2's for ``local``, ~4 chars/token for ``openai:MODEL``.

    Raises:
        ValueError: another solver spec (:func:`check_tokenizer_spec`).
    """
    from agents.backends.registry import token_counter as registry_counter

    check_tokenizer_spec(solver)
    return registry_counter(solver)


def _errors():
    from arena.config import ConfigError
    from lessons.library.curation import CurationError
    from lessons.library.store import StoreError
    from lessons.library.transfer import TransferError

    return (StoreError, CurationError, TransferError, ConfigError, ValueError, KeyError, OSError)


def _run(fn):
    """Run ``fn()``; user errors become one line on stderr and exit 2."""
    quiet_libraries()
    try:
        return fn()
    except _errors() as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise fail(str(msg)) from None


def _cli_prov(why: str = ""):
    from lessons.library.curation import Provenance

    return Provenance(origin={"by": "cli", **({"why": why} if why else {})})


def _print_lessons(rows: list[Any], title: str) -> None:
    """A table on a terminal; tab-separated lines (id, status, family, helpful, harmful, utility, text) when piped."""
    if not sys.stdout.isatty():
        for les in rows:
            util = "" if les.utility is None else f"{les.utility:+.3f}"
            print("\t".join([les.lesson_id, les.status, les.scope, str(les.helpful), str(les.harmful), util, les.text]))
        return
    Console().print(_lessons_table(rows, title))


def _lessons_table(rows: list[Any], title: str) -> Table:
    t = Table(title=title)
    for col in ("id", "status", "family", "helpful", "harmful", "utility"):
        t.add_column(col, no_wrap=True)
    t.add_column("text", overflow="fold", min_width=20)
    for les in rows:
        util = "-" if les.utility is None else f"{les.utility:+.3f} (n={les.utility_n})"
        t.add_row(les.lesson_id, les.status, les.scope, str(les.helpful), str(les.harmful), util, les.text)
    return t


# --------------------------------------------------------------------------- read


@lessons_app.command("list")
def lessons_list(
    db: DbOpt = "arena.db",
    status: Annotated[Optional[str], typer.Option(help="Only this status: candidate, active, retired, distilled.")] = None,
    family: Annotated[Optional[str], typer.Option(help="Only this family (or 'global').")] = None,
    limit: Annotated[Optional[int], typer.Option(help="At most this many (oldest first).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List lessons with their status, family and counters."""

    def go():
        if limit is not None and limit < 0:
            raise ValueError(f"--limit must be >= 0, got {limit}")
        with _open(db) as store:
            return store.list_lessons(status=status, scope=family, limit=limit)

    rows = _run(go)
    if json_out:
        print(json.dumps([les.as_dict() for les in rows]))
    else:
        _print_lessons(rows, f"{len(rows)} lesson(s)")


@lessons_app.command("show")
def lessons_show(lesson_id: Annotated[str, typer.Argument(help="Lesson id, e.g. chain_sum-00012.")], db: DbOpt = "arena.db", json_out: JsonOpt = False) -> None:
    """One lesson: text, counters, utility, full event history and lineage."""

    def go():
        from lessons.library.provenance import build_graph, lineage

        with _open(db) as store:
            les = store.get_lesson(lesson_id)
            if les is None:
                raise KeyError(f"no lesson {lesson_id!r} in {db}; see `arena lessons list`")
            out = les.as_dict()
            out["history"] = [ev.as_dict() for ev in store.lesson_events(lesson_id)]
            out["utility_history"] = store.utility_history(lesson_id)
            out["lineage"] = lineage(build_graph(store), lesson_id)
            return out

    out = _run(go)
    if json_out:
        print(json.dumps(out))
        return
    c = Console()
    util = "not measured" if out["utility"] is None else f"{out['utility']:+.3f} on pass@1"
    if out["utility"] is not None and out["utility_ci95"]:
        util += f", 95% CI [{out['utility_ci95'][0]:+.3f}, {out['utility_ci95'][1]:+.3f}], n={out['utility_n']}"
    c.print(f"[bold]{out['id']}[/bold]  {out['status']}  family {out['family']}")
    c.print(out["text"], markup=False)
    c.print(
        f"helpful {out['helpful']}  harmful {out['harmful']}  neutral {out['neutral']}  "
        f"in context {out['times_in_context']}×  tokens {out['tokens']}  utility {util}"
    )
    t = Table(title="history")
    for col in ("at", "op", "before", "after", "why", "from"):
        t.add_column(col, overflow="fold")
    for ev in out["history"]:
        src = f"episode {ev['episode_id']}" if ev["episode_id"] else str((ev["origin"] or {}).get("by", ""))
        if ev["target"]:
            src = f"→ {ev['target']} {src}"
        t.add_row(ev["at"][:19], ev["op"], ev["before"] or "", ev["after"] or "", ev["rationale"], src)
    c.print(t)
    lin = out["lineage"]
    c.print(f"lineage: {len(lin['episodes'])} episode(s), {len(lin['rollouts'])} rollout(s) upstream; "
            f"downstream: {', '.join(lin['descendants']) or 'none'}")


@lessons_app.command("search")
def lessons_search(
    text: Annotated[str, typer.Argument(help="Words to search for (BM25 over lesson texts).")],
    db: DbOpt = "arena.db",
    family: Annotated[Optional[str], typer.Option(help="Only this family and global lessons.")] = None,
    status: Annotated[Optional[str], typer.Option(help="Only this status (default: any).")] = None,
    limit: Annotated[int, typer.Option(help="At most this many results.")] = 20,
    json_out: JsonOpt = False,
) -> None:
    """Full-text search of lesson texts, best match first."""

    def go():
        from lessons.library.retrieval import bm25_scan, query_terms
        from lessons.vocab import LESSON_STATUSES

        if status is not None and status not in LESSON_STATUSES:
            raise ValueError(f"--status must be one of {', '.join(LESSON_STATUSES)}, got {status!r}")
        if limit < 1:
            raise ValueError(f"--limit must be >= 1, got {limit}")
        terms = query_terms(text)
        if not terms:
            raise ValueError(f"nothing to search for in {text!r} (only stop words or numbers)")
        statuses = [status] if status else None
        with _open(db) as store:
            if store.has_fts():
                return store.search_lessons(terms, family, statuses=statuses, limit=limit)
            pool = [les for les in store.list_lessons(status=status) if family is None or les.scope in (family, "global")]
            return sorted([p for p in bm25_scan(text, pool) if p[1] > 0], key=lambda p: -p[1])[:limit]

    hits = _run(go)
    if json_out:
        print(json.dumps([{**les.as_dict(), "relevance": rel} for les, rel in hits]))
    else:
        _print_lessons([les for les, _ in hits], f"{len(hits)} match(es) for {text!r}")


# --------------------------------------------------------------------------- curate


@lessons_app.command("add")
def lessons_add(
    text: Annotated[str, typer.Argument(help="The lesson: one or two sentences of general advice.")],
    db: DbOpt = "arena.db",
    family: Annotated[str, typer.Option(help="Task family it applies to, or 'global'.")] = "global",
    why: Annotated[str, typer.Option(help="Rationale kept in the history.")] = "hand-written",
    library_tokens: BudgetOpt = 4096,
    solver: SolverOpt = "local",
    json_out: JsonOpt = False,
) -> None:
    """Add a hand-written lesson (active at once) and print its id; a near-duplicate upvotes the existing one."""

    def go():
        with _open(db, must_exist=False) as store:
            _configure(store, library_tokens, solver)
            with store.curate() as c:
                lid = c.add(text, family, why, _cli_prov(), status="active")
                dup = lid not in c.result.added
            return lid, dup

    lid, dup = _run(go)
    if json_out:
        print(json.dumps({"id": lid, "duplicate": dup}))
    else:
        print(lid)
        if dup:
            print(f"near-duplicate of {lid}: upvoted it instead of adding a new lesson", file=sys.stderr)


@lessons_app.command("edit")
def lessons_edit(
    lesson_id: Annotated[str, typer.Argument(help="Lesson id.")],
    text: Annotated[str, typer.Option("--text", help="The new text.")],
    db: DbOpt = "arena.db",
    why: Annotated[str, typer.Option(help="Rationale kept in the history.")] = "edited by hand",
    library_tokens: BudgetOpt = 4096,
    solver: SolverOpt = "local",
) -> None:
    """Rewrite a lesson's text (same id; the old text stays in the history)."""

    def go():
        with _open(db) as store:
            _configure(store, library_tokens, solver)
            with store.curate() as c:
                c.edit(lesson_id, text, why, _cli_prov())

    _run(go)
    print(lesson_id)


@lessons_app.command("merge")
def lessons_merge(
    lesson_ids: Annotated[list[str], typer.Argument(help="Two or more lesson ids.")],
    text: Annotated[str, typer.Option("--text", help="The merged lesson's text.")],
    db: DbOpt = "arena.db",
    why: Annotated[str, typer.Option(help="Rationale kept in the history.")] = "merged by hand",
    library_tokens: BudgetOpt = 4096,
    solver: SolverOpt = "local",
) -> None:
    """Merge lessons into one new lesson (printed); the sources are retired and point at it."""

    def go():
        with _open(db) as store:
            _configure(store, library_tokens, solver)
            with store.curate() as c:
                return c.merge(lesson_ids, text, why, _cli_prov())

    print(_run(go))


@lessons_app.command("retire")
def lessons_retire(
    lesson_id: Annotated[str, typer.Argument(help="Lesson id.")],
    why: Annotated[str, typer.Option("--why", help="The reason (required).")],
    db: DbOpt = "arena.db",
) -> None:
    """Retire a lesson: it leaves every prompt and stays in the database and history."""

    def go():
        with _open(db) as store, store.curate() as c:
            c.retire(lesson_id, why, _cli_prov())

    _run(go)
    print(lesson_id)


def _vote(lesson_id: str, db: str, tag: str, why: str) -> None:
    def go():
        with _open(db) as store, store.curate() as c:
            c.vote(lesson_id, tag, _cli_prov(), why)
            return c.result

    res = _run(go)
    print(lesson_id)
    for lid in res.promoted:
        print(f"{lid} promoted to active", file=sys.stderr)
    for lid in res.retired:
        print(f"{lid} retired (net harmful votes)", file=sys.stderr)


@lessons_app.command("upvote")
def lessons_upvote(
    lesson_id: Annotated[str, typer.Argument(help="Lesson id.")],
    db: DbOpt = "arena.db",
    why: Annotated[str, typer.Option(help="Rationale kept in the history.")] = "upvoted by hand",
) -> None:
    """Count one helpful vote (a candidate with enough net votes becomes active)."""
    _vote(lesson_id, db, "helpful", why)


@lessons_app.command("downvote")
def lessons_downvote(
    lesson_id: Annotated[str, typer.Argument(help="Lesson id.")],
    db: DbOpt = "arena.db",
    why: Annotated[str, typer.Option(help="Rationale kept in the history.")] = "downvoted by hand",
) -> None:
    """Count one harmful vote (enough net harmful votes retire the lesson)."""
    _vote(lesson_id, db, "harmful", why)


# --------------------------------------------------------------------------- transfer and provenance


@lessons_app.command("export")
def lessons_export(file: Annotated[str, typer.Argument(help="Output JSONL file; - for stdout.")], db: DbOpt = "arena.db") -> None:
    """Write every lesson with its counters and full history, one JSON object per line."""

    def go():
        from lessons.library.transfer import export_lessons

        with _open(db) as store:
            return export_lessons(store, file)

    n = _run(go)
    print(f"exported {n} lesson(s) to {'stdout' if str(file) == '-' else file}", file=sys.stderr)


@lessons_app.command("import")
def lessons_import(
    file: Annotated[Path, typer.Argument(help="A JSONL file written by `arena lessons export`.")],
    db: DbOpt = "arena.db",
    library_tokens: BudgetOpt = 4096,
    solver: SolverOpt = "local",
    json_out: JsonOpt = False,
) -> None:
    """Import lessons with their history: all lines or none; importing twice adds nothing."""

    def go():
        from lessons.library.transfer import import_lessons, read_lines

        read_lines(file)  # a bad file fails before a database is created or a tokenizer loaded
        with _open(db, must_exist=False) as store:
            _configure(store, library_tokens, solver)
            return import_lessons(store, file)

    res = _run(go)
    if json_out:
        print(json.dumps(res))
    else:
        print(f"imported {len(res['imported'])}, skipped {len(res['skipped'])} already present"
              + (f", renamed {len(res['renamed'])} whose id was taken" if res["renamed"] else ""), file=sys.stderr)


@lessons_app.command("graph")
def lessons_graph(
    db: DbOpt = "arena.db",
    fmt: Annotated[str, typer.Option("--format", help="graphml or dot.")] = "graphml",
    lesson: Annotated[Optional[list[str]], typer.Option("--lesson", help="Only this lesson's ancestors and descendants (repeatable).")] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="Output file; - for stdout.")] = "-",
) -> None:
    """Write the provenance graph (episode → lesson, lesson → lesson, lesson → adapter)."""

    def go():
        import io

        import networkx as nx

        from lessons.library.provenance import FORMATS, build_graph, subgraph_for, to_dot

        if fmt not in FORMATS:
            raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        with _open(db) as store:
            g = build_graph(store)
        if lesson:
            g = subgraph_for(g, lesson)
        if fmt == "dot":
            data = to_dot(g).encode()
        else:
            buf = io.BytesIO()
            nx.write_graphml(g, buf)
            data = buf.getvalue()
        if output == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            Path(output).write_bytes(data)
        return g

    g = _run(go)
    print(f"{g.number_of_nodes()} nodes, {g.number_of_edges()} edges", file=sys.stderr)


@lessons_app.command("leaks")
def lessons_leaks(
    db: DbOpt = "arena.db",
    session: Annotated[Optional[str], typer.Option(help="Check only this session's held-out tasks and hints.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the matches as a JSON array.")] = False,
) -> None:
    """Report every lesson or hint that contains a held-out task's question or distinctive answer.

    Exit code 0: no leak; 1: at least one leak (each printed with the task it leaks); 2: bad input.
    """
    from dataclasses import asdict

    def go():
        from lessons.library.leaks import find_leaks
        from lessons.library.store import StoreError

        with _open(db) as store:
            if session is not None and store.get_session(session) is None:
                raise StoreError(f"no session named {session!r} in {db}")
            return find_leaks(store, session)

    leaks = _run(go)
    if json_out:
        print(json.dumps([asdict(x) for x in leaks]))
    elif leaks:
        t = Table(title=f"{len(leaks)} leak(s) of held-out tasks")
        for col in ("source", "id", "leaks task", "by", "text"):
            t.add_column(col)
        for x in leaks:
            t.add_row(x.source, x.source_id, f"{x.session}:{x.task_key}", x.kind, x.excerpt)
        Console().print(t)
    else:
        Console().print("no leaks: no lesson or hint contains a held-out question or distinctive answer")
    if leaks:
        raise typer.Exit(1)
