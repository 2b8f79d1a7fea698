"""The registries are the only place objective and backend names are compared (issue 33, tests).

A new objective is one module and one line of arena/objectives.py, a new backend one class and one entry of
agents/backends/registry.py; that holds only while no other module branches on a name. Every comparison of
arena/, agents/, lessons/ and tui/ is read from the syntax tree: ``x == "grpo"``, ``x != "sft"``,
``x in ("distill", "sft")``, ``spec.startswith("openai:")`` with a registered objective name, a backend kind's
name or its ``kind:`` prefix is an offender unless it is in the registry that owns the name. The scanner also
runs on planted sources, so a rule that silently finds nothing fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agents.backends.registry import BACKENDS
from arena.objectives import objective_names

REPO = Path(__file__).resolve().parents[1]
OURS = ("arena", "agents", "lessons", "tui")
OWNERS = {"arena/objectives.py", "agents/backends/registry.py"}  # where the names are listed


def registered_names() -> set[str]:
    """Objective names, backend kind names and their ``kind:`` prefixes."""
    names = set(objective_names())
    for kind in BACKENDS:
        names.add(kind.name)
        names.add(f"{kind.name}:")
    return names


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a comparison operand: itself, or the elements of a tuple, list or set literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def name_comparisons(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of every comparison of a value with a registered name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            for operand in (node.left, *node.comparators):
                found += [(node.lineno, s) for s in _strings(operand) if s in names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "removeprefix") and node.args):
            found += [(node.lineno, s) for s in _strings(node.args[0]) if s in names]
    return found


def test_no_module_compares_a_registered_name_outside_its_registry():
    names = registered_names()
    offenders = []
    for pkg in OURS:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if "__pycache__" in path.parts or rel in OWNERS:
                continue
            offenders += [f"{rel}:{line}: {name!r}" for line, name in name_comparisons(path.read_text(), names)]
    assert offenders == [], "compare with the registry's fields instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(("source", "name"), [
    ("if objective == 'grpo':\n    pass\n", "grpo"),
    ("ok = cfg.sleep != 'opcd'\n", "opcd"),
    ("if name in ('distill', 'other'):\n    pass\n", "distill"),
    ("if spec.startswith('openai:'):\n    pass\n", "openai:"),
    ("x = 'qwen2.5-coder-1.5b' == teacher\n", "qwen2.5-coder-1.5b"),
])
def test_a_planted_comparison_is_found(source, name):
    assert [n for _, n in name_comparisons(source, registered_names())] == [name]


def test_listing_or_passing_a_name_is_not_a_comparison():
    source = "CONDITIONS = ('sft', 'distill')\nrun(objective='grpo')\nx = {'opcd': 1}['opcd']\n"
    assert name_comparisons(source, registered_names()) == []
