"""Adapter directories: peft files plus a JSON sidecar; atomic save, checked load, base-model fingerprints.

An adapter directory holds what ``PeftModel.save_pretrained`` writes (``adapter_config.json``,
``adapter_model.safetensors``; loadable by plain ``peft.PeftModel.from_pretrained`` on the same
base and by vLLM ``--enable-lora``) and ``arena_adapter.json``: the distillation config, data
provenance, training metrics, held-out evaluation and the fingerprint of the base model.
Loading tolerates older sidecars (missing fields take defaults, unknown ones are ignored).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

SIDECAR = "arena_adapter.json"
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")
SIDECAR_VERSION = 1


class AdapterError(ValueError):
    """An adapter directory cannot be used (missing, corrupt, other base model); one line for stderr."""


class AdapterSidecar(BaseModel):
    """``arena_adapter.json``: what the adapter is and how it was made."""

    model_config = ConfigDict(extra="ignore")

    format_version: int = SIDECAR_VERSION  # sidecar layout version
    adapter_id: str | None = None  # readable id in the library, e.g. "adapter-0001"
    base_model: str | None = None  # fingerprint of the base model (None: unknown, older sidecar)
    objective: str = "distill"  # distill | sft | guided-unweighted | grpo | guide-grpo
    session: str | None = None  # the session whose rollouts it was trained on
    config: dict[str, Any] = {}  # DistillConfig as a dict
    data: dict[str, Any] = {}  # provenance: rollout / lesson / hint ids, counts
    metrics: dict[str, Any] = {}  # training figures
    eval: dict[str, Any] = {}  # held-out pass@1 of base, base_lessons, adapter, adapter_lessons
    created_at: str | None = None  # ISO-8601 UTC


def base_fingerprint(model_dir: str | os.PathLike[str]) -> str:
    """A short id of a transformers checkpoint: architecture sizes plus a hash of its weights' head.

    ``"{model_type}-{hidden}x{layers}-{sha1[:12]}"`` where the hash covers the shape fields of
    ``config.json`` and the size and first MiB of the (first) safetensors weight file, so the
    same weights copied elsewhere give the same fingerprint and another model (or the same
    architecture with other weights) a different one.

    Raises:
        AdapterError: no ``config.json`` or no safetensors weights in ``model_dir``.
    """
    d = Path(model_dir)
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise AdapterError(f"cannot read the base model's config.json in {d}: {e}") from None
    weights = sorted(d.glob("*.safetensors"))
    if not weights:
        raise AdapterError(f"no safetensors weights in {d}")
    keys = ("architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "vocab_size")
    h = hashlib.sha1(json.dumps({k: cfg.get(k) for k in keys}, sort_keys=True).encode())
    with weights[0].open("rb") as f:
        h.update(str(weights[0].stat().st_size).encode())
        h.update(f.read(1 << 20))
    return f"{cfg.get('model_type', 'model')}-{cfg.get('hidden_size')}x{cfg.get('num_hidden_layers')}-{h.hexdigest()[:12]}"


def save_adapter(peft_model: Any, out_dir: str | os.PathLike[str], sidecar: AdapterSidecar) -> Path:
    """Write the adapter and its sidecar to ``out_dir`` atomically (temp dir, then rename).

    Args:
        peft_model: a trained ``peft.PeftModel``.
        out_dir: the directory to create; it must not exist yet (an empty one is replaced).
        sidecar: written as ``arena_adapter.json``.

    Returns:
        The absolute path of the adapter directory.

    Raises:
        AdapterError: ``out_dir`` exists and is not empty, or its parent cannot be written.
    """
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AdapterError(f"adapter directory {out} already exists; pass another --out or remove it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as e:
        raise AdapterError(f"cannot write adapter directory {out}: {e.strerror or e}") from None
    try:
        peft_model.save_pretrained(str(tmp))
        (tmp / SIDECAR).write_text(json.dumps(sidecar.model_dump(mode="json"), indent=2) + "\n")
        if out.exists():
            out.rmdir()
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def read_sidecar(path: str | os.PathLike[str]) -> AdapterSidecar | None:
    """The sidecar of an adapter directory; None when it has none (a plain peft adapter).

    Raises:
        AdapterError: the sidecar exists but is not valid JSON / not an object.
    """
    p = Path(path) / SIDECAR
    if not p.exists():
        return None
    try:
        raw = json.loads(p.read_text())
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return AdapterSidecar.model_validate(raw)
    except (OSError, ValueError, ValidationError) as e:
        raise AdapterError(f"corrupt adapter sidecar {p}: {' '.join(str(e).split())[:200]}") from None


def check_adapter_dir(path: str | os.PathLike[str], base_model: str | None = None) -> AdapterSidecar | None:
    """Check that ``path`` is a usable adapter directory before any model is loaded.

    Checks: the directory exists; ``adapter_config.json`` is a JSON object naming a LoRA
    adapter; ``adapter_model.safetensors`` has a readable safetensors header with at least one
    tensor; the sidecar (if any) parses; and, when both ``base_model`` and the sidecar's
    fingerprint are known, that they are equal.

    Args:
        path: the adapter directory.
        base_model: fingerprint of the base model it will be applied to (:func:`base_fingerprint`).

    Returns:
        The sidecar, or None for a plain peft adapter without one.

    Raises:
        AdapterError: naming the first problem found.
    """
    d = Path(path).expanduser()
    if not d.is_dir():
        raise AdapterError(f"no adapter directory at {d}")
    for name in PEFT_FILES:
        if not (d / name).is_file():
            raise AdapterError(f"corrupt adapter directory {d}: {name} is missing")
    try:
        cfg = json.loads((d / "adapter_config.json").read_text())
        if not isinstance(cfg, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        raise AdapterError(f"corrupt adapter directory {d}: adapter_config.json: {e}") from None
    if str(cfg.get("peft_type", "")).upper() != "LORA":
        raise AdapterError(f"{d} is not a LoRA adapter (peft_type {cfg.get('peft_type')!r})")
    try:
        from safetensors import safe_open

        with safe_open(str(d / "adapter_model.safetensors"), framework="pt") as f:
            if not list(f.keys()):
                raise ValueError("no tensors")
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise AdapterError(f"corrupt adapter directory {d}: adapter_model.safetensors: {' '.join(str(e).split())[:160]}") from None
    sidecar = read_sidecar(d)
    if base_model and sidecar is not None and sidecar.base_model and sidecar.base_model != base_model:
        raise AdapterError(
            f"adapter {sidecar.adapter_id or d} was trained on base model {sidecar.base_model}, "
            f"but the solver's base model is {base_model}; use an adapter trained on this model"
        )
    return sidecar
