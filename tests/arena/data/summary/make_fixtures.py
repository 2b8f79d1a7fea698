"""Write ``<scenario>.json``: what `arena run --json` prints for each scripted session of ``summary_scripts``.

The committed files were written by the code BEFORE the summary became a typed model (commit
6b7546e, where ``build_summary`` returned a dict and the CLI printed ``json.dumps(summary)``);
``tests/arena/test_summary_json.py`` runs the same scenarios with today's code and checks that its
stdout is the same, byte for byte. Run from the repository root (no model is loaded; ~20 s)::

    PYTHONPATH=.:tests:tests/arena python tests/arena/data/summary/make_fixtures.py

Each scenario runs in a fresh temporary folder; ``--out DIR`` writes the files elsewhere.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from summary_scripts import SCENARIOS, run_scenario

HERE = Path(__file__).resolve().parent


def main() -> None:
    """Run every scenario and write its stdout to ``DIR/<scenario>.json`` (DIR: ``--out``, default this folder)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    out = ap.parse_args().out
    for name in SCENARIOS:
        with tempfile.TemporaryDirectory() as tmp:
            (out / f"{name}.json").write_text(run_scenario(name, Path(tmp)))
        print(f"wrote {out / f'{name}.json'}")


if __name__ == "__main__":
    main()
