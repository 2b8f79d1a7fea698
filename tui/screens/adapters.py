"""Adapters: each LoRA adapter of `arena distill` with its lesson set, training metrics and evaluation."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Header, Static

from lessons.library.read_models import AdapterView
from tui.screens.base import DataScreen

NO_ADAPTERS = "No adapters yet — run `arena distill` to distill a session's lessons into a LoRA adapter."
EVAL_ORDER = ("base", "base_lessons", "adapter", "adapter_lessons")  # the conditions arena distill evaluates


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return f"[{len(v)} values]" if len(v) > 4 else ", ".join(_fmt(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return str(v)


def render_adapter(a: AdapterView) -> Group:
    """Evaluation table (held-out pass@1 per condition), training metrics and lesson set."""
    ev = Table(title="held-out evaluation", title_justify="left")
    for col in ("condition", "pass@1", "95% CI", "passes / n"):
        ev.add_column(col)
    names = [n for n in EVAL_ORDER if n in a.evaluation] + [
        n for n, v in a.evaluation.items() if n not in EVAL_ORDER and isinstance(v, dict)
    ]
    for name in names:
        e = a.evaluation[name]
        ci = e.get("ci95") or ["-", "-"]
        ci_s = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if all(isinstance(x, (int, float)) for x in ci) else "-"
        p = e.get("pass_at_1")
        ev.add_row(name, f"{p:.3f}" if isinstance(p, (int, float)) else "-", ci_s, f"{e.get('passes', '-')} / {e.get('n', '-')}")
    if not names:
        ev.add_row("-", "not evaluated", "", "")
    met = Table(title="training metrics", title_justify="left")
    met.add_column("metric")
    met.add_column("value")
    for k, v in a.metrics.items():
        met.add_row(k, _fmt(v))
    les = Table(title=f"lesson set ({len(a.lessons)})", title_justify="left")
    for col in ("lesson", "relation", "status now"):
        les.add_column(col)
    for lid, rel, st in a.lessons:
        les.add_row(lid, rel, st)
    chain = f"  cycle {a.cycle}, parent {a.parent_adapter or 'base model'}" if a.cycle is not None else ""
    head = Text.assemble((a.adapter_id, "bold"), f"  objective {a.objective or '-'}  created {a.created_at or '-'}{chain}\n",
                         (a.path, "dim"))
    extra = [Text(f"distilled: {', '.join(map(str, a.evaluation['distilled']))}")] if a.evaluation.get("distilled") else []
    return Group(head, ev, *extra, met, les)


class AdaptersScreen(DataScreen):
    """The adapters table and the selected adapter's detail."""

    BINDINGS = [("escape", "back", "Back")]

    def __init__(self) -> None:
        super().__init__()
        self.adapters: list[AdapterView] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Adapters", classes="title", id="adapters-title")
        with Horizontal():
            table: DataTable = DataTable(id="adapters", cursor_type="row", zebra_stripes=True)
            for label, width in (("adapter", 14), ("objective", 10), ("lessons", 7), ("pass@1 +lessons → adapter", 25)):
                table.add_column(label, width=width)
            yield table
            with VerticalScroll(id="adapter-detail"):
                yield Static("", id="adapter-body")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "adapters"

    def fetch(self) -> list[AdapterView]:
        return self.data.adapters()

    def show(self, adapters: list[AdapterView] | None) -> None:
        table = self.query_one("#adapters", DataTable)
        body = self.query_one("#adapter-body", Static)
        self.adapters = adapters or []
        keep = table.cursor_row
        table.clear()
        if not adapters:
            self.query_one("#adapters-title", Static).update("Adapters (0)")
            body.update(NO_ADAPTERS)
            return
        for a in adapters:
            bl = (a.evaluation.get("base_lessons") or a.evaluation.get("wake_lessons") or {}).get("pass_at_1")
            ad = (a.evaluation.get("adapter") or {}).get("pass_at_1")
            figs = f"{bl:.3f} → {ad:.3f}" if isinstance(bl, (int, float)) and isinstance(ad, (int, float)) else "-"
            table.add_row(a.adapter_id, a.objective, str(len(a.lessons)), figs, key=a.adapter_id)
        self.query_one("#adapters-title", Static).update(f"Adapters ({len(adapters)})")
        table.move_cursor(row=min(keep, len(adapters) - 1))
        self._show_current()

    def _show_current(self) -> None:
        table = self.query_one("#adapters", DataTable)
        if table.row_count and 0 <= table.cursor_row < len(self.adapters):
            self.query_one("#adapter-body", Static).update(render_adapter(self.adapters[table.cursor_row]))

    @on(DataTable.RowHighlighted, "#adapters")
    def _highlighted(self) -> None:
        self._show_current()

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
