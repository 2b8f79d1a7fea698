"""The figures of ``arena report`` (matplotlib, Agg): one function per figure, each a :class:`Figure`.

Every figure states its n and what its error bars are in its caption; empty data draws a
figure that says what is missing instead of failing. Rates share one 0–1 axis; counts and
tokens get their own.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arena.episode.calibration import expected_calibration_error
from arena.report.data import HeldoutPoint, SessionData
from lessons.outcomes import passes
from lessons.vocab import LESSON_STATUSES

DPI = 110
OP_COLOURS = {"ADD": "tab:cyan", "EDIT": "tab:blue", "MERGE": "tab:purple", "RETIRE": "tab:brown", "DISTILL": "tab:pink"}
STATUS_COLOURS = {"candidate": "tab:gray", "active": "tab:green", "retired": "tab:red", "distilled": "tab:orange"}


@dataclass(frozen=True)
class Figure:
    """One rendered figure: a file name stem, its title and caption, and the PNG bytes."""

    name: str  # e.g. "heldout" (written as heldout.png)
    title: str
    caption: str  # n and what the error bars are
    png: bytes


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _render(fig: Any, caption: str) -> bytes:
    """The figure as PNG bytes, with ``caption`` (its n and error bars) printed under it: a PNG used on its own keeps them."""
    lines = textwrap.wrap(caption, width=int(fig.get_figwidth() * 17))
    bottom = (len(lines) * 7 * 1.35 / 72 + 0.08) / fig.get_figheight()  # 7-pt lines, in figure fractions
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, color="dimgray", va="bottom", ha="left")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    _plt().close(fig)
    return buf.getvalue()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _integer_axis(axis: Any) -> None:
    """Ticks at whole numbers only (counts)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _empty(ax: Any, message: str) -> None:
    """Write ``message`` in the middle of an axes that has nothing to plot."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="dimgray")
    ax.set_xticks([])
    ax.set_yticks([])


def _p(p: float) -> str:
    return f"p={p:.2g}" if p >= 1e-3 else "p<0.001"


def heldout_figure(data: SessionData) -> Figure:
    """Held-out greedy pass@1 at each stage, with and without lessons, 95% CI bars and p against "before"."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    points = [p for p in data.heldout if p.pass_at_1 is not None]
    for lessons, marker, fill, dx in ((True, "o", "tab:blue", -0.04), (False, "s", "white", 0.04)):
        ps = [p for p in points if p.lessons == lessons]
        if not ps:
            continue
        xs = [p.stage + dx for p in ps]
        ys = [p.pass_at_1 for p in ps]
        err = [[y - p.ci95[0] for y, p in zip(ys, ps, strict=True)], [p.ci95[1] - y for y, p in zip(ys, ps, strict=True)]]
        ax.errorbar(xs, ys, yerr=err, fmt=marker, mfc=fill, mec="tab:blue", ecolor="tab:blue", capsize=4,
                    linestyle="-" if lessons else "--", color="tab:blue", label="with lessons" if lessons else "without lessons")
        for x, p in zip(xs, ps, strict=True):  # with lessons: p above the bar; without: below, so both stay readable
            if p.vs_before is not None:
                ax.annotate(_p(p.vs_before["p_value"]), (x, p.ci95[1] if lessons else p.ci95[0]), textcoords="offset points",
                            xytext=(0, 4 if lessons else -4), ha="center", va="bottom" if lessons else "top", fontsize=8)
    if points:
        stages = sorted({p.stage: p.label for p in points}.items())
        ax.set_xticks([s for s, _ in stages], [lbl for _, lbl in stages])
        ax.set_xlim(stages[0][0] - 0.5, stages[-1][0] + 0.5)
        ax.set_ylim(-0.04, 1.08)
        ax.set_ylabel("held-out pass@1 (greedy)")
        ax.legend(loc="upper left", fontsize=8)
    else:
        _empty(ax, "no held-out task was graded")
    ax.set_title("Held-out pass@1 before and after")
    ns = sorted({p.n for p in data.heldout})
    caption = (f"n = {', '.join(map(str, ns))} held-out tasks per point; bars: 95% Wilson intervals; "
               "p: exact McNemar test of each point against \"before\" on the same tasks (paired; above a point with "
               "lessons, below one without).")
    return Figure("heldout", "Held-out pass@1", caption, _render(fig, caption))


def rounds_figure(data: SessionData) -> Figure:
    """Train mean reward, sampled pass@1 and pass@k per round (one 0–1 axis: all are rates)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    rs = data.rounds
    if rs:
        x = [r.round for r in rs]
        ax.plot(x, [r.mean_reward for r in rs], "o-", linewidth=4, alpha=0.5, label="mean reward")
        ax.plot(x, [r.pass_at_1 for r in rs], "s--", mfc="white", label="pass@1 (sampled)")
        ax.plot(x, [r.pass_at_k for r in rs], "^-", label=f"pass@{data.rollouts}")
        per_cycle = data.config.get("rounds") if data.cycles > 1 else None  # rounds per cycle (SessionConfig.rounds)
        for c in range(1, data.cycles) if isinstance(per_cycle, int) and per_cycle > 0 else ():
            ax.axvline(c * per_cycle + 0.5, color="gray", linestyle=":", linewidth=1)
        ax.set_xticks(x)
        ax.set_ylim(-0.04, 1.05)
        ax.set_xlabel("round")
        ax.set_ylabel("rate over the round's train rollouts")
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no round recorded")
    ax.set_title("Train reward and pass@k per round")
    eps = ", ".join(f"round {r.round}: {_plural(r.episodes, 'group')}" for r in rs) or "no round"
    caption = (f"Groups of k = {data.rollouts} rollouts at the sampling temperature ({eps}); no error bars "
               f"(one group per task); pass@1 and pass@k count a rollout as passed at reward ≥ {data.threshold:g}"
               + ("; dotted lines: the sleeps between cycles" if data.cycles > 1 else "")
               + ("; with a 0/1 verifier reward the mean reward equals pass@1 and the two lines coincide." if not data.rubric
                  else "."))
    return Figure("rounds", "Train rates per round", caption, _render(fig, caption))


def hints_figure(data: SessionData) -> Figure:
    """All-fail groups, guided groups and guided successes per round (bars)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    rs = data.rounds
    if rs and any(r.all_fail or r.guided for r in rs):
        x = [r.round for r in rs]
        w = 0.27
        for i, (label, vals) in enumerate((("all-fail groups", [r.all_fail for r in rs]),
                                           ("guided groups", [r.guided for r in rs]),
                                           ("guided successes", [r.rescued for r in rs]))):
            ax.bar([v + (i - 1) * w for v in x], vals, width=w, label=label)
        ax.set_xticks(x)
        _integer_axis(ax.yaxis)
        ax.set_xlabel("round")
        ax.set_ylabel("groups")
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no group failed every attempt" if rs else "no round recorded")
    ax.set_title("Hints: all-fail groups and how often a hint rescued them")
    total = sum(r.episodes for r in rs)
    guided = sum(r.guided for r in rs)
    caption = (f"{_plural(total, 'group')} in all; {sum(r.all_fail for r in rs)} all-fail, {guided} re-attempted with a hint, "
               f"{sum(r.rescued for r in rs)} of them with at least one guided success (reward ≥ {data.threshold:g}); "
               "counts, no error bars.")
    return Figure("hints", "Hints per round", caption, _render(fig, caption))


def library_figure(data: SessionData) -> Figure:
    """Lessons by status and live tokens against the budget over the session, curation events marked."""
    plt = _plt()
    tl = data.timeline
    from matplotlib.ticker import MaxNLocator

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.5, 5.2), sharex=True, height_ratios=(3, 2))
    if tl is None or not any(any(v) for v in tl.counts.values()):
        _empty(top, "the library held no lesson during the session")
        fig.delaxes(bottom)
    else:
        minutes = [(t - tl.start).total_seconds() / 60 for t in tl.times]
        end = (tl.end - tl.start).total_seconds() / 60
        xs = [*minutes, max(end, minutes[-1])]
        for st in LESSON_STATUSES:
            ys = tl.counts[st]
            if any(ys):
                top.step(xs, [*ys, ys[-1]], where="post", label=st, color=STATUS_COLOURS[st])
        ymax = max([1, *(max(v) for v in tl.counts.values())])
        for op, colour in OP_COLOURS.items():
            at = [(t - tl.start).total_seconds() / 60 for t, o, _ in tl.events if o == op]
            if at:
                top.vlines(at, ymax * 1.02, ymax * 1.1, colors=colour, linewidth=1.2, label=f"{op} ({len(at)})")
        top.set_ylim(0, ymax * 1.15)
        top.yaxis.set_major_locator(MaxNLocator(integer=True))
        top.set_ylabel("lessons")
        top.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        bottom.step(xs, [*tl.live_tokens, tl.live_tokens[-1]], where="post", color="tab:blue", label="live lessons' tokens")
        if data.library_tokens:
            bottom.axhline(data.library_tokens, color="tab:red", linestyle="--", label=f"budget {data.library_tokens}")
        bottom.set_ylabel("tokens")
        bottom.set_xlabel("minutes since the session started")
        bottom.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    top.set_title("The library during the session")
    n_ev = len(tl.events) if tl else 0
    caption = (f"{_plural(n_ev, 'curation event')} (ticks above the counts, by op); counts replayed from the audit log; tokens "
               "of candidate and active lessons at their current text; the library is shared, so events by hand or by "
               "other sessions in the same window count too.")
    return Figure("library", "Library over time", caption, _render(fig, caption))


def reliability_bins(pairs: Sequence[tuple[float, float]], bins: int = 10) -> list[tuple[float, float, int]]:
    """Judge reward bins for a reliability diagram: ``(mean judge reward, verifier pass rate, n)`` per non-empty bin.

    Args:
        pairs: ``(judge reward, verifier reward)`` per rollout, both in [0, 1].
        bins: equal-width bins on [0, 1] (a reward of exactly 1 falls in the last), as
            :func:`arena.episode.calibration.expected_calibration_error` bins them.
    """
    sums = [[0, 0.0, 0] for _ in range(bins)]
    for judge, verifier in pairs:
        b = min(int(judge * bins), bins - 1)
        sums[b][0] += 1
        sums[b][1] += judge
        sums[b][2] += passes(verifier)
    return [(s / n, ok / n, n) for n, s, ok in sums if n]


def calibration_figure(data: SessionData) -> Figure:
    """The judge's reliability diagram against the verifier, with its ECE, and the hack flags by kind."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.5, 3.9))
    pairs = data.calibration
    if pairs:
        b = reliability_bins(pairs)
        left.plot([0, 1], [0, 1], color="gray", linestyle=":", linewidth=1)
        left.plot([x for x, _, _ in b], [y for _, y, _ in b], "o-", color="tab:blue")
        for x, y, n in b:
            left.annotate(str(n), (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
        ece = expected_calibration_error([j for j, _ in pairs], [passes(v) for _, v in pairs])
        left.set_xlim(0, 1)
        left.set_ylim(-0.04, 1.05)
        left.set_xlabel("judge reward (bin mean)")
        left.set_ylabel("verifier pass rate")
        left.set_title(f"Judge reliability, ECE {ece:.3f}", fontsize=10)
    else:
        _empty(left, "no rollout has both a judge\nand a verifier reward")
    if data.hack_flags:
        kinds = sorted(data.hack_flags)
        right.barh(kinds, [data.hack_flags[k] for k in kinds], color="tab:red")
        _integer_axis(right.xaxis)
        right.set_xlabel("rollouts flagged")
        right.set_title("Reward-hack flags", fontsize=10)
    else:
        _empty(right, "no reward-hack flag")
    flagged = sum(data.hack_flags.values())
    caption = (f"{_plural(len(pairs), 'rollout')} graded by both the judge and the verifier; 10 equal-width bins of the "
               "judge's reward, the number of rollouts above each point; diagonal: perfect calibration; ECE as in Guo et "
               f"al. 2017; no error bars. Right: {flagged} reward-hack flags over the session's rubric-graded rollouts, by kind.")
    return Figure("calibration", "Critic calibration", caption, _render(fig, caption))


def compare_figure(sessions: Sequence[tuple[str, Sequence[HeldoutPoint]]]) -> Figure:
    """Several sessions' held-out pass@1 by stage on one figure (solid: with lessons, dashed: without)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labels: dict[float, str] = {}
    for i, (name, points) in enumerate(sessions):
        colour = colours[i % len(colours)]
        dx = (i - (len(sessions) - 1) / 2) * 0.06
        for lessons in (True, False):
            ps = [p for p in points if p.lessons == lessons and p.pass_at_1 is not None]
            if not ps:
                continue
            ys = [p.pass_at_1 for p in ps]
            err = [[y - p.ci95[0] for y, p in zip(ys, ps, strict=True)], [p.ci95[1] - y for y, p in zip(ys, ps, strict=True)]]
            shift = dx + (-0.02 if lessons else 0.02)  # with and without lessons apart at one stage
            ax.errorbar([p.stage + shift for p in ps], ys, yerr=err, fmt="o" if lessons else "s", capsize=3, color=colour,
                        linestyle="-" if lessons else "--", mfc=colour if lessons else "white",
                        label=f"{name}" + ("" if lessons else " (no lessons)"))
            labels.update({p.stage: p.label for p in ps})
    if labels:
        ax.set_xticks(sorted(labels), [labels[s] for s in sorted(labels)])
        ax.set_xlim(min(labels) - 0.5, max(labels) + 0.5)
        ax.set_ylim(-0.04, 1.05)
        ax.set_ylabel("held-out pass@1 (greedy)")
        ax.legend(fontsize=7, ncol=2)
    else:
        _empty(ax, "no held-out task was graded in these sessions")
    ax.set_title("Held-out pass@1 of the sessions compared")
    ns = sorted({p.n for _, ps in sessions for p in ps})
    caption = (f"{len(sessions)} sessions; n = {', '.join(map(str, ns)) or '0'} held-out tasks per point; bars: 95% "
               "Wilson intervals; points of one stage are shifted apart to stay readable.")
    return Figure("compare", "Sessions compared", caption, _render(fig, caption))


def session_figures(data: SessionData) -> list[Figure]:
    """Every figure of one session's report, in page order (calibration only for rubric sessions)."""
    figs = [heldout_figure(data), rounds_figure(data), hints_figure(data), library_figure(data)]
    if data.rubric:
        figs.append(calibration_figure(data))
    return figs
