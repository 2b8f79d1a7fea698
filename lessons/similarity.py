"""Near-duplicate detection for lessons: normalised content-term similarity.

Each proposed lesson is compared with the live lessons of its scope *before* it is added,
so the library does not fill with restatements (agentic-context-engine #135 judged each
proposal alone). Text is normalised to content terms: lower-cased words, English stop
words dropped, Snowball (Porter 2) stems (``snowballstemmer``). Two texts are compared on
unigrams and on bigrams of those terms (bigrams keep "add left to right" apart from
"subtract right to left"); each is scored by the mean of the Dice coefficient and the
overlap coefficient (|A∩B| / min(|A|, |B|), so a lesson restated with extra words still
matches). No embeddings: this needs no model and is deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import snowballstemmer

# Function words, and words every lesson uses ("always", "make sure") that carry no content.
STOP_WORDS = frozenset(
    """a an the and or but if then than so of to in on at by for with from into onto as is are be
    been being was were it its this that these those there their your you yours we our us i me my
    do does did doing done can could should would will shall may might must not no nor too very
    just only also each every any all some both either neither about before after when while
    always never ever make sure please try remember keep use using get gets
    """.split()
)

_WORD = re.compile(r"[a-z0-9]+")
_stemmer = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65536)
def content_terms(text: str) -> tuple[str, ...]:
    """The stemmed content words of ``text``, in order (stop words dropped).

    >>> content_terms("Always put the final answers inside <answer> tags.")
    ('put', 'final', 'answer', 'insid', 'answer', 'tag')
    """
    words = [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]
    return tuple(_stemmer.stemWords(words))


def _score(a: set, b: set) -> float:
    """Mean of Dice and overlap coefficients of two sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return 0.5 * (2 * inter / (len(a) + len(b)) + inter / min(len(a), len(b)))


def similarity(a: str, b: str) -> float:
    """Similarity of two lesson texts in [0, 1]: 1 for the same content terms in the same order.

    The mean of the unigram and the bigram scores of :func:`content_terms` (see the module
    docstring). Texts with one content term are compared on unigrams only.
    """
    ta, tb = content_terms(a), content_terms(b)
    uni = _score(set(ta), set(tb))
    if len(ta) < 2 or len(tb) < 2:
        return uni
    bi = _score(set(zip(ta, ta[1:])), set(zip(tb, tb[1:])))
    return 0.5 * (uni + bi)


def most_similar(text: str, candidates: Iterable[tuple[str, str]]) -> tuple[str | None, float]:
    """The candidate ``(key, text)`` most similar to ``text``, and the similarity (``(None, 0.0)`` if none)."""
    best_key, best = None, 0.0
    for key, other in candidates:
        s = similarity(text, other)
        if s > best:
            best_key, best = key, s
    return best_key, best
