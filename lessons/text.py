"""Small text helpers shared by the roles and the library audits."""

from __future__ import annotations

import re


def contains_token(text: str, token: str) -> bool:
    """Whether ``token`` occurs in ``text`` as a whole word or number (not inside 157 or 57.5).

    Used to keep a reference answer out of lessons, hints and critiques, and to find held-out
    answers in stored text. A sentence-ending period after the token still counts as a match.
    """
    return re.search(rf"(?<![\w.]){re.escape(token)}(?!\w|\.\d)", text) is not None
