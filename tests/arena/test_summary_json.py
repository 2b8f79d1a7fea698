"""`arena run --json` (and the table of `arena run`) print what they printed before the summary became a typed model.

The expected stdout of each scripted session (``summary_scripts``: fake policies, a fixed clock)
was written by the code before the change (``data/summary/make_fixtures.py`` says how); the test
runs the same session through the CLI today and compares the text byte for byte, so a renamed or
reordered key, a changed rounding, a ``null`` that became absent (or the reverse), a changed
separator or a changed row of the table fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from summary_scripts import SCENARIOS, run_scenario

FIXTURES = Path(__file__).parent / "data" / "summary"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_run_json_prints_the_pinned_summary(scenario, tmp_path):
    expected = (FIXTURES / f"{scenario}.json").read_text()
    got = run_scenario(scenario, tmp_path)
    assert json.loads(got) == json.loads(expected)  # a readable diff of the values first
    assert got == expected  # then the exact text: key order, separators, number formatting


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_run_prints_the_pinned_table(scenario, tmp_path):
    assert run_scenario(scenario, tmp_path, json_out=False) == (FIXTURES / f"{scenario}.table.txt").read_text()
