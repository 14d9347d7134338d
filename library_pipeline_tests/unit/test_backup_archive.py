"""The backup file on its own (no database): what the whole-file check refuses before a
restore touches anything, and the write that never leaves a half file at the name."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from library_pipeline.backup.archive import (MANIFEST, BackupError, Manifest, check_archive, read_manifest,
                                             remove_stale_partials, write_archive)


def _manifest() -> Manifest:
    return Manifest(kind="full", created_at="2026-12-07T02:00:00+00:00", server_version="18.4", tool="pg_dump 18",
                    counts={"memories": 2, "passages": 5}, memories=[["a", "x", 1, "h1"], ["a", "x", 2, "h2"]])


def _archive(tmp_path: Path, payload: bytes = b"payload " * 50_000) -> Path:
    member = tmp_path / "library.pgdump"
    member.write_bytes(payload)
    path = tmp_path / "lib.backup"
    write_archive(path, _manifest(), {"library.pgdump": member})
    return path


def test_a_whole_file_passes_and_its_manifest_reads_back(tmp_path):
    path = _archive(tmp_path)
    m = check_archive(path)
    assert m.kind == "full" and m.counts == {"memories": 2, "passages": 5}
    assert m.memory_keys == {("a", "x", 1, "h1"), ("a", "x", 2, "h2")}
    assert m.members["library.pgdump"]["bytes"] == 400_000
    assert read_manifest(path).members == m.members
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []


@pytest.mark.parametrize("cut", [0.001, 0.1, 0.5, 0.95])  # the last 10 KB are tar padding
def test_a_truncated_file_is_refused(tmp_path, cut):
    path = _archive(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(BackupError, match="truncated|damaged"):
        check_archive(path)


def test_changed_bytes_inside_the_payload_are_refused(tmp_path):
    path = _archive(tmp_path)
    data = bytearray(path.read_bytes())
    data[200_000] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BackupError, match="damaged"):
        check_archive(path)


def test_foreign_files_are_refused(tmp_path):
    noise = tmp_path / "noise.backup"
    noise.write_bytes(os.urandom(20_000))
    with pytest.raises(BackupError, match="not a library-pipeline backup"):
        check_archive(noise)
    other_tar = tmp_path / "other.tar"
    with tarfile.open(other_tar, "w") as tar:
        info = tarfile.TarInfo("readme.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    with pytest.raises(BackupError, match=f"no {MANIFEST} at its head"):
        check_archive(other_tar)
    wrong_format = tmp_path / "wrong.tar"
    with tarfile.open(wrong_format, "w") as tar:
        data = b'{"format": "something-else"}'
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(BackupError, match="another format"):
        check_archive(wrong_format)
    with pytest.raises(BackupError, match="no such file"):
        check_archive(tmp_path / "missing.backup")


def test_a_member_the_manifest_does_not_list_is_refused(tmp_path):
    path = _archive(tmp_path)
    with tarfile.open(path, "a") as tar:
        info = tarfile.TarInfo("extra.sql")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"DROP"))
    with pytest.raises(BackupError, match="does not list"):
        check_archive(path)


def test_a_failed_write_leaves_the_previous_file(tmp_path):
    path = _archive(tmp_path)
    before = path.read_bytes()
    missing = tmp_path / "gone.pgdump"
    with pytest.raises(FileNotFoundError):
        write_archive(path, _manifest(), {"library.pgdump": missing})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []


def test_leftovers_of_dead_writers_go_and_a_live_writers_stay(tmp_path):
    path = tmp_path / "lib.backup"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / f"lib.backup.partial-{dead}").write_bytes(b"half")
        (tmp_path / f"lib.backup.partial-{dead}.d").mkdir()
        (tmp_path / f"lib.backup.partial-{dead}.d" / "library.pgdump").write_bytes(b"half")
        (tmp_path / f"lib.backup.partial-{live.pid}").write_bytes(b"being written")
        removed = {p.name for p in remove_stale_partials(path)}
        assert removed == {f"lib.backup.partial-{dead}", f"lib.backup.partial-{dead}.d"}
        assert (tmp_path / f"lib.backup.partial-{live.pid}").exists()
    finally:
        live.kill()
        live.wait()
