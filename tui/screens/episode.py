"""Episode: each rollout (completion, extracted answer, reward, critique), the hint and guided
rollouts, the lessons in context and the curation ops the episode caused."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Footer, Header, Static

from lessons.library.read_models import EpisodeDetail, RolloutView
from lessons.outcomes import passes
from tui.screens.base import DataScreen
from tui.screens.session import fmt_rewards


def rollout_panel(r: RolloutView) -> Panel:
    """One rollout: the completion, then the critique, titled with reward and answer."""
    answer = "none" if r.extracted_answer is None else repr(r.extracted_answer)
    reward = "ungraded" if r.reward is None else f"{r.reward:.2f}"
    title = f"{'guided ' if r.guided else ''}rollout {r.idx} · reward {reward} · answer {answer}"
    if r.fault:
        title += f" · fault {r.fault}"
    body = Group(
        Text(r.completion or "(empty completion)"),
        Text(f"critique: {r.critique}", style="italic"),
        Text(f"{r.completion_tokens} tokens, finish {r.finish_reason}", style="dim"),
    )
    style = "dim" if r.reward is None else "green" if passes(r.reward) else ("yellow" if r.reward > 0 else "red")
    return Panel(body, title=title, title_align="left", border_style=style)


def render_episode(d: EpisodeDetail) -> Group:
    """The episode as rich renderables (one scrollable column)."""
    parts: list = [
        Panel(
            Group(Text(d.question), Text(f"reference answer: {d.answer}", style="bold")),
            title=f"task {d.task_key} · family {d.family} · round {d.round}",
            title_align="left",
        )
    ]
    unguided = [r for r in d.rollouts if not r.guided]
    guided = [r for r in d.rollouts if r.guided]
    rewards = fmt_rewards([r.reward for r in unguided])
    parts.append(Text(f"Group of {len(unguided)} rollouts — rewards {rewards or '-'}", style="bold"))
    parts += [rollout_panel(r) for r in unguided]
    if d.hint is not None:
        mode, text = d.hint
        parts.append(Panel(Text(text), title=f"hint ({mode})", title_align="left", border_style="magenta"))
    if guided:
        parts.append(Text(f"Guided rollouts ({len(guided)}) — rewards {fmt_rewards([r.reward for r in guided])}", style="bold"))
        parts += [rollout_panel(r) for r in guided]
    lessons = Table(title="lessons in context", title_justify="left", expand=True)
    lessons.add_column("id", no_wrap=True)
    lessons.add_column("status", no_wrap=True)
    lessons.add_column("text (current)")
    for lid, text, status in d.lessons_in_context:
        lessons.add_row(lid, status or "gone", Text(text or ""))
    if not d.lessons_in_context:
        lessons.add_row("-", "", "no lessons were in context")
    parts.append(lessons)
    ops = Table(title="curation ops of this episode", title_justify="left", expand=True)
    for col in ("op", "lesson", "before", "after", "why"):
        ops.add_column(col)
    for ev in d.events:
        lesson = ev.lesson_id + (f" → {ev.target}" if ev.target else "")
        ops.add_row(ev.op, lesson, Text(ev.before or ""), Text(ev.after or ""), Text(ev.rationale))
    if not d.events:
        ops.add_row("-", "", "", "", "no curation op")
    parts.append(ops)
    for line in d.curation_rejected:
        parts.append(Text(f"curator rejected: {line}", style="yellow"))
    for line in d.hint_rejected:
        parts.append(Text(f"hint refused: {line}", style="yellow"))
    if d.reflection_error:
        parts.append(Text(f"reflection failed: {d.reflection_error}", style="red"))
    return Group(*parts)


class EpisodeScreen(DataScreen):
    """One episode, read-only; ``escape`` goes back to its session."""

    BINDINGS = [("escape", "back", "Back")]

    def __init__(self, episode_id: int) -> None:
        super().__init__()
        self.episode_id = episode_id

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Episode {self.episode_id}", classes="title", id="episode-title")
        with VerticalScroll(id="episode-scroll"):
            yield Static("loading…", id="episode-body")
        yield Footer()

    def fetch(self) -> EpisodeDetail | None:
        return self.data.episode(self.episode_id)

    def show(self, d: EpisodeDetail | None) -> None:
        body = self.query_one("#episode-body", Static)
        if d is None:
            body.update(f"episode {self.episode_id} is no longer in the database")
            return
        self.sub_title = f"{d.session} / {d.episode_key}"
        self.query_one("#episode-title", Static).update(f"Episode {d.episode_key} of session {d.session}")
        body.update(render_episode(d))

    def action_back(self) -> None:
        self.app.pop_screen()
