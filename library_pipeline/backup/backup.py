"""`library backup`: a consistent snapshot of the library database while it serves.

The counts and memory hashes of the manifest and the payload are read in one
exported snapshot (a REPEATABLE READ transaction held open while `pg_dump
--snapshot` reads it, or while the COPYs of a memories-only backup run), so a memory
an agent writes during the backup is wholly in it or wholly out, and the manifest
describes exactly what the payload holds.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql

from library_pipeline.backup import memories as memories_kind
from library_pipeline.backup.archive import (BackupError, Manifest, partial_name, remove_stale_partials,
                                             write_archive)
from library_pipeline.backup.pgtools import ToolError, libpq_env, pg_tool, server_major, tool_major
from serving.db import Database

log = logging.getLogger(__name__)

DUMP_MEMBER = "library.pgdump"
# pg_dump --verbose names each table as it starts reading its rows
_DUMPING_RE = re.compile(r'dumping contents of table "?([^"\s]+)"?')

# progress(stage, done, total): a stage's units done of total (tables, then bytes)
Progress = Callable[[str, int, int], None]


@dataclasses.dataclass
class BackupResult:
    path: Path
    manifest: Manifest
    bytes: int
    seconds: float


def dies_with_parent(cmd: list[str]) -> list[str]:
    """`cmd` made to die with this process: a backup killed with SIGKILL must not leave a
    pg_dump writing on behind it. Through util-linux `setpriv --pdeathsig` (where it is
    installed), not a `preexec_fn`: Python code run between fork and exec deadlocked the
    child while another thread of the process (a memory writer embedding text) held a
    lock - a backup taken while agents write hung for ever."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", *cmd] if setpriv else cmd


def table_names(conn: psycopg.Connection) -> list[str]:
    """The library's tables (in the connection's schema)."""
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relkind IN ('r', 'p') "
        "AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) ORDER BY 1")]


def table_counts(conn: psycopg.Connection, tables: list[str] | None = None) -> dict[str, int]:
    return {t: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(t))).fetchone()[0]
            for t in (tables if tables is not None else table_names(conn))}


def memory_keys(conn: psycopg.Connection) -> list[list]:
    """Every memory version by what identifies it and what it says."""
    return [list(r) for r in conn.execute(
        "SELECT agent, artifact_id, version, content_hash FROM memories ORDER BY agent, artifact_id, version")]


def _pg_dump(dsn: str, snapshot: str, major: int, out: Path, tables: int, progress: Progress | None) -> int:
    """Dump the snapshot to `out`; the pg_dump's major version."""
    exe = pg_tool("pg_dump", major)
    conninfo, env = libpq_env(dsn)
    cmd = [str(exe), "--format=custom", "--no-owner", "--no-privileges", "--verbose",
           f"--snapshot={snapshot}", f"--file={out}", f"--dbname={conninfo}"]
    proc = subprocess.Popen(dies_with_parent(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    done, errors = 0, []
    assert proc.stderr is not None
    for line in proc.stderr:
        m = _DUMPING_RE.search(line)
        if m:
            done += 1
            if progress:
                progress(f"dumping {m.group(1).split('.')[-1]}", min(done, tables), tables)
        elif "error" in line.lower():
            errors.append(line.strip())
    if proc.wait() != 0:
        raise BackupError(f"pg_dump failed: {(errors or ['exit status %d' % proc.returncode])[0]}")
    return tool_major(str(exe)) or major


def backup(db: Database, path: Path, *, memories_only: bool = False, progress: Progress | None = None
           ) -> BackupResult:
    """Write a backup of `db` to `path` (replaced only when the new file is complete)."""
    started = time.perf_counter()
    path = path.expanduser().absolute()
    if path.is_dir():
        raise BackupError(f"{path} is a directory; give a file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_partials(path):
        log.info("removed %s, left by a backup that did not finish", stale.name)
    work = Path(f"{partial_name(path)}.d")
    work.mkdir()
    try:
        with db.connect() as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction():
                snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()[0]
                taken = conn.execute("SELECT now()").fetchone()[0]
                major = server_major(conn)
                version = conn.execute("SHOW server_version").fetchone()[0]
                keys = memory_keys(conn)
                extra: dict = {}
                if memories_only:
                    members, tables, counts = memories_kind.save(
                        conn, work, (lambda t: progress(f"saving {t}", 0, 0)) if progress else None)
                    extra["near_dup_cursor"] = memories_kind.near_dup_cursor(conn)
                    tool = "COPY, text format"
                else:
                    names = table_names(conn)
                    if progress:
                        progress("counting rows", 0, len(names))
                    counts = table_counts(conn, names)
                    dump = work / DUMP_MEMBER
                    try:
                        dump_major = _pg_dump(db.dsn, snapshot, major, dump, len(names), progress)
                    except ToolError as exc:
                        raise BackupError(str(exc)) from None
                    members, tables = {DUMP_MEMBER: dump}, {}
                    tool, extra["pg_dump_major"] = f"pg_dump {dump_major}", dump_major
        manifest = Manifest(kind="memories" if memories_only else "full",
                            created_at=taken.astimezone(dt.timezone.utc).isoformat(), server_version=version,
                            tool=tool, counts=counts, memories=keys, tables=tables, extra=extra)
        total = sum(p.stat().st_size for p in members.values())
        written = [0]

        def copied(n: int) -> None:
            written[0] += n
            if progress:
                progress("writing", written[0], total)

        size = write_archive(path, manifest, members, copied)
    finally:
        for p in work.iterdir():
            p.unlink(missing_ok=True)
        work.rmdir()
    seconds = time.perf_counter() - started
    log.info("backup %s: %s, %d bytes, %d memories in %.1f s", path, manifest.kind, size, len(keys), seconds)
    return BackupResult(path, manifest, size, seconds)


def prune(directory: Path, pattern: str, keep: int) -> list[Path]:
    """Delete all but the newest `keep` files matching `pattern` (names sort by time)."""
    files = sorted(p for p in directory.glob(pattern) if p.is_file() and ".partial-" not in p.name)
    gone = files[:-keep] if keep > 0 else []
    for p in gone:
        p.unlink(missing_ok=True)
    return gone
