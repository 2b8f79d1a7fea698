"""Lessons: a paged, searchable, filterable table of the library with a detail pane and curation.

The table holds one page (:data:`lessons.library.read_models.PAGE_SIZE` rows) at a time, so a 100k-lesson
library paints as fast as a small one; ``]`` / ``[`` page. ``/`` searches the lesson texts
(FTS5). Edits, retirements and votes go through :class:`lessons.library.curation.Curator` in a
worker and are written as lesson events with origin ``{"by": "tui"}``.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Header, Input, Select, Static

from lessons.library.read_models import PAGE_SIZE, LessonDetail, LessonPage
from lessons.library.store import LessonInfo
from lessons.vocab import LESSON_STATUSES
from tui.screens.base import USER_ERRORS, DataScreen, one_line

TEXT_WIDTH = 56  # characters of lesson text shown in the table


def fmt_utility(les: LessonInfo) -> str:
    return "-" if les.utility is None else f"{les.utility:+.3f}"


def render_detail(d: LessonDetail) -> Group:
    """The detail pane: text, counters, utility, full history and lineage."""
    les = d.lesson
    util = "not measured" if les.utility is None else (
        f"{les.utility:+.3f} on pass@1, 95% CI [{les.utility_ci[0]:+.3f}, {les.utility_ci[1]:+.3f}], n={les.utility_n}"
        if les.utility_ci else f"{les.utility:+.3f} (n={les.utility_n})"
    )
    head = Text.assemble((les.lesson_id, "bold"), f"  {les.status}  family {les.scope}")
    updated = f"  updated {les.updated_at:%Y-%m-%d %H:%M}" if les.updated_at else ""
    counters = Text(
        f"helpful {les.helpful}  harmful {les.harmful}  neutral {les.neutral}  in context {les.times_in_context}×  "
        f"tokens {les.tokens if les.tokens is not None else '-'}\nutility {util}\n"
        f"created {les.created_at:%Y-%m-%d %H:%M}{updated}",
        style="dim",
    )
    hist = Table(title="history", title_justify="left", expand=True, box=box.SIMPLE_HEAD, padding=(0, 1))
    hist.add_column("at (UTC)", no_wrap=True)
    hist.add_column("op", no_wrap=True)
    hist.add_column("change", ratio=3)
    hist.add_column("why", ratio=2)
    hist.add_column("from", no_wrap=True)
    for ev in d.events:
        if ev.episode_id is not None:
            src = f"episode {ev.episode_id}"
        else:
            src = str((ev.origin or {}).get("by", ""))
        if ev.target:
            src = f"→ {ev.target} {src}"
        if ev.op in ("EDIT", "MERGE") and ev.before is not None:
            change = Text.assemble((ev.before, "red"), " → ", (ev.after or "", "green"))
        elif ev.before or ev.after:
            change = Text(f"{ev.before or ''} → {ev.after or ''}" if ev.before else (ev.after or ""))
        else:
            change = Text("")
        hist.add_row(f"{ev.created_at:%m-%d %H:%M}", ev.op, change, Text(ev.rationale), src)
    lin = Text()
    lin.append("lineage\n", style="bold")
    eps = ", ".join(label for _, label in d.source_episodes) or "none (hand-written or imported)"
    lin.append(f"  from episodes: {eps}\n")
    if d.merged_from:
        lin.append(f"  merged from: {', '.join(d.merged_from)}\n")
    lin.append(f"  merged into: {', '.join(d.merged_into) or '-'}\n")
    adapters = ", ".join(f"{a} ({rel})" for a, rel in d.adapters) or "-"
    lin.append(f"  adapters: {adapters}\n")
    parts = [head, Text(les.text), counters, hist, lin]
    if d.utility_history:
        ut = Table(title="utility A/B", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("at", "n", "with", "without", "effect", "95% CI"):
            ut.add_column(col)
        for u in d.utility_history:
            ut.add_row(u["at"][:16], str(u["n"]), f"{u['pass_with']:.3f}", f"{u['pass_without']:.3f}",
                       f"{u['effect']:+.3f}", f"[{u['ci95'][0]:+.3f}, {u['ci95'][1]:+.3f}]")
        parts.append(ut)
    return Group(*parts)


class LessonsScreen(DataScreen):
    """The lesson library: browse by page, filter by status and family, search, curate."""

    BINDINGS = [
        Binding("slash", "search", "Search"),
        Binding("enter", "open", "Detail", show=False),
        Binding("e", "edit", "Edit"),
        Binding("r", "retire", "Retire"),
        Binding("plus,u", "vote('helpful')", "Upvote"),
        Binding("minus,d", "vote('harmful')", "Downvote"),
        Binding("right_square_bracket", "page(1)", "Next page"),
        Binding("left_square_bracket", "page(-1)", "Prev page"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.page = 0
        self.status: str | None = None
        self.family: str | None = None
        self.query_text = ""
        self.rows: list[LessonInfo] = []
        self.selected: str | None = None  # lesson id shown in the detail pane

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="lesson-filters"):
            yield Input(placeholder="/ search lesson text", id="search")
            yield Select([(s, s) for s in LESSON_STATUSES], prompt="any status", id="status", allow_blank=True)
            yield Select([], prompt="any family", id="family", allow_blank=True)
        yield Static("", id="page-info")
        with Vertical(id="lesson-body"):
            table: DataTable = DataTable(id="lessons", cursor_type="row", zebra_stripes=True)
            table.add_column("id", key="id", width=18)
            table.add_column("status", key="status", width=9)
            table.add_column("family", key="family", width=16)
            table.add_column("help", key="helpful", width=4)
            table.add_column("harm", key="harmful", width=4)
            table.add_column("utility", key="utility", width=7)
            table.add_column("text", key="text", width=TEXT_WIDTH)
            yield table
            with VerticalScroll(id="lesson-detail"):
                yield Static("select a lesson", id="detail-body")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "lessons"
        self.query_one("#lessons", DataTable).focus()

    # ----------------------------------------------------------------- loading

    def fetch(self) -> tuple[LessonPage, list[str]]:
        if self.query_text.strip():
            page = self.data.search(self.query_text, self.status, self.family)
        else:
            page = self.data.lesson_page(self.page, self.status, self.family)
        return page, self.data.families()

    def show(self, result: tuple[LessonPage, list[str]]) -> None:
        page, families = result
        fam = self.query_one("#family", Select)
        opts = [(f, f) for f in families]
        if getattr(self, "_families", None) != families:
            self._families = families
            value = fam.value
            fam.set_options(opts)
            if value in families:
                fam.value = value
        self.page = page.page
        self._pages = page.pages
        self.rows = page.rows
        table = self.query_one("#lessons", DataTable)
        keep = table.cursor_row
        table.clear()
        for les in page.rows:
            text = les.text if len(les.text) <= TEXT_WIDTH else les.text[: TEXT_WIDTH - 1] + "…"
            table.add_row(les.lesson_id, les.status, les.scope, str(les.helpful), str(les.harmful),
                          fmt_utility(les), Text(text), key=les.lesson_id)
        if page.query:
            info = f"{page.total} match(es) for {page.query!r}" + (" (first shown)" if page.total >= 200 else "")
        else:
            first = page.page * PAGE_SIZE + 1 if page.rows else 0
            info = (f"{page.total:,} lessons · page {page.page + 1}/{page.pages} · rows {first}–"
                    f"{first + len(page.rows) - 1 if page.rows else 0}  ([ ] page)")
        self.query_one("#page-info", Static).update(info)
        if page.rows:
            table.move_cursor(row=min(keep, len(page.rows) - 1))
            self.load_detail(self.current_id())
        else:
            self.query_one("#detail-body", Static).update("no lessons" + (" match" if page.query else " here"))

    def current_id(self) -> str | None:
        table = self.query_one("#lessons", DataTable)
        if not table.row_count:
            return None
        return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def load_detail(self, lesson_id: str | None) -> None:
        if lesson_id is None:
            return
        self.run_in_thread(lambda: self.data.lesson_detail(lesson_id), self._show_detail)

    def _show_detail(self, d: LessonDetail | None) -> None:
        body = self.query_one("#detail-body", Static)
        if d is None:
            body.update("this lesson is no longer in the database")
            return
        self.selected = d.lesson.lesson_id
        body.update(render_detail(d))

    @on(DataTable.RowHighlighted, "#lessons")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        # the cursor's row now, not the event's: a reload's clear() highlights row 0 before the cursor is restored
        lid = self.current_id()
        if lid is not None and lid != self.selected:
            self.load_detail(lid)

    @on(DataTable.RowSelected, "#lessons")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.query_one("#lesson-detail").focus()

    # ----------------------------------------------------------------- search and filters

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value
        self.page = 0
        self.reload()

    @on(Input.Submitted, "#search")
    def _search_submitted(self) -> None:
        self.query_one("#lessons", DataTable).focus()

    @on(Select.Changed, "#status")
    def _status_changed(self, event: Select.Changed) -> None:
        self.status = None if event.value is Select.BLANK else str(event.value)
        self.page = 0
        self.reload()

    @on(Select.Changed, "#family")
    def _family_changed(self, event: Select.Changed) -> None:
        new = None if event.value is Select.BLANK else str(event.value)
        if new != self.family:
            self.family = new
            self.page = 0
            self.reload()

    def action_page(self, step: int) -> None:
        if self.query_text.strip():
            return
        last = getattr(self, "_pages", 1) - 1  # pages of the last load: `]` on the last page is a no-op
        target = min(max(0, self.page + step), max(0, last))
        if target == self.page:
            return
        self.page = target
        self.reload()

    def action_open(self) -> None:
        self.query_one("#lesson-detail").focus()

    def action_back(self) -> None:
        search = self.query_one("#search", Input)
        if search.has_focus and search.value:
            search.value = ""
            return
        if self.focused is not None and self.focused.id != "lessons":
            self.query_one("#lessons", DataTable).focus()
            return
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()

    # ----------------------------------------------------------------- curation

    def _target(self) -> LessonInfo | None:
        lid = self.current_id()
        les = next((r for r in self.rows if r.lesson_id == lid), None)
        if les is None:
            self.notify("no lesson selected", severity="warning")
        return les

    def action_edit(self) -> None:
        from tui.screens.modals import EditLessonModal

        les = self._target()
        if les is None:
            return

        def done(result: tuple[str, str] | None) -> None:
            if result is not None:
                self.curate("edit", les.lesson_id, *result)

        self.app.push_screen(EditLessonModal(les.lesson_id, les.text), done)

    def action_retire(self) -> None:
        from tui.screens.modals import RetireModal

        les = self._target()
        if les is None:
            return

        def done(why: str | None) -> None:
            if why is not None:
                self.curate("retire", les.lesson_id, why)

        self.app.push_screen(RetireModal(les.lesson_id), done)

    def action_vote(self, tag: str) -> None:
        les = self._target()
        if les is not None:
            self.curate("vote", les.lesson_id, tag)

    @work(thread=True, group="curate", exit_on_error=False)
    def curate(self, op: str, lesson_id: str, *args: str) -> None:
        """Apply one op through :class:`lessons.library.read_models.ArenaData` (a write transaction) and reload."""
        try:
            if op == "edit":
                res = self.data.edit(lesson_id, args[0], args[1])
                msg = f"{lesson_id} edited"
            elif op == "retire":
                res = self.data.retire(lesson_id, args[0])
                msg = f"{lesson_id} retired"
            else:
                res = self.data.vote(lesson_id, args[0])
                msg = f"{lesson_id} {'upvoted' if args[0] == 'helpful' else 'downvoted'}"
        except USER_ERRORS as e:
            self.app.call_from_thread(self.notify, one_line(e), title="not applied", severity="error")
            return
        extra = [f"{x} promoted to active" for x in res.promoted] + [
            f"{x} retired" for x in res.retired if not (op == "retire" and x == lesson_id)
        ]
        self.app.call_from_thread(self.notify, "; ".join([msg, *extra]))
        self.selected = None
        self.app.call_from_thread(self.reload)
