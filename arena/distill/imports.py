"""``arena adapters import``: register a peft LoRA adapter trained elsewhere (TRL, verl, a notebook).

The adapter is checked against the solver's base model before anything is written: with our
sidecar, by its base-model fingerprint; with a plain peft directory, every LoRA tensor must sit
on a module of the base model with matching dimensions (``lora_A``: r × in_features,
``lora_B``: out_features × r — read from the safetensors headers, no weights loaded), which
catches an adapter for another model or size. It is then copied into the library's adapter
directory with a sidecar, evaluated on the session's held-out tasks as ``arena distill``
evaluates its own adapters (base and adapter, without and with lessons; greedy pass@1 with
95% Wilson intervals) and registered with objective ``imported``. When ``--data`` names an
``arena export rollouts`` directory, its sidecar's session and rollout ids become the
adapter's lineage.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from arena.distill.pipeline import CONDITIONS, DistillError, evaluate, fresh_out_dir, session_heldout
from arena.distill.weights import SIDECAR, AdapterError, AdapterSidecar, base_fingerprint, check_adapter_dir
from lessons.library.adapters import AdapterRecord, AdapterStore
from lessons.library.store import LessonStore
from lessons.vocab import IMPORTED_OBJECTIVE

ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$")
EXPORT_SIDECAR = "arena_export.json"  # written by `arena export rollouts`
_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.default)?\.weight$")


def _shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name → shape of a safetensors file, from its header only."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}


def check_lora_shapes(adapter_dir: Path, base_dir: Path) -> int:
    """Check that every LoRA tensor of ``adapter_dir`` fits a module of the base model in ``base_dir``.

    Returns:
        The LoRA rank r.

    Raises:
        AdapterError: a tensor names no module of the base model, its dimensions differ, ranks
            disagree, or the adapter holds no LoRA tensor.
    """
    base: dict[str, tuple[int, ...]] = {}
    for f in sorted(base_dir.glob("*.safetensors")):
        base.update(_shapes(f))
    ranks = set()
    n = 0
    for key, shape in _shapes(adapter_dir / "adapter_model.safetensors").items():
        m = _LORA_KEY.match(key)
        if m is None:
            continue
        n += 1
        target = base.get(f"{m['module']}.weight")
        if target is None or len(target) != 2 or len(shape) != 2:
            raise AdapterError(f"adapter tensor {key} names no linear module of the base model in {base_dir}: "
                               "it was trained on another model")
        out_f, in_f = target
        r, dim = (shape[0], shape[1]) if m["ab"] == "A" else (shape[1], shape[0])
        if dim != (in_f if m["ab"] == "A" else out_f):
            raise AdapterError(f"adapter tensor {key} has shape {list(shape)} but the base module is {list(target)}: "
                               "it was trained on another model size")
        ranks.add(r)
    if n == 0:
        raise AdapterError(f"{adapter_dir} holds no LoRA tensor (lora_A / lora_B weights)")
    if len(ranks) != 1:
        raise AdapterError(f"{adapter_dir}: LoRA ranks disagree across modules ({sorted(ranks)})")
    return ranks.pop()


def _lineage(data_dir: Path | None) -> dict[str, Any]:
    """The export an adapter was trained on, from its ``arena_export.json`` ({} without ``--data``)."""
    if data_dir is None:
        return {}
    path = data_dir / EXPORT_SIDECAR
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DistillError(f"--data {data_dir}: cannot read {EXPORT_SIDECAR} ({e}); pass the directory "
                           "`arena export rollouts` wrote") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("rollout_ids"), list):
        raise DistillError(f"--data {data_dir}: {EXPORT_SIDECAR} is not an export sidecar")
    return {"export": {"path": str(data_dir.absolute()), "format": meta.get("format"), "session": meta.get("session"),
                       "rows": meta.get("rows")},
            "session": meta.get("session"), "rollout_ids": [int(i) for i in meta["rollout_ids"]],
            "examples": meta.get("rows")}


def import_adapter(store: LessonStore, db: str, src: Path, session: str, name: str | None = None,
                   data_dir: Path | None = None, lesson_tokens: int = 512, max_tokens: int = 96,
                   base_model: Path | None = None) -> dict[str, Any]:
    """Check, copy, evaluate and register an adapter trained elsewhere.

    Args:
        store: the open library.
        db: its path or URL (the session's config is read through it).
        src: the peft adapter directory (``adapter_config.json``, ``adapter_model.safetensors``).
        session: the session whose held-out tasks evaluate it.
        name: its readable id (default: the next ``adapter-NNNN``).
        data_dir: the ``arena export rollouts`` directory it was trained on, for lineage.
        lesson_tokens / max_tokens: evaluation budgets, as ``arena eval``.
        base_model: a transformers checkpoint directory (default: the embedded model).

    Returns:
        ``{"adapter_id", "adapter_path", "session", "objective": "imported", "rank", "eval"}``.

    Raises:
        DistillError: bad name or one already taken, unknown session, unreadable ``--data``.
        AdapterError: not a LoRA adapter, or one for another base model.
    """
    from agents.backends.local import LocalPolicy

    astore = AdapterStore(store)
    adapter_id = name or astore.next_adapter_id()
    if not ADAPTER_NAME.match(adapter_id):
        raise DistillError(f"--name must be 1-50 letters, digits, '.', '_' or '-', starting with a letter or digit; got {adapter_id!r}")
    if any(a.adapter_id == adapter_id for a in astore.list_adapters()):
        raise DistillError(f"an adapter named {adapter_id!r} is already registered; pass another --name")
    _, tasks = session_heldout(store, db, session)
    lineage = _lineage(data_dir)
    base = LocalPolicy(model_dir=base_model)  # not loaded yet: its directory is enough for the checks
    base_dir = base.model_dir
    fingerprint = base_fingerprint(base_dir)
    check_adapter_dir(src, fingerprint)  # with our sidecar: its fingerprint must be this base model's
    rank = check_lora_shapes(src, base_dir)
    dest = fresh_out_dir(store, None, adapter_id)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.import")
    shutil.rmtree(tmp, ignore_errors=True)
    registered = False
    try:
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(SIDECAR, "training_args.bin", "optimizer.pt"))
        tmp.rename(dest)
        base.load()
        ev = {"base": evaluate(store, base, tasks, False, (), lesson_tokens, max_tokens)}
        ev["base_lessons"] = evaluate(store, base, tasks, True, (), lesson_tokens, max_tokens, ev["base"])
        del base
        adapted = LocalPolicy(model_dir=base_model, adapter=dest)
        adapted.load()
        ev["adapter"] = evaluate(store, adapted, tasks, False, (), lesson_tokens, max_tokens)
        ev["adapter_lessons"] = evaluate(store, adapted, tasks, True, (), lesson_tokens, max_tokens, ev["adapter"])
        evaluation = {c: ev[c].summary() for c in CONDITIONS} | {"heldout_tasks": len(tasks), "distilled": []}
        config = {"imported_from": str(src.absolute()), "rank": rank}
        data = {"session": lineage.get("session") or session, **{k: v for k, v in lineage.items() if k != "session"}}
        sidecar = AdapterSidecar(adapter_id=adapter_id, base_model=fingerprint, objective=IMPORTED_OBJECTIVE,
                                 session=session, config=config, data=data, eval=evaluation,
                                 created_at=datetime.now(UTC).isoformat())
        (dest / SIDECAR).write_text(json.dumps(sidecar.model_dump(mode="json"), indent=2) + "\n")
        astore.register_adapter(AdapterRecord(
            adapter_id=adapter_id, path=str(dest), base_model=fingerprint, objective=IMPORTED_OBJECTIVE,
            session_id=store.get_session(session).id, config=config, data=data, metrics={}, eval=evaluation,
            in_context=[], distilled={},
        ))
        registered = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not registered:
            shutil.rmtree(dest, ignore_errors=True)
    return {"adapter_id": adapter_id, "adapter_path": str(dest), "session": session, "objective": IMPORTED_OBJECTIVE,
            "rank": rank, "eval": evaluation}
