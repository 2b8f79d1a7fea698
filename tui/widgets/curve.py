"""The learning-curve panel: three charts of one session, one quantity per axis (plotext).

- ``heldout``: held-out pass@1 before (round 0) and after (last round), each with its stored
  95% Wilson interval as a vertical bar, on a 0–1 axis;
- ``train``: mean train reward, sampled pass@1 and pass@k per round, on one 0–1 axis (all rates);
- ``library``: the number of active lessons at the end of each round, on its own axis.

``c`` on the session screen cycles them (:meth:`LearningCurvePlot.next_chart`).
"""

from __future__ import annotations

from textual.reactive import reactive
from textual_plotext import PlotextPlot

from lessons.library.read_models import LearningCurve

CHARTS = ("heldout", "train", "library")  # the cycle order of ``c``
CHART_NAMES = {  # what each chart shows (the start of its title)
    "heldout": "held-out pass@1",
    "train": "train reward and pass@k per round",
    "library": "active lessons per round",
}
RATE_TICKS = [0.0, 0.25, 0.5, 0.75, 1.0]  # y ticks of the 0–1 axes


class LearningCurvePlot(PlotextPlot):
    """One of three charts of :class:`lessons.library.read_models.LearningCurve` (see the module doc).

    ``chart`` (one of :data:`CHARTS`) says which is drawn; :attr:`chart_title` is the title the
    last draw gave it (what it shows, n where it applies, or that there is nothing to draw yet).
    """

    DEFAULT_CSS = """
    LearningCurvePlot { height: 1fr; min-height: 12; }
    """

    chart: reactive[str] = reactive("heldout", init=False)

    curve: LearningCurve | None = None  # the last curve shown (None: not loaded yet)
    groups: int = 0  # unguided groups (episodes) behind the train rates; 0: not shown
    chart_title: str = ""  # the title of the chart drawn last

    def show(self, curve: LearningCurve, groups: int = 0) -> None:
        """Redraw from ``curve`` (call on the event loop).

        Args:
            curve: the session's learning curve.
            groups: the number of unguided groups (episodes) the train rates average over;
                shown as n in the train chart's title (0: not shown).
        """
        self.curve, self.groups = curve, groups
        self._draw()

    def next_chart(self) -> None:
        """Switch to the next chart of :data:`CHARTS` (wraps around)."""
        self.chart = CHARTS[(CHARTS.index(self.chart) + 1) % len(CHARTS)]

    def watch_chart(self) -> None:
        self._draw()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        curve = self.curve or LearningCurve([], [], [], [])
        {"heldout": self._heldout, "train": self._train, "library": self._library}[self.chart](curve)
        plt.title(self.chart_title)
        self.refresh()

    def _heldout(self, curve: LearningCurve) -> None:
        """Held-out pass@1 points with their 95% intervals as vertical bars, x: before / after."""
        plt = self.plt
        name = CHART_NAMES["heldout"]
        plt.ylim(0, 1)
        plt.yticks(RATE_TICKS)
        plt.ylabel("pass@1")
        if not curve.heldout:
            self.chart_title = f"{name}: no held-out evaluation yet"
            plt.xticks([])
            return
        ns = sorted(set(curve.heldout_n))
        self.chart_title = f"{name} · 95% Wilson CI" + (f" · n={'/'.join(map(str, ns))} tasks" if ns else "")
        last = max(1, max(x for x, _ in curve.heldout))
        plt.xlim(-0.5, last + 0.5)
        offset = 0.05 * (last + 1)  # the value label sits this far beside its point (x units)
        for i, (x, p) in enumerate(curve.heldout):
            lo, hi = curve.heldout_ci[i] if i < len(curve.heldout_ci) else (None, None)
            if lo is not None and hi is not None:
                plt.plot([x, x], [lo, hi], marker="│", color="blue", label="95% CI" if i == 0 else None)
                text = f"{p:.2f} [{lo:.2f}, {hi:.2f}]"
            else:
                text = f"{p:.2f}"
            right = x < last  # the label goes toward the middle of the chart
            plt.text(text, x + offset if right else x - offset, p, alignment="left" if right else "right")
        plt.scatter([x for x, _ in curve.heldout], [p for _, p in curve.heldout], marker="●", color="red",
                    label="pass@1")
        xs = [x for x, _ in curve.heldout]
        plt.xticks(xs, ["before" if x == 0 else f"after round {x}" for x in xs])

    def _train(self, curve: LearningCurve) -> None:
        """Mean reward, pass@1 and pass@k of the unguided rollouts per round, one 0–1 axis."""
        plt = self.plt
        k = curve.k
        name = CHART_NAMES["train"].replace("pass@k", f"pass@{k}") if k else CHART_NAMES["train"]
        plt.ylim(0, 1)
        plt.yticks(RATE_TICKS)
        plt.ylabel("rate")
        plt.xlabel("round")
        if not curve.rounds:
            self.chart_title = f"{name}: no rounds yet"
            plt.xticks([])
            return
        self.chart_title = name + (f" · n={self.groups} groups" if self.groups else "")
        plt.xlim(curve.rounds[0] - 0.5, curve.rounds[-1] + 0.5)
        if curve.pass_at_1 and all(abs(a - b) < 1e-9 for a, b in zip(curve.mean_reward, curve.pass_at_1)):
            # binary rewards: the mean reward is pass@1; one line, not one hidden under the other
            plt.plot(curve.rounds, curve.mean_reward, label="mean reward = pass@1", marker="braille")
        else:
            plt.plot(curve.rounds, curve.mean_reward, label="mean reward", marker="braille")
            if curve.pass_at_1:
                plt.plot(curve.rounds, curve.pass_at_1, label="pass@1", marker="dot")
        if k and curve.pass_at_k:
            plt.plot(curve.rounds, curve.pass_at_k, label=f"pass@{k}", marker="hd")
        plt.xticks(curve.rounds)

    def _library(self, curve: LearningCurve) -> None:
        """Active lessons at the end of each round, on its own (count) axis."""
        plt = self.plt
        name = CHART_NAMES["library"]
        plt.ylabel("lessons")
        plt.xlabel("round")
        if not curve.rounds:
            self.chart_title = f"{name}: no rounds yet"
            plt.ylim(0, 1)
            plt.xticks([])
            return
        self.chart_title = name
        top = max(1, max(curve.active_lessons, default=0))
        plt.ylim(0, top)
        plt.yticks(list(range(0, top + 1, max(1, top // 5))))
        plt.xlim(curve.rounds[0] - 0.5, curve.rounds[-1] + 0.5)
        plt.plot(curve.rounds, curve.active_lessons, label="active lessons", marker="hd")
        plt.xticks(curve.rounds)
