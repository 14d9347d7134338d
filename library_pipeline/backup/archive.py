"""The backup file: one uncompressed tar holding `manifest.json` first, then the payload
members it lists with their sizes and sha256.

A tar rather than a bare `pg_dump` archive because a restore must be able to refuse a
file before touching anything: pg_restore reads a custom-format archive's table of
contents from its head, so a truncated dump lists fine and fails halfway through the
data, after the target was changed. The manifest's checksums catch that, its `kind`
and `format` catch a foreign file, and its counts (taken in the same snapshot as the
dump) are what the restore check compares the restored database with.

A file is written under a temporary name beside its destination and renamed when
complete and fsynced, so a backup killed at any moment leaves the previous file at
that name intact; the leftovers of a killed writer are removed by the next one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import psutil

FORMAT = "library-pipeline-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
KINDS = ("full", "memories")
PARTIAL = ".partial-"  # FILE.partial-<pid>: a backup being written by that process
CHUNK = 1 << 20


class BackupError(RuntimeError):
    """A backup or restore that cannot proceed; the message is one line for the user."""


@dataclasses.dataclass
class Manifest:
    kind: str                                    # full | memories
    created_at: str                              # ISO 8601, the snapshot's time
    server_version: str
    tool: str                                    # the pg_dump that wrote the payload, or "COPY"
    counts: dict[str, int]                       # table -> rows in the snapshot (rows saved, for `memories`)
    memories: list[list[Any]]                    # [agent, artifact_id, version, content_hash] of every memory
    members: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # name -> {bytes, sha256}
    tables: dict[str, list[str]] = dataclasses.field(default_factory=dict)        # memories kind: table -> columns
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise BackupError(f"the manifest is not JSON ({exc})") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise BackupError("not a library-pipeline backup (its manifest names another format)")
        if raw.get("format_version") != FORMAT_VERSION:
            raise BackupError(f"backup format version {raw.get('format_version')} is not one this release reads "
                              f"({FORMAT_VERSION}); restore it with the release that wrote it")
        if raw.get("kind") not in KINDS:
            raise BackupError(f"unknown backup kind {raw.get('kind')!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = names - raw.keys() - {"members", "tables", "extra", "format", "format_version"}
        if missing:
            raise BackupError(f"the manifest lacks {', '.join(sorted(missing))}")
        return cls(**{k: v for k, v in raw.items() if k in names})

    @property
    def memory_keys(self) -> set[tuple]:
        return {tuple(m) for m in self.memories}


def file_sha256(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            if progress:
                progress(len(block))
    return h.hexdigest()


def partial_name(path: Path) -> Path:
    return path.with_name(f"{path.name}{PARTIAL}{os.getpid()}")


def remove_stale_partials(path: Path) -> list[Path]:
    """Delete what killed writers of `path` left behind (their pid is gone); a live
    writer's files stay."""
    removed = []
    for p in path.parent.glob(f"{path.name}{PARTIAL}*"):
        pid_text = p.name[len(path.name) + len(PARTIAL):].split(".", 1)[0]
        if pid_text.isdigit() and psutil.pid_exists(int(pid_text)) and int(pid_text) != os.getpid():
            continue
        if p.is_dir():
            for child in p.iterdir():
                child.unlink(missing_ok=True)
            p.rmdir()
        else:
            p.unlink(missing_ok=True)
        removed.append(p)
    return removed


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_archive(path: Path, manifest: Manifest, members: dict[str, Path],
                  progress: Callable[[int], None] | None = None) -> int:
    """Write the manifest and `members` (name -> file) to `path` atomically; the bytes
    written. The members' sizes and checksums go into the manifest first."""
    for name, src in members.items():
        manifest.members[name] = {"bytes": src.stat().st_size, "sha256": file_sha256(src)}
    tmp = partial_name(path)
    try:
        with tmp.open("wb") as raw:
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                data = manifest.to_json()
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
                for name, src in members.items():
                    info = tarfile.TarInfo(name)
                    info.size, info.mode = src.stat().st_size, 0o600
                    with src.open("rb") as f:
                        tar.addfile(info, _Counting(f, progress))
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path.stat().st_size


class _Counting(io.RawIOBase):
    """A file read through, reporting each block to `progress`."""

    def __init__(self, f: IO[bytes], progress: Callable[[int], None] | None) -> None:
        self._f, self._progress = f, progress

    def read(self, size: int = -1) -> bytes:
        block = self._f.read(size)
        if self._progress and block:
            self._progress(len(block))
        return block


def _open_tar(path: Path) -> tarfile.TarFile:
    if not path.is_file():
        raise BackupError(f"{path}: no such file")
    try:
        return tarfile.open(path, mode="r:")
    except (tarfile.TarError, OSError) as exc:
        raise BackupError(f"{path.name} is not a library-pipeline backup (not a tar archive: {exc})") from None


def read_manifest(path: Path) -> Manifest:
    """The manifest alone (cheap: the first member)."""
    with _open_tar(path) as tar:
        first = tar.next()
        if first is None or first.name != MANIFEST:
            raise BackupError(f"{path.name} is not a library-pipeline backup (no {MANIFEST} at its head)")
        f = tar.extractfile(first)
        assert f is not None
        return Manifest.from_json(f.read())


def check_archive(path: Path, progress: Callable[[int], None] | None = None) -> Manifest:
    """The manifest, after every member was read and matched its size and checksum. A
    truncated, corrupted or foreign file raises BackupError with the reason."""
    manifest = read_manifest(path)
    seen: set[str] = set()
    try:
        with _open_tar(path) as tar:
            for info in tar:
                if info.name == MANIFEST:
                    continue
                expected = manifest.members.get(info.name)
                if expected is None:
                    raise BackupError(f"{path.name} holds {info.name!r}, which its manifest does not list")
                f = tar.extractfile(info)
                if f is None:
                    raise BackupError(f"{path.name}: {info.name} is not a file")
                h, size = hashlib.sha256(), 0
                while block := f.read(CHUNK):
                    h.update(block)
                    size += len(block)
                    if progress:
                        progress(len(block))
                if size != expected["bytes"] or h.hexdigest() != expected["sha256"]:
                    raise BackupError(f"{path.name} is damaged: {info.name} has {size} bytes, sha256 "
                                      f"{h.hexdigest()[:12]}…; the manifest says {expected['bytes']} bytes, "
                                      f"{expected['sha256'][:12]}…")
                seen.add(info.name)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BackupError(f"{path.name} is truncated or damaged ({exc})") from None
    missing = set(manifest.members) - seen
    if missing:
        raise BackupError(f"{path.name} is truncated: {', '.join(sorted(missing))} missing")
    return manifest


@contextmanager
def extracted(path: Path, name: str, into: Path) -> Iterator[Path]:
    """One member copied out to a file under `into` (pg_restore reads a file), removed after."""
    target = into / Path(name).name
    with _open_tar(path) as tar:
        try:
            info = tar.getmember(name)
        except KeyError:
            raise BackupError(f"{path.name} lacks {name}") from None
        f = tar.extractfile(info)
        assert f is not None
        with target.open("wb") as out:
            while block := f.read(CHUNK):
                out.write(block)
    try:
        yield target
    finally:
        target.unlink(missing_ok=True)


@contextmanager
def member(path: Path, name: str) -> Iterator[IO[bytes]]:
    """One member as a stream."""
    with _open_tar(path) as tar:
        try:
            f = tar.extractfile(name)
        except KeyError:
            raise BackupError(f"{path.name} lacks {name}") from None
        assert f is not None
        yield f
