"""`arena` command line (typer): `arena run` runs a self-play session on the embedded model by default.

One module per command group: :mod:`arena.cli.run` (``arena run``), :mod:`arena.cli.tui`
(``arena tui``), :mod:`arena.cli.distill` (``arena distill``, ``arena eval``),
:mod:`arena.cli.lessons` (``arena lessons ...``), :mod:`arena.cli.critic` (``arena critic ...``), :mod:`arena.cli.report` (``arena report``), :mod:`arena.cli.export` (``arena export ...``), :mod:`arena.cli.adapters` (``arena adapters import``),
:mod:`arena.cli.bench` (``arena bench ...``); :mod:`arena.cli.support` holds what they share.
This module builds the root ``app``, registers each group once and defines :func:`main`.

Errors a user can cause (unknown family, bad override, unreadable task file, unwritable
database, unreachable endpoint, invalid flag combination) end in ONE line on stderr and exit
code 2, never a traceback, and are detected before anything is written.
"""

from __future__ import annotations

import signal
import sys

import typer

from arena.cli import adapters, bench, critic, distill, export, lessons, report, run, tui
from arena.cli.support import EXIT_INTERRUPTED, EXIT_STORE_FAULT, EXIT_USER_ERROR, exit_now

app = typer.Typer(
    name="arena",
    help="Lesson Arena: solver, critic and teacher agents that learn lessons from self-play.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Lesson Arena command line."""


# `arena --help` lists commands, then groups, each in the order registered here.
app.command()(run.run)
app.command()(tui.tui)
app.command()(distill.distill)
app.command("eval")(distill.eval_cmd)
app.command()(report.report)
app.add_typer(lessons.lessons_app, name="lessons")
app.add_typer(critic.critic_app, name="critic")
app.add_typer(bench.bench_app, name="bench")
app.add_typer(export.export_app, name="export")
app.add_typer(adapters.adapters_app, name="adapters")


def accept_interrupts() -> None:
    """Let Ctrl-C / ``kill -INT`` stop ``arena`` even when its parent ignored or blocked SIGINT.

    An ignored signal and the signal mask are inherited across ``exec``, and Python keeps an
    inherited ``SIG_IGN`` instead of installing its ``KeyboardInterrupt`` handler: an ``arena
    run`` started by a shell script's ``&`` (POSIX shells ignore SIGINT in background jobs), or by
    a process that ignored it, would otherwise run on through every Ctrl-C. Found as a test that
    passed alone and failed after the suite (its child was spawned by a process ignoring SIGINT).
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _command_path(err: typer.TyperException, argv: list[str]) -> str:
    """The command a usage error is about, e.g. ``arena export rollouts`` (``arena`` for an unknown command).

    Click names it in ``err.ctx`` for most errors; an option's missing value is raised without a
    context, so then the leading words of ``argv`` that name nested commands are followed instead.
    """
    ctx = getattr(err, "ctx", None)
    if ctx is not None:
        return ctx.command_path
    words, group = ["arena"], typer.main.get_command(app)
    for word in argv:
        sub = group.commands.get(word) if hasattr(group, "commands") else None
        if sub is None:
            break
        words.append(word)
        group = sub
    return " ".join(words)


def main() -> None:
    """Console-script entry point: usage errors are one line on stderr too (exit 2)."""
    accept_interrupts()
    try:
        rc = app(standalone_mode=False, prog_name="arena")  # returns the exit code of typer.Exit instead of exiting
        if rc == EXIT_INTERRUPTED:
            exit_now(EXIT_INTERRUPTED)
        sys.exit(rc if isinstance(rc, int) else 0)
    except typer.Exit as e:
        if e.exit_code == EXIT_INTERRUPTED:
            exit_now(EXIT_INTERRUPTED)
        sys.exit(e.exit_code)
    except typer.Abort:
        exit_now(EXIT_INTERRUPTED)
    except typer.TyperException as e:  # usage errors: bad or missing option values, unknown options
        text = e.format_message() if hasattr(e, "format_message") else str(e)
        cmd = f" (see `{_command_path(e, sys.argv[1:])} --help`)"
        if text.strip():  # no_args_is_help has printed the help already
            from lessons.credentials import redact_command_line  # an option value may be a URL with a password

            print(redact_command_line(f"arena: error: {' '.join(text.split())}{cmd}", sys.argv[1:]), file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    except Exception as e:  # a database fault no command caught (a damaged file read by `arena report`): one line
        from lessons.db.faults import classify, is_damaged_file

        fault = classify(e)
        if fault is None:
            raise
        damaged = is_damaged_file(fault)
        print(f"arena: error: {fault}" + ("; the database file is damaged: restore it from a copy" if damaged else ""),
              file=sys.stderr)
        sys.exit(EXIT_USER_ERROR if damaged else EXIT_STORE_FAULT)

