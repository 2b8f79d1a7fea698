"""`SessionConfig`'s role specs, checked through the backend registry: what each role's backend must be able to do."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agents.backends.registry import kinds, spec_choices
from arena.config import ROLE_CHOICES, SOLVER_NEEDS, SessionConfig, sleep_needs


def test_the_role_choices_are_the_registry_s() -> None:
    assert ROLE_CHOICES == spec_choices() == "'local', 'openai:MODEL', 'llamacpp:PATH' or 'qwen2.5-coder-1.5b'"
    assert spec_choices(SOLVER_NEEDS) == "'local' or 'openai:MODEL'"
    assert [k.name for k in kinds(sleep_needs("distill"))] == ["local"]


def test_the_config_refuses_a_solver_without_what_the_session_needs(tmp_path) -> None:
    def refusal(**kw) -> str:
        with pytest.raises(ValidationError) as e:
            SessionConfig(db=str(tmp_path / "a.db"), **kw)
        return e.value.errors()[0]["msg"].removeprefix("Value error, ")

    assert refusal(solver="llamacpp:/x.gguf") == (
        "a session (its rollouts are scored and trained on) needs a solver that returns the log-probs of the tokens it "
        "samples: `llamacpp:/x.gguf` cannot; use 'local' or 'openai:MODEL'")
    assert refusal(solver="gpt4") == "must be 'local' or 'openai:MODEL' (the solver is scored and trained), got 'gpt4'"
    assert refusal(solver="openai:m", cycles=2) == (
        "a sleep (distill) trains the solver's weights, which needs the local solver, one that scores any completion by "
        "teacher forcing and has local weights a LoRA adapter trains on (got --solver openai:m); pass --solver local or "
        "--cycles 1 without --sleep-objective")
    # per objective: opcd rescores nothing, so only the weights are missing
    assert refusal(solver="openai:m", cycles=2, sleep_objective="opcd") == (
        "a sleep (opcd) trains the solver's weights, which needs the local solver, one that has local weights a LoRA "
        "adapter trains on (got --solver openai:m); pass --solver local or --cycles 1 without --sleep-objective")
    assert refusal(solver="openai:m", adapter="adapter-0001") == (
        "--adapter needs the local solver, one that has local weights a LoRA adapter trains on (got --solver openai:m)")
    assert refusal(teacher="gpt4") == f"must be {spec_choices()}, got 'gpt4'"
    assert refusal(critic="gpt4") == f"must be 'verifier', {spec_choices()}, got 'gpt4'"
    assert refusal(proposer="gpt4") == f"must be 'teacher', {spec_choices()}, got 'gpt4'"
    cfg = SessionConfig(db=str(tmp_path / "a.db"), teacher="llamacpp:t.gguf", critic="verifier", proposer="teacher")
    assert cfg.teacher == f"llamacpp:{Path('t.gguf').absolute()}" and cfg.critic == "verifier"
    assert SessionConfig(db=str(tmp_path / "a.db"), solver="openai:m").with_auto_sleep(1000).sleep is None
