"""Read model of the adapters screen: every adapter of ``arena distill`` with its lesson set.

Adapters come from :meth:`lessons.library.adapters.AdapterStore.list_adapters`; only the
current status of their lessons is read here.
"""

from __future__ import annotations

from sqlalchemy import select

from lessons.db.schema import LessonRow
from lessons.library.adapters import AdapterInfo, AdapterStore
from lessons.library.read_models.views import AdapterView
from lessons.library.store import LessonStore


class AdapterReads:
    """The adapters table and its detail pane.

    Args:
        store: an open store (the caller closes it).
    """

    def __init__(self, store: LessonStore) -> None:
        self.store = store

    def adapters(self) -> list[AdapterView]:
        """Every adapter, oldest first, with its lessons: ``(lesson id, relation, current status)``.

        The lessons are ordered by relation (``distilled`` before ``in_context``), then by
        lesson (oldest first).
        """
        infos = AdapterStore(self.store).list_adapters()
        wanted = sorted({lid for a in infos for lid in (*a.in_context, *a.distilled)})
        with self.store.read() as s:
            lessons = {
                lid: (row_id, status)
                for lid, row_id, status in s.execute(
                    select(LessonRow.lesson_id, LessonRow.id, LessonRow.status).where(LessonRow.lesson_id.in_(wanted))
                )
            } if wanted else {}
        return [_view(a, lessons) for a in infos]


def _view(a: AdapterInfo, lessons: dict[str, tuple[int, str]]) -> AdapterView:
    edges = [(lid, "distilled") for lid in a.distilled] + [(lid, "in_context") for lid in a.in_context]
    edges.sort(key=lambda e: (e[1], lessons[e[0]][0]))
    return AdapterView(
        adapter_id=a.adapter_id,
        path=a.path,
        objective=a.objective,
        created_at=f"{a.created_at:%Y-%m-%d %H:%M}",
        config=a.config,
        metrics=a.metrics,
        evaluation=a.eval,
        lessons=[(lid, rel, lessons[lid][1]) for lid, rel in edges],
        parent_adapter=a.parent_adapter,
        cycle=a.cycle,
    )
