"""The package layering of the redesign (issue 13), checked on the import statements of every module.

Every ``import x`` and ``from x import y`` of arena/, agents/, lessons/ and tui/ counts, at module
level and inside functions (a lazy import is still a dependency), relative imports resolved. Rules:

- ``packages``: ``lessons`` imports nothing of ours (arena, agents, tui) and none of torch, rich, peft,
  transformers, textual (nor textual_plotext); ``agents`` imports only lessons and agents; ``tui``
  imports only lessons and tui; ``arena`` may import agents and lessons, and tui only from the
  ``arena.cli`` package.
- ``arena-order``: inside arena the pipeline runs tasks → rewards (arena/rewards.py) → episode → evaluation
  (arena/evaluation.py) → distill → session → export (arena/export.py) → report → bench → cli; a module of
  one stage imports only the same or earlier stages,
  plus ``arena.config``, ``arena.stats`` and ``arena.objectives`` (the objective registry: names and
  specs, no training code); those three (and ``arena/__init__.py``) import no arena module but each other, and a module outside every stage is an offender until it is placed in the order.
- ``private-names``: no ``from <our module> import _name`` across modules (dunders excepted), no
  ``import`` of a private module of another package.
- ``orm-rows``: ``lessons.db.schema`` (the ORM row classes) is imported only by modules under lessons/,
  and no module outside lessons/ imports a row class (``…Row`` of the schema) from anywhere.

Each rule is one test that lists every offender as ``path: imported module``. The checker is also
run on a small synthetic tree with one planted violation per rule, so a rule that silently finds
nothing fails too.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("arena", "agents", "lessons", "tui")
HEAVY_FOR_LESSONS = ("torch", "rich", "peft", "transformers", "textual", "textual_plotext")
ALLOWED_OURS = {"lessons": {"lessons"}, "agents": {"agents", "lessons"}, "tui": {"tui", "lessons"},
                "arena": {"arena", "agents", "lessons"}}
ARENA_STAGES = ("tasks", "rewards", "episode", "evaluation", "distill", "session", "export", "report", "bench", "cli")
ARENA_BASE = ("config", "stats", "objectives")  # importable from every stage; they import no other arena module
SCHEMA = "lessons.db.schema"


@dataclass(frozen=True)
class Import:
    """One imported module (or one name of a ``from`` import) of one module of ours."""

    path: str  # the importing file, relative to the root ("arena/cli/__init__.py")
    module: str  # the importing module ("arena.cli")
    target: str  # the imported module, absolute ("arena.episode.graph")
    name: str | None  # ``from target import name``; None for ``import target`` / a submodule
    line: int


def module_name(rel: Path) -> str:
    """``arena/cli/__init__.py`` → ``arena.cli``; ``arena/stats.py`` → ``arena.stats``."""
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module of a relative ``from`` import (PEP 328)."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, target] if target else base)


def collect_imports(root: Path, packages: tuple[str, ...] = OURS) -> list[Import]:
    """Every import of every module under ``root/<package>/`` (all depths), in file order.

    A ``from pkg import name`` where ``pkg.name`` is a module of ours is recorded as an import of that
    module (name None); otherwise as an import of ``pkg`` with ``name``.
    """
    files = sorted(p for pkg in packages for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts)
    modules = {module_name(p.relative_to(root)) for p in files}
    found: list[Import] = []
    for p in files:
        rel = p.relative_to(root)
        mod = module_name(rel)
        tree = ast.parse(p.read_text(), filename=str(rel))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [Import(rel.as_posix(), mod, a.name, None, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(mod, p.name == "__init__.py", node.level, node.module)
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in modules:
                        found.append(Import(rel.as_posix(), mod, sub, None, node.lineno))
                    else:
                        found.append(Import(rel.as_posix(), mod, target, a.name, node.lineno))
    return sorted(found, key=lambda i: (i.path, i.line, i.target, i.name or ""))


def _top(module: str) -> str:
    return module.split(".")[0]


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _show(i: Import) -> str:
    return f"{i.path}: {i.target}" + (f" ({i.name})" if i.name and i.name.startswith("_") else "")


# --------------------------------------------------------------------------- the rules


def package_offenders(imports: list[Import]) -> list[str]:
    """Imports that break the package rules (see the module docstring)."""
    out = []
    for i in imports:
        own, top = _top(i.module), _top(i.target)
        heavy = own == "lessons" and top in HEAVY_FOR_LESSONS
        cli_tui = own == "arena" and top == "tui" and _in(i.module, "arena.cli")  # `arena tui` starts the app
        if heavy or (top in OURS and top not in ALLOWED_OURS[own] and not cli_tui):
            out.append(_show(i))
    return out


def _stage(module: str) -> int | None:
    """Index of the arena pipeline stage a module belongs to; None for the base modules and ``arena``."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in ARENA_BASE:
        return None
    return ARENA_STAGES.index(parts[1]) if parts[1] in ARENA_STAGES else -1


def arena_order_offenders(imports: list[Import]) -> list[str]:
    """Arena imports against the pipeline order (see the module docstring)."""
    out = []
    for i in imports:
        if _top(i.module) != "arena" or not _in(i.target, "arena") or i.target == i.module:
            continue
        own, theirs = _stage(i.module), _stage(i.target)
        if own == -1:
            out.append(f"{_show(i)} (arena module outside the stage order {' → '.join(ARENA_STAGES)})")
        elif own is None and theirs is None:  # a base module importing another (config → the objective registry)
            continue
        elif own is None or theirs is not None and (theirs == -1 or theirs > own):  # own None: the base modules
            out.append(_show(i))
    return out


def private_offenders(imports: list[Import]) -> list[str]:
    """``from <our module> import _name`` and imports of another package's private module."""
    out = []
    for i in imports:
        if _top(i.target) not in OURS or i.target == i.module:
            continue
        if i.name is not None and i.name.startswith("_") and not i.name.startswith("__"):
            out.append(_show(i))
        elif i.name is None:
            private = [k for k, part in enumerate(i.target.split(".")) if part.startswith("_") and not part.startswith("__")]
            # a private module is importable only from its own package (the parts before it)
            if private and not _in(i.module, ".".join(i.target.split(".")[: private[0]])):
                out.append(_show(i))
    return out


def _row_classes(root: Path) -> set[str]:
    path = root / Path(*SCHEMA.split(".")).with_suffix(".py")
    if not path.exists():
        return set()
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name.endswith("Row")}


def orm_offenders(imports: list[Import], rows: set[str]) -> list[str]:
    """Imports of ``lessons.db.schema``, or of one of its row classes, from outside lessons/."""
    out = []
    for i in imports:
        if _top(i.module) == "lessons":
            continue
        if _in(i.target, SCHEMA) or (_top(i.target) in OURS and i.name in rows):
            out.append(_show(i) if _in(i.target, SCHEMA) else f"{_show(i)} ({i.name})")
    return out


RULES: dict[str, Callable[[Path], list[str]]] = {
    "packages": lambda root: package_offenders(collect_imports(root)),
    "arena-order": lambda root: arena_order_offenders(collect_imports(root)),
    "private-names": lambda root: private_offenders(collect_imports(root)),
    "orm-rows": lambda root: orm_offenders(collect_imports(root), _row_classes(root)),
}


def find_violations(root: Path) -> dict[str, list[str]]:
    """Every rule's offenders (``path: imported module``) in the tree at ``root``, deduplicated, in order."""
    return {rule: list(dict.fromkeys(check(root))) for rule, check in RULES.items()}


# --------------------------------------------------------------------------- the repository


@pytest.mark.parametrize("rule", sorted(RULES))
def test_layering(rule):
    offenders = list(dict.fromkeys(RULES[rule](REPO)))
    assert offenders == [], f"{rule}: {len(offenders)} offender(s):\n" + "\n".join(offenders)


def test_the_checker_sees_the_real_tree():
    imports = collect_imports(REPO)
    assert {i.path.split("/")[0] for i in imports} == set(OURS)
    assert len({i.path for i in imports}) > 50
    assert any(i.target == "lessons.library.store" for i in imports)
    assert "RolloutRow" in _row_classes(REPO)


# --------------------------------------------------------------------------- planted violations


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in OURS:
        (root / pkg).mkdir(exist_ok=True)
        (root / pkg / "__init__.py").touch()
    return root


CLEAN = {
    "lessons/db/__init__.py": "",
    "lessons/db/schema.py": "class Base: ...\nclass LessonRow(Base): ...\n",
    "lessons/library/store.py": "from lessons.db.schema import LessonRow\nfrom . import helpers\n",
    "lessons/library/helpers.py": "import json\n",
    "agents/roles/solver.py": "from lessons.library.store import LessonStore\n",
    "tui/app.py": "from lessons.library import store\n",
    "arena/config.py": "import pydantic\nfrom arena.objectives import get_objective\n",
    "arena/objectives.py": "import importlib\n",
    "arena/stats.py": "import math\n",
    "arena/tasks/core.py": "from arena.config import SessionConfig\nfrom arena import stats\n",
    "arena/episode/graph.py": "from arena.tasks.core import Task\nfrom agents.roles.solver import solve\n",
    "arena/evaluation.py": "from arena.episode import graph\n",
    "arena/distill/pipeline.py": "from arena.evaluation import evaluate\n",
    "arena/session/runner.py": "from ..distill.pipeline import distill\nfrom .cycles import cycle\n",
    "arena/session/cycles.py": "def cycle(): ...\n",
    "arena/bench/learning.py": "from arena.session.runner import run_session\n",
    "arena/cli/__init__.py": "def tui():\n    from tui.app import ArenaApp\n    from arena.bench import learning\n",
}


def test_a_clean_synthetic_tree_has_no_offenders(tmp_path):
    assert find_violations(_tree(tmp_path, CLEAN)) == {rule: [] for rule in RULES}


PLANTED = [
    ("packages", "lessons/library/store.py", "def f():\n    from arena.config import X\n", "lessons/library/store.py: arena.config"),
    ("packages", "lessons/library/store.py", "import torch.nn\n", "lessons/library/store.py: torch.nn"),
    ("packages", "lessons/text.py", "from rich.console import Console\n", "lessons/text.py: rich.console"),
    ("packages", "agents/roles/solver.py", "from arena.tasks.core import Task\n", "agents/roles/solver.py: arena.tasks.core"),
    ("packages", "tui/app.py", "import agents.policy\n", "tui/app.py: agents.policy"),
    ("packages", "arena/session/runner.py", "from tui.app import ArenaApp\n", "arena/session/runner.py: tui.app"),
    ("arena-order", "arena/episode/graph.py", "from arena.session.runner import run\n", "arena/episode/graph.py: arena.session.runner"),
    ("arena-order", "arena/tasks/core.py", "def f():\n    from ..episode import graph\n", "arena/tasks/core.py: arena.episode.graph"),
    ("arena-order", "arena/evaluation.py", "from arena.distill import pipeline\n", "arena/evaluation.py: arena.distill.pipeline"),
    ("arena-order", "arena/config.py", "from arena.tasks.core import Task\n", "arena/config.py: arena.tasks.core"),
    ("arena-order", "arena/objectives.py", "def f():\n    from arena.distill import pipeline\n",
     "arena/objectives.py: arena.distill.pipeline"),
    ("arena-order", "arena/session/runner.py", "from arena.cli import main\n", "arena/session/runner.py: arena.cli"),
    ("arena-order", "arena/extra.py", "from arena.tasks import core\n",
     ("arena/extra.py: arena.tasks.core (arena module outside the stage order tasks → rewards → episode → evaluation → "
      "distill → session → export → report → bench → cli)")),
    ("private-names", "arena/cli/__init__.py", "from lessons.library.store import _lesson_info\n",
     "arena/cli/__init__.py: lessons.library.store (_lesson_info)"),
    ("private-names", "lessons/library/helpers.py", "from .store import _read\n",
     "lessons/library/helpers.py: lessons.library.store (_read)"),
    ("orm-rows", "arena/session/runner.py", "from lessons.db.schema import LessonRow\n", "arena/session/runner.py: lessons.db.schema"),
    ("orm-rows", "tui/app.py", "def f():\n    from lessons.db import schema\n", "tui/app.py: lessons.db.schema"),
    ("orm-rows", "agents/roles/solver.py", "from lessons.library.store import LessonRow\n",
     "agents/roles/solver.py: lessons.library.store (LessonRow)"),
]


@pytest.mark.parametrize(("rule", "path", "code", "reported"), PLANTED, ids=[f"{r}:{p}:{n}" for n, (r, p, _, _) in enumerate(PLANTED)])
def test_a_planted_violation_is_reported(tmp_path, rule, path, code, reported):
    files = dict(CLEAN)
    files[path] = files.get(path, "") + code
    found = find_violations(_tree(tmp_path, files))
    assert found == {r: [reported] if r == rule else [] for r in RULES}


def iter_offenders(root: Path = REPO) -> Iterator[str]:
    """``rule: offender`` lines for the whole tree (``python tests/test_layering.py`` prints them)."""
    for rule, offenders in find_violations(root).items():
        yield from (f"{rule}: {o}" for o in offenders)


if __name__ == "__main__":
    print("\n".join(iter_offenders()) or "no offenders")


def test_no_test_module_imports_another():
    """Shared fixtures live in conftests and shared helpers in helper modules, never in a test module
    (importing one runs its tests' module set-up twice and ties the suites together)."""
    tests_dir = Path(__file__).resolve().parent
    offenders = []
    for path in sorted(tests_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            offenders += [f"{path.relative_to(tests_dir)}: {n}" for n in names
                          if n.split(".")[-1].startswith("test_") or n.startswith("tests.")]
    assert offenders == []
