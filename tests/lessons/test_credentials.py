"""CASE-005: the password of any URL is masked, whatever characters it holds (:func:`redact_credentials`).

The URL is parsed (userinfo up to its last ``@``, query parameters by name), not matched by a
character class: the old pattern stopped at a ``/`` and returned ``postgresql://arena:ab/cd@db/x``
unchanged. Expected outputs are written out in full, and the masked database URLs are read back
with SQLAlchemy's ``make_url`` to check that what it would connect with as the password is ``***``.
"""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from lessons.credentials import redact_credentials as light_redact
from lessons.db.engine import redact_credentials


def test_case_005_a_password_with_a_slash_is_masked() -> None:
    """CASE-005, the case's own inputs: ``redact_credentials`` and the ``--db`` form."""
    assert redact_credentials("postgresql://arena:ab/cd@db/x") == "postgresql://arena:***@db/x"
    assert (redact_credentials("--db postgresql://arena:ab/cd@127.0.0.1:5432/x")
            == "--db postgresql://arena:***@127.0.0.1:5432/x")
    assert light_redact is redact_credentials  # one function, re-exported where the database code lives


@pytest.mark.parametrize(
    "url, masked",
    [
        ("postgresql://arena:secret@db:5432/library", "postgresql://arena:***@db:5432/library"),
        ("postgresql+psycopg://arena:ab/cd@127.0.0.1:5432/x", "postgresql+psycopg://arena:***@127.0.0.1:5432/x"),
        ("postgresql+psycopg://arena:p@ss@db/x", "postgresql+psycopg://arena:***@db/x"),
        ("postgresql://arena:a:b:c@db/x", "postgresql://arena:***@db/x"),
        ("postgresql://arena:ab#cd@db/x", "postgresql://arena:***@db/x"),
        ("postgresql://arena:ab?cd=1@db/x", "postgresql://arena:***@db/x"),
        ("postgresql://arena:a%2Fb%40c%3Ad@db/x", "postgresql://arena:***@db/x"),
        ("postgresql://arena:+/=Zm9v/YmFy==@db/x", "postgresql://arena:***@db/x"),  # base64-made
        ("postgresql://arena:x://y@db/x", "postgresql://arena:***@db/x"),
        ("postgresql://:only-a-password@db/x", "postgresql://:***@db/x"),
        ("postgresql://user@server:pw@db/x", "postgresql://user@server:***@db/x"),  # Azure's user@server names
        ("postgresql://arena:two words@db/x", "postgresql://arena:***@db/x"),  # a password holding a space
        ("postgresql://arena:***@db/x", "postgresql://arena:***@db/x"),  # masking twice changes nothing
    ],
)
def test_case_005_database_url_passwords_of_any_characters_are_masked(url: str, masked: str) -> None:
    """CASE-005: "/", "@", ":", "#", "?", percent-escapes and spaces in a database URL's password."""
    assert redact_credentials(url) == masked
    assert make_url(masked).password == "***" and make_url(masked).username == make_url(url).username


def test_case_005_a_percent_encoded_password_is_masked_as_sqlalchemy_reads_it() -> None:
    url = "postgresql+psycopg://arena:a%2Fb%40c%23d@db:5432/x"
    assert make_url(url).password == "a/b@c#d"  # what the driver would be given
    out = redact_credentials(url)
    assert "%2F" not in out and "a/b@c#d" not in out and make_url(out).host == "db" and make_url(out).port == 5432


def test_case_005_a_url_inside_an_error_sentence_is_masked_and_the_sentence_kept() -> None:
    line = ('cannot open database postgresql+psycopg://arena:ab/cd@127.0.0.1:5432/x: connection to server at '
            '"127.0.0.1", port 5432 failed: Connection refused')
    assert redact_credentials(line) == line.replace("ab/cd", "***")
    two = "copy from postgresql://a:p/1@h1/x to postgresql://b:p@2@h2/y, then retry"
    assert redact_credentials(two) == "copy from postgresql://a:***@h1/x to postgresql://b:***@h2/y, then retry"
    quoted = "--endpoint 'http://user:s3/cr@t@127.0.0.1:8000/v1' must have no user"
    assert redact_credentials(quoted) == "--endpoint 'http://user:***@127.0.0.1:8000/v1' must have no user"
    multi = "first line postgresql://arena:ab/cd@db/x\nsecond line with a@b"
    assert redact_credentials(multi) == "first line postgresql://arena:***@db/x\nsecond line with a@b"


def test_case_005_a_password_with_a_space_inside_a_sentence_is_masked() -> None:
    line = "cannot open database postgresql://arena:my pass/word@db:5432/x: refused"
    assert redact_credentials(line) == "cannot open database postgresql://arena:***@db:5432/x: refused"


@pytest.mark.parametrize(
    "url, masked",
    [
        ("http://user:password@host/v1", "http://user:***@host/v1"),
        ("https://user:p@ss/w:rd@api.example.com:8443/v1", "https://user:***@api.example.com:8443/v1"),
        ("http://user:pw@[::1]:8000/v1", "http://user:***@[::1]:8000/v1"),
        ("http://sk-only-a-key@host/v1", "http://sk-only-a-key@host/v1"),  # a user name alone is kept
    ],
)
def test_case_005_endpoint_base_urls_are_masked(url: str, masked: str) -> None:
    assert redact_credentials(url) == masked


@pytest.mark.parametrize(
    "url, masked",
    [
        ("postgresql://arena@db/x?password=s3cret", "postgresql://arena@db/x?password=***"),
        ("postgresql://arena@db/x?sslmode=require&password=a/b@c#d&application_name=arena",
         "postgresql://arena@db/x?sslmode=require&password=***&application_name=arena"),
        ("postgresql://db/x?PassWD=1&pwd=2&sslpassword=3&pass%77ord=4",
         "postgresql://db/x?PassWD=***&pwd=***&sslpassword=***&pass%77ord=***"),
        ("https://host/v1?api_key=k1&apikey=k2&api-key=k3&token=t&access_token=a&key=k&model=m",
         "https://host/v1?api_key=***&apikey=***&api-key=***&token=***&access_token=***&key=***&model=m"),
        ("postgresql://arena:pw?password=x@db/x?password=y", "postgresql://arena:***@db/x?password=***"),
    ],
)
def test_case_005_query_parameters_that_carry_a_secret_are_masked(url: str, masked: str) -> None:
    assert redact_credentials(url) == masked


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no session named 'x' in arena.db; see `arena run --help`",
        "runs/x.db",
        "write to arena@example.com at 10:30, nor is password=x a URL",
        "second line with a@b: kept",
        "sqlite:///runs/arena.db",
        "sqlite:////abs/dir:with/colon@at.db",
        "postgresql+psycopg://arena@127.0.0.1:5432/library",
        "postgresql://db/x?sslmode=require&keywords=a",
        "http://127.0.0.1:8000/v1 returned HTTP 500",
        "http://[::1]:8000/v1",
        "model 'M' not found at http://localhost:11434/v1 (HTTP 404)",
    ],
)
def test_case_005_text_without_a_url_secret_is_unchanged(text: str) -> None:
    assert redact_credentials(text) == text


@pytest.mark.parametrize(
    "text, masked",
    [  # found by a new user's trial: a mistyped scheme made the URL a path, and the error line showed the password
        ("no database at postgresql:/arena:Sekr1t@127.0.0.1/nu32b; run `arena run --db postgresql:/arena:Sekr1t@127.0.0.1/nu32b`",
         "no database at postgresql:/arena:***@127.0.0.1/nu32b; run `arena run --db postgresql:/arena:***@127.0.0.1/nu32b`"),
        ("directory /tmp/x/postgresql:/arena:Sekr1t@127.0.0.1 does not exist",
         "directory /tmp/x/postgresql:/arena:***@127.0.0.1 does not exist"),
        ("no database at postgres//arena:Sekr1t@db/x", "no database at postgres//arena:***@db/x"),
        ("Could not parse SQLAlchemy URL from given URL string: '://arena:Sekr1t@127.0.0.1/nu32b'",
         "Could not parse SQLAlchemy URL from given URL string: '://arena:***@127.0.0.1/nu32b'"),
        ("user:pw@host", "user:***@host"),
        ("arena:p:w/d@h and arena:/pw@h", "arena:***@h and arena:***@h"),
        ("user@server:pw@db", "user@server:***@db"),
        ("postgresql:/arena:***@db/x", "postgresql:/arena:***@db/x"),  # masking twice changes nothing
        ("no database at postgres//h/d?password=Sekr1t", "no database at postgres//h/d?password=***"),  # a second trial
        ("postgresql:/u@h/d?password=Sekr1t&sslmode=require", "postgresql:***@h/d?password=***&sslmode=require"),
    ],
)
def test_case_005_a_mistyped_scheme_does_not_show_the_password(text: str, masked: str) -> None:
    """CASE-005's kind without a ``scheme://``: a ``user:password@host`` word is masked wherever it appears."""
    assert redact_credentials(text) == masked
    assert "Sekr1t" not in redact_credentials(text) and redact_credentials(masked) == masked


def test_case_005_a_password_with_a_space_in_a_mistyped_url_is_masked_from_the_command_line() -> None:
    """A second new user's trial: ``--db 'postgresql:/u:Pw 1x@h/d'`` — word by word, ``postgresql:/u:Pw`` holds no ``@``.

    The command line's values are read whole (:func:`command_line_secrets`), and the CLI masks what they hold in
    every error line (:func:`redact_command_line`); secrets without whitespace are left to ``redact_credentials``,
    so no short password masks ordinary words.
    """
    from lessons.credentials import command_line_secrets, redact_command_line

    args = ["lessons", "list", "--db", "postgresql:/u:Sekr 1t@h/d"]
    assert command_line_secrets(args) == ["Sekr 1t"]
    assert command_line_secrets(["--db=postgresql://u:my  pw@h/d"]) == ["my  pw", "my pw"]
    line = "no database at postgresql:/u:Sekr 1t@h/d; directory /tmp/postgresql:/u:Sekr 1t@h does not exist"
    assert redact_command_line(line, args) == ("no database at postgresql:/u:***@h/d; "
                                               "directory /tmp/postgresql:/u:***@h does not exist")
    assert command_line_secrets(["--db", "postgresql://a:b@h/d", "runs/x.db", "a@b"]) == []
    assert redact_command_line("database b missing", ["--db", "postgresql://a:b@h/d"]) == "database b missing"
