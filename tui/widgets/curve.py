"""The learning-curve panel: held-out pass@1, mean train reward and active lessons per round (plotext)."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from lessons.library.read_models import LearningCurve


class LearningCurvePlot(PlotextPlot):
    """A plotext chart of :class:`lessons.library.read_models.LearningCurve`.

    Left axis (0–1): mean train reward per round and held-out pass@1 (before: round 0,
    after: last round). Right axis: number of active lessons at the end of each round.
    """

    DEFAULT_CSS = """
    LearningCurvePlot { height: 1fr; min-height: 12; }
    """

    def show(self, curve: LearningCurve) -> None:
        """Redraw the chart from ``curve`` (call on the event loop)."""
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("learning curve")
        plt.xlabel("round")
        if curve.rounds:
            plt.plot(curve.rounds, curve.mean_reward, label="mean train reward", marker="braille")
            plt.plot(curve.rounds, curve.active_lessons, label="active lessons", yside="right", marker="dot")
        if curve.heldout:
            xs, ys = zip(*curve.heldout)
            plt.plot(list(xs), list(ys), label="held-out pass@1", marker="hd")
        plt.ylim(0, 1, yside="left")
        top = max(curve.active_lessons, default=0)
        plt.ylim(0, max(1, top), yside="right")
        last = max([*curve.rounds, *(x for x, _ in curve.heldout)], default=1)
        plt.xticks(list(range(0, last + 1)))
        self.refresh()
