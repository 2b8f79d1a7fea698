"""The base of the library's repositories: an open :class:`lessons.db.engine.Database` plus curation settings.

Each repository of :mod:`lessons.library` (sessions, episodes, lessons, search,
evaluations) subclasses :class:`Repository` and adds the public methods of its aggregate,
each opening its own short transaction through :meth:`~lessons.db.engine.Database.read` /
:meth:`~lessons.db.engine.Database.write`. :class:`lessons.library.store.LessonStore`
combines them into the one object the app opens and passes around.
"""

from __future__ import annotations

import os

from lessons.db.engine import Database
from lessons.library.curation import CurationPolicy, TokenCounter


class Repository(Database):
    """An open library database with the curation settings every op applied through it uses.

    Args:
        url: an SQLAlchemy URL or a bare SQLite file path (see :class:`lessons.db.engine.Database`).

    Attributes:
        curation_policy: thresholds of every op applied through this object
            (:meth:`lessons.library.episodes.EpisodeRepository.record_episode`,
            :meth:`lessons.library.lessons.LessonRepository.curate`).
        count_tokens: the solver's tokenizer count; None: ~4 characters per token.

    Raises:
        StoreError: the database cannot be opened or migrated.
    """

    def __init__(self, url: str | os.PathLike[str]) -> None:
        self.curation_policy: CurationPolicy = CurationPolicy()
        self.count_tokens: TokenCounter | None = None
        super().__init__(url)
