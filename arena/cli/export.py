"""`arena export ...`: a session's rollouts for other engines (TRL, verl): :mod:`arena.export`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from arena.cli.support import fail, open_existing, quiet_libraries

export_app = typer.Typer(help="Export a session's data for other engines (TRL, verl).", no_args_is_help=True)


@export_app.command("rollouts")
def export_rollouts_cmd(
    out: Annotated[Path, typer.Argument(help="Output directory: train.parquet and arena_export.json are written there.")],
    session: Annotated[str, typer.Option(help="The session whose train rollouts to export.")],
    fmt: Annotated[str, typer.Option("--format", help="hf (TRL's GRPOTrainer columns) or verl (verl's RL data set).")] = "hf",
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    json_out: Annotated[bool, typer.Option("--json", help="Print what was written as one JSON object.")] = False,
) -> None:
    """The session's eligible train rollouts (never ungraded or flagged) as a parquet data set, with a sidecar.

    Score them in TRL with `arena.rewards.trl_reward`, in verl with `arena.rewards.compute_score`.
    Exit code 2 on bad input (unknown session or format, nothing to export, an export already in OUT).
    """
    quiet_libraries()
    from arena.export import ExportError, export_rollouts
    from lessons.library.store import StoreError

    try:
        with open_existing(db) as store:
            info = export_rollouts(store, db, session, fmt, out)
    except (ExportError, StoreError) as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps({"path": str(info.path), "sidecar": str(info.sidecar), "rows": info.rows, "groups": info.groups,
                          "guided": info.guided}))
    else:
        print(f"wrote {info.rows} rollouts ({info.groups} groups, {info.guided} guided) to {info.path}")
