"""Read models of the TUI (``arena tui``) over :class:`lessons.library.store.LessonStore`.

The screens read through these, never SQL of their own: :class:`ArenaData` bundles the read
models of each screen — :mod:`.sessions` (sessions, episodes, learning curve, one episode),
:mod:`.lessons` (pages, search, a lesson's history and lineage) and :mod:`.adapters` — with
change detection and the TUI's curation actions (:mod:`.data`). The records they return are
in :mod:`.views`. Nothing here imports Textual, so the queries are tested on their own.
"""

from __future__ import annotations

from lessons.db.schema import LESSON_STATUSES
from lessons.library.read_models.adapters import AdapterReads
from lessons.library.read_models.data import (
    TUI_ORIGIN,
    USER_ERRORS,
    ArenaData,
    DatabaseProblem,
    configure_budget,
    open_store,
)
from lessons.library.read_models.lessons import PAGE_SIZE, SEARCH_LIMIT, LessonReads
from lessons.library.read_models.sessions import SessionReads
from lessons.library.read_models.views import (
    AdapterView,
    EpisodeDetail,
    EpisodeSummary,
    LearningCurve,
    LessonDetail,
    LessonPage,
    LibraryTimeline,
    RolloutView,
    SessionSummary,
)
from lessons.library.store import EventInfo, LessonInfo

__all__ = [
    "LESSON_STATUSES", "PAGE_SIZE", "SEARCH_LIMIT", "TUI_ORIGIN", "USER_ERRORS",
    "AdapterReads", "AdapterView", "ArenaData", "DatabaseProblem", "EpisodeDetail", "EpisodeSummary", "EventInfo",
    "LearningCurve", "LessonDetail", "LibraryTimeline", "LessonInfo", "LessonPage", "LessonReads", "RolloutView", "SessionReads",
    "SessionSummary", "configure_budget", "open_store",
]
