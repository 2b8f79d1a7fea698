"""Write ``<scenario>.json`` and ``<scenario>.table.txt``: what `arena run --json` and `arena run` print for
each scripted session of ``summary_scripts``.

The committed files were written by the code BEFORE the summary became a typed model (commit
6b7546e, where ``build_summary`` returned a dict and the CLI printed ``json.dumps(summary)``);
``tests/arena/test_summary_json.py`` runs the same scenarios with today's code and checks that its
stdout is the same, byte for byte (the tables were written by that code too, from the same scenarios).
They were written as the old code prints them, from a checkout of that commit with today's scenarios
(no model is loaded; ~40 s)::

    git worktree add --detach /tmp/old-main 6b7546e
    cp tests/arena/summary_scripts.py /tmp/old-main/tests/arena/
    mkdir -p /tmp/old-main/tests/arena/data/summary
    cp tests/arena/data/summary/make_fixtures.py /tmp/old-main/tests/arena/data/summary/
    cd /tmp/old-main && PYTHONPATH=.:tests:tests/arena python tests/arena/data/summary/make_fixtures.py --out DIR
    git worktree remove --force /tmp/old-main

Each scenario runs in a fresh temporary folder; without ``--out`` the files go next to this script.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from summary_scripts import SCENARIOS, run_scenario

HERE = Path(__file__).resolve().parent


def main() -> None:
    """Run every scenario twice (with ``--json``, without) and write its stdout to ``DIR/<scenario>.json`` and
    ``DIR/<scenario>.table.txt`` (DIR: ``--out``, default this folder)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    out = ap.parse_args().out
    for name in SCENARIOS:
        for json_out, suffix in ((True, ".json"), (False, ".table.txt")):
            with tempfile.TemporaryDirectory() as tmp:
                (out / f"{name}{suffix}").write_text(run_scenario(name, Path(tmp), json_out))
            print(f"wrote {out / f'{name}{suffix}'}")


if __name__ == "__main__":
    main()
