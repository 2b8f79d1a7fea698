"""The HTML page of ``arena report``: figures embedded as data URIs, tables, and every figure as a PNG beside it.

The page needs no network to be read: styles are inline, images are ``data:image/png;base64``
URIs, there is no script. All files are written under temporary names and renamed into place
only when every one is written, so a failed report leaves an earlier one intact.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from arena.report.data import AdapterProvenance, LessonUse, ReportError, SessionData
from arena.report.figures import Figure

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.85rem; color: #555; }
table { border-collapse: collapse; font-size: 0.85rem; width: 100%; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.4rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.meta { color: #555; font-size: 0.9rem; } p.empty { color: #777; font-style: italic; }
"""


def check_out_dir(out: Path) -> None:
    """Create ``out`` (and parents) and check it is a writable directory.

    Raises:
        ReportError: it is a file, cannot be created, or is not writable.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ReportError(f"--out {out} is not a directory") from None
    except OSError as e:
        raise ReportError(f"cannot create --out {out}: {e.strerror or e}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ReportError(f"--out {out} is not writable")


def _e(x: object) -> str:
    return html.escape(str(x))


def _figure(fig: Figure) -> str:
    data = base64.b64encode(fig.png).decode("ascii")
    return (f'<figure id="fig-{_e(fig.name)}"><img id="img-{_e(fig.name)}" alt="{_e(fig.title)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{_e(fig.caption)}</figcaption></figure>')


def _table(head: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[int] = ()) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{_e(v)}</td>' if i in numeric else f"<td>{_e(v)}</td>" for i, v in enumerate(r))
        + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _rate(s: dict | None) -> str:
    if not s or s.get("pass_at_1") is None:
        return "n/a"
    lo, hi = s.get("ci95", (0, 1))
    return f"{s['pass_at_1']:.3f} [{lo:.3f}, {hi:.3f}] (n={s['n']})"


def lessons_table(lessons: Sequence[LessonUse]) -> str:
    """The lessons most in context, with their votes and measured utility."""
    if not lessons:
        return '<p class="empty">No lesson was in the solver\'s prompt during this session.</p>'
    rows = [
        (u.lesson_id, u.status, u.in_context, u.helpful, u.harmful,
         "not measured" if u.utility is None else
         f"{u.utility:+.3f}" + (f" [{u.utility_ci[0]:+.3f}, {u.utility_ci[1]:+.3f}]" if u.utility_ci else "") + f" (n={u.utility_n})",
         u.text if len(u.text) <= 160 else u.text[:157] + "...")
        for u in lessons
    ]
    return ('<p class="meta">In context: episodes of this session whose prompt showed the lesson. Helpful/harmful: '
            "the teacher's votes, library-wide. Utility: the latest A/B effect on pass@1 (with − without) with its 95% CI.</p>"
            + _table(("lesson", "status", "in context", "helpful", "harmful", "utility", "text"), rows, numeric=(2, 3, 4)))


def adapters_table(adapters: Sequence[AdapterProvenance]) -> str:
    """Which rollouts and lessons went into each adapter of the session, and what it scored."""
    if not adapters:
        return '<p class="empty">No adapter was trained on this session.</p>'
    rows = [
        (a.adapter_id, a.objective, a.cycle if a.cycle is not None else "arena distill", a.parent or "base model",
         a.session, "n/a" if a.examples is None else a.examples, "n/a" if a.rollouts is None else a.rollouts,
         ", ".join(a.distilled) or "none", ", ".join(a.in_context) or "none", _rate(a.base), _rate(a.heldout))
        for a in adapters
    ]
    return ('<p class="meta">Held-out pass@1 without lessons, 95% Wilson interval; base: the base model on the same tasks.</p>'
            + _table(("adapter", "objective", "cycle", "trained from", "session", "examples", "rollouts",
                      "distilled lessons", "lessons in context", "base pass@1", "adapter pass@1"), rows, numeric=(5, 6)))


def _paired(vs: dict | None) -> tuple[str, str]:
    if vs is None:
        return "", ""
    return f"{vs['diff']:+.3f} [{vs['ci95'][0]:+.3f}, {vs['ci95'][1]:+.3f}]", f"{vs['p_value']:.3g}"


def _heldout_table(data: SessionData) -> str:
    rows = [(p.label, "yes" if p.lessons else "no", p.n, "n/a" if p.pass_at_1 is None else f"{p.pass_at_1:.3f}",
             f"[{p.ci95[0]:.3f}, {p.ci95[1]:.3f}]", *_paired(p.vs_before), *_paired(p.vs_no_lessons))
            for p in data.heldout]
    return ('<p class="meta">Paired on the same tasks: the difference of pass@1 with its 95% Newcombe interval and '
            "the exact McNemar p, against \"before\" and, for a point with lessons, against the same stage without.</p>"
            + _table(("stage", "lessons", "n", "pass@1", "95% CI", "vs before", "p", "lessons vs none", "p"), rows,
                     numeric=(2, 3)))


def _page(title: str, meta: str, sections: Sequence[tuple[str, str]]) -> bytes:
    body = "".join(f"<h2>{_e(h)}</h2>{content}" for h, content in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{STYLE}</style></head><body><h1>{_e(title)}</h1>{meta}{body}</body></html>").encode()


def session_page(data: SessionData, figures: Sequence[Figure]) -> bytes:
    """The HTML of one session's report (figures in the order given, then the two tables)."""
    cfg = data.config
    fams = ", ".join(cfg.get("families") or []) or (str(cfg.get("tasks_file")) if cfg.get("tasks_file") else "n/a")
    faults = ", ".join(f"{k} {n}" for k, n in data.faults.items()) or "none"
    meta = (f'<p class="meta">Status {_e(data.status)} · tasks {_e(fams)} · reward {_e(cfg.get("reward", "verifier"))} · '
            f'k = {data.rollouts} rollouts per group · {data.cycles} cycle(s) · success threshold {data.threshold:g} · '
            f'faults: {_e(faults)} · written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC</p>')
    figs = {f.name: f for f in figures}
    sections = [("Held-out pass@1", _figure(figs["heldout"]) + _heldout_table(data))]
    sections += [(f.title, _figure(f)) for f in figures if f.name != "heldout"]
    sections += [("Lessons most in context", lessons_table(data.lessons)),
                 ("Adapters and their provenance", adapters_table(data.adapters))]
    return _page(f"Session {data.session}", meta, sections)


def compare_page(names: Sequence[str], figure: Figure) -> bytes:
    """The HTML of ``arena report --compare``."""
    return _page("Sessions compared: " + ", ".join(names), "", [("Held-out pass@1", _figure(figure))])


@dataclass(frozen=True)
class ReportFiles:
    """What a report wrote: the page and its figures' PNGs (page order)."""

    html: Path
    figures: list[Path]


def write_files(out: Path, page: bytes, figures: Sequence[Figure]) -> ReportFiles:
    """Write ``<figure>.png`` for each figure and ``report.html`` into ``out``, all or nothing.

    Every file is first written under a temporary name beside its target; only when all are
    written are they renamed into place, so a failure (a directory where a file goes, a full
    disk) leaves the files already in ``out`` as they were.

    Raises:
        ReportError: a target is a directory, or a file cannot be written.
    """
    files = [(out / f"{f.name}.png", f.png) for f in figures] + [(out / "report.html", page)]
    for path, _ in files:
        if path.is_dir():
            raise ReportError(f"{path} is a directory; choose another --out")
    tmps: list[Path] = []
    try:
        for path, payload in files:
            tmps.append(path.with_name(f".{path.name}.{os.getpid()}.tmp"))  # open(): the umask's permissions
            tmps[-1].write_bytes(payload)
        for tmp, (path, _) in zip(tmps, files, strict=True):
            os.replace(tmp, path)
    except OSError as e:
        raise ReportError(f"cannot write the report in {out}: {e.strerror or e}") from None
    finally:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
    return ReportFiles(files[-1][0], [p for p, _ in files[:-1]])
