"""`arena adapters ...`: adapters trained elsewhere join the library (:mod:`arena.distill.imports`); registered ones are served by vLLM (:mod:`arena.distill.serving`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from arena.cli.support import fail, open_existing, quiet_libraries

adapters_app = typer.Typer(help="Adapters trained elsewhere (import) and adapters served by vLLM (serve).", no_args_is_help=True)


@adapters_app.command("import")
def import_cmd(
    src: Annotated[Path, typer.Argument(help="A peft LoRA adapter directory (adapter_config.json, adapter_model.safetensors).")],
    session: Annotated[str, typer.Option(help="The session whose held-out tasks evaluate it.")],
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    name: Annotated[Optional[str], typer.Option(help="Its readable id (default: the next adapter-NNNN).")] = None,
    data: Annotated[Optional[Path], typer.Option(help="The `arena export rollouts` directory it was trained on (lineage).")] = None,
    lesson_tokens: Annotated[int, typer.Option(help="Lessons budget of the with-lessons evaluations, tokens.")] = 512,
    max_tokens: Annotated[int, typer.Option(help="Completion cap of the evaluations, tokens.")] = 96,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Register a LoRA adapter trained elsewhere (TRL, verl): base-model check, held-out evaluation, lineage.

    Exit code 2 on bad input (not a LoRA adapter, one for another base model, unknown session, name taken).
    """
    quiet_libraries()
    from agents.policy import PolicyError
    from arena.distill.imports import import_adapter
    from arena.distill.pipeline import DistillError
    from arena.distill.weights import AdapterError
    from arena.tasks.model import TaskError
    from lessons.library.store import StoreError

    try:
        if lesson_tokens < 0 or max_tokens < 1:
            raise ValueError("--lesson-tokens must be >= 0 and --max-tokens >= 1")
        with open_existing(db) as store:
            result = import_adapter(store, db, src.expanduser(), session, name, data, lesson_tokens, max_tokens)
    except (AdapterError, DistillError, PolicyError, StoreError, TaskError, ValueError) as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps(result))
        return
    ev = result["eval"]
    print(f"registered {result['adapter_id']} (LoRA r={result['rank']}) at {result['adapter_path']}")
    for cond in ("base", "base_lessons", "adapter", "adapter_lessons"):
        s = ev[cond]
        print(f"  {cond:16} held-out pass@1 {s['pass_at_1']} [{s['ci95'][0]}, {s['ci95'][1]}] (n={s['n']})")


@adapters_app.command("serve")
def serve_cmd(
    adapter: Annotated[str, typer.Argument(help="The registered adapter's id (adapter-0001).")],
    endpoint: Annotated[str, typer.Option(help="The running vLLM server (http://host:port or .../v1).")],
    db: Annotated[str, typer.Option(help="Lesson library: SQLite path or SQLAlchemy URL.")] = "arena.db",
    name: Annotated[Optional[str], typer.Option(help="The model name to serve it under (default: the adapter id).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
) -> None:
    """Load a registered adapter into a running vLLM server (POST /v1/load_lora_adapter); then sample with --solver openai:NAME.

    The server must run with --enable-lora --max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, and read
    the adapter's directory. Exit code 2 when the adapter is unknown, the endpoint is unreachable or refuses it.
    """
    from dataclasses import asdict

    from arena.distill.serving import ServeError, serve_adapter
    from lessons.library.store import StoreError

    try:
        with open_existing(db) as store:
            served = serve_adapter(store, adapter, endpoint, name)
    except (ServeError, StoreError) as e:
        raise fail(str(e)) from None
    if json_out:
        print(json.dumps(asdict(served)))
        return
    print(f"{served.endpoint} serves {served.adapter_id} (LoRA r={served.rank}) as {served.name!r}")
    print(f"  sample with it: OPENAI_BASE_URL={served.endpoint} arena run --solver openai:{served.name} --teacher openai:MODEL")
