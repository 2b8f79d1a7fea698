"""Masking the secrets of URLs inside any text: database URLs, endpoint base URLs, error lines.

Standard library only, so the light modules (the OpenAI backend, the TUI notices) can use it
without importing SQLAlchemy; :mod:`lessons.db.engine` re-exports :func:`redact_credentials`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

# Where a URL starts inside text: a scheme (RFC 3986 §3.1, SQLAlchemy's ``dialect+driver`` names
# included) and "://", not preceded by a character a scheme could hold.
_URL_START = re.compile(r"(?<![\w+.-])[A-Za-z][\w+.-]*://")
_HOST_PORT_THEN_PATH = re.compile(r"\d*[/?#]")  # what follows the ':' of ``host:port/…`` (no userinfo)
_WHITESPACE = re.compile(r"\s")
# Query parameters whose value is a secret, compared lower-cased without "_" and "-": libpq's
# ``password`` / ``sslpassword`` and the usual names of keys and tokens.
_SECRET_PARAMS = frozenset({"password", "passwd", "pass", "pwd", "secret", "key", "apikey", "token", "auth"})
_SECRET_PARAM_SUFFIXES = ("password", "passwd", "secret", "token", "apikey")
MASK = "***"  # what a password or secret query value is replaced by


def redact_credentials(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``, whatever characters it holds.

    Applied to every error line of the CLI, to stored session settings, export sidecars, the
    TUI and endpoint messages, so a database or endpoint password never reaches a terminal, a
    log or the shared database. Each URL (a ``scheme://`` up to the next whitespace) is parsed
    as RFC 3986 §3.2.1 reads an authority, not matched by a character class:

    - userinfo: the password runs from the first ``:`` after ``//`` to the *last* ``@`` of the
      URL (``urllib.parse`` splits the userinfo at the last ``@``, SQLAlchemy's ``make_url``
      takes the password from the first ``:``), so a password holding ``/``, ``@``, ``:``,
      ``#``, ``?`` or percent-escapes is masked whole; the username is kept. A ``user:pass``
      with no ``@`` before the whitespace that does not read as ``host:port/…`` (a password
      holding a space) runs on to the last ``@`` of the line. Where the URL's path or query holds an ``@`` as well, more than the
      password is masked: never less.
    - query: the value of every ``password``, ``passwd``, ``pwd``, ``sslpassword``, ``api_key``,
      ``apikey``, ``token``, ``key``, ``secret`` … parameter (names compared percent-decoded and
      case-blind), up to the next ``&``.

    - a word without a scheme that reads as ``user:password@host`` (a mistyped scheme:
      ``postgresql:/arena:pw@db/x``) has its password masked as well (:func:`_redact_bare`).

    Text without a URL comes back unchanged, and masking twice changes nothing.

    Args:
        text: any text (an error line, a database URL or path, an endpoint base URL).

    Returns:
        ``text`` with the secrets of its URLs replaced by ``***``.
    """
    text = str(text)
    out: list[str] = []
    pos = 0
    while (m := _URL_START.search(text, pos)) is not None:
        masked, end = _redact_url(text, m.end())
        out += [_redact_bare(text[pos : m.start()]), text[m.start() : m.end()], masked]
        pos = end
    out.append(_redact_bare(text[pos:]))
    return "".join(out)


_TOKEN = re.compile(r"\S+")


def _redact_bare(text: str) -> str:
    """``text`` (no ``scheme://`` in it) with the password of every ``user:password@host`` word masked.

    A URL whose scheme was mistyped (``postgresql:/arena:pw@db/x``, ``postgres//arena:pw@db/x``,
    ``://arena:pw@db/x``) reaches messages as a path or an unparsable string, and its password
    must not show there either (:func:`_userinfo_span` says where it is); the values of secret
    query parameters in such a word are masked as in a URL.
    """
    return _TOKEN.sub(lambda m: _redact_word(m.group(0)), text) if "@" in text or "?" in text else text


def _userinfo_span(word: str) -> tuple[int, int] | None:
    """Where the password of a scheme-less ``user:password@host`` word lies, or None.

    In a word holding an ``@`` after a ``:``, the password runs from the first ``:`` not followed by
    ``/`` (a mistyped scheme's ``:/`` is skipped; the first ``:`` when every one is) to the word's last ``@``.
    """
    at = word.rfind("@")
    colons = [i for i, c in enumerate(word[:at]) if c == ":"] if at > 0 else []
    if not colons:
        return None
    return next((i for i in colons if word[i + 1 : i + 2] != "/"), colons[0]) + 1, at


def _redact_word(word: str) -> str:
    """One word of :func:`_redact_bare`: its ``user:password@`` password and secret query values masked."""
    span, host_at = _userinfo_span(word), 0
    if span is not None:
        word, host_at = f"{word[: span[0]]}{MASK}{word[span[1]:]}", span[0] + len(MASK)
    return _redact_query(word, host_at) if "?" in word else word


def command_line_secrets(args: list[str]) -> list[str]:
    """The passwords and secret query values that hold whitespace in command-line arguments, each read as one word.

    :func:`redact_credentials` reads text word by word, so a password holding whitespace in a URL
    whose scheme was mistyped (``--db 'postgresql:/u:my pw@h/d'``) is not found in a message that
    quotes it. An argument is one value whatever it holds: read as one word (:func:`_userinfo_span`,
    :func:`_secret_query_values`) it gives the whole secret, and the CLI masks every occurrence of
    it, and of its whitespace-collapsed form, in its error lines. Secrets without whitespace are
    left to :func:`redact_credentials`, which finds them in any text: masking a short one
    everywhere would mask ordinary words too.

    Args:
        args: the command line (``sys.argv[1:]``); ``--flag=value`` is read as its value.

    Returns:
        The secrets, longest first, each also whitespace-collapsed.
    """
    found: set[str] = set()
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        span = _userinfo_span(value)
        if span is not None:
            found.add(value[span[0] : span[1]])
        found.update(_secret_query_values(value, span[1] if span is not None else 0))
    out = {x for s in found if len(s.split()) > 1 for x in (s, " ".join(s.split()))}
    return sorted(out, key=len, reverse=True)


def redact_command_line(text: str, args: list[str]) -> str:
    """``text`` with :func:`redact_credentials` applied and every :func:`command_line_secrets` of ``args`` masked."""
    text = redact_credentials(text)
    for secret in command_line_secrets(args):
        text = text.replace(secret, MASK)
    return text


def _token_end(text: str, start: int) -> int:
    """The index of the first whitespace character at or after ``start`` (``len(text)`` if none)."""
    m = _WHITESPACE.search(text, start)
    return len(text) if m is None else m.start()


def _redact_url(text: str, start: int) -> tuple[str, int]:
    """The URL of ``text`` whose authority begins at ``start`` (just after ``//``), masked, and where it ends."""
    end = _token_end(text, start)
    rest = text[start:end]
    colon = rest.find(":")
    host_at = 0  # where the host begins in ``rest``
    # A userinfo's user name holds no "/" (it would end the authority) and no "[" (an IPv6 host).
    if colon >= 0 and not any(c in rest[:colon] for c in "/[]"):
        at = rest.rfind("@")
        if at < colon and not _HOST_PORT_THEN_PATH.match(rest, colon + 1):
            line_end = text.find("\n", end)
            far_at = text.rfind("@", end, len(text) if line_end < 0 else line_end)
            if far_at >= 0:  # a password with whitespace in it: its "@" lies further on
                end = _token_end(text, far_at)
                rest = text[start:end]
                at = rest.rfind("@")
        if at > colon:
            rest = f"{rest[: colon + 1]}{MASK}{rest[at:]}"
            host_at = colon + 1 + len(MASK) + 1
    return _redact_query(rest, host_at), end


def _redact_query(rest: str, host_at: int) -> str:
    """``rest`` (a URL after ``//``) with the values of its secret query parameters masked."""
    q = rest.find("?", host_at)
    if q < 0:
        return rest
    params = []
    for param in rest[q + 1 :].split("&"):
        name, eq, _ = param.partition("=")
        params.append(f"{name}={MASK}" if eq and _is_secret_param(name) else param)
    return f"{rest[: q + 1]}{'&'.join(params)}"


def _secret_query_values(rest: str, host_at: int) -> list[str]:
    """The values :func:`_redact_query` masks in ``rest``, as they are written there."""
    q = rest.find("?", host_at)
    if q < 0:
        return []
    pairs = (param.partition("=") for param in rest[q + 1 :].split("&"))
    return [value for name, eq, value in pairs if eq and value and _is_secret_param(name)]


def _is_secret_param(name: str) -> bool:
    """Whether a query parameter called ``name`` (percent-encoded as in the URL) carries a secret."""
    key = unquote_plus(name).lower().replace("_", "").replace("-", "")
    return key in _SECRET_PARAMS or key.endswith(_SECRET_PARAM_SUFFIXES)
