"""`library restore`: a backup into an empty home or an empty database.

The file is checked whole (manifest, every member's size and checksum) before the
target is touched. A full backup is replayed by psql in ONE transaction that first
empties the schema: a restore that fails halfway (a server that refuses an
extension, a disk that fills) rolls back and leaves the target as it was, including
with --force. A memories-only backup goes in beside whatever library the target
holds, with new ids (library_pipeline.backup.memories), also in one transaction.
After either, today's schema.sql runs over the result, so a backup of an older
release opens upgraded.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from library_pipeline.backup import memories as memories_kind
from library_pipeline.backup.archive import BackupError, Manifest, check_archive, extracted
from library_pipeline.backup.backup import DUMP_MEMBER, Progress, dies_with_parent
from library_pipeline.backup.pgtools import ToolError, libpq_env, pg_tool, server_major
from serving.db import Database
from serving.lexemes import refresh_lexeme_df

log = logging.getLogger(__name__)

# The schema emptied in the restore's own transaction, before the dump's objects are
# made: every table, view, sequence and function of the library's schema except those
# of an extension. The extension stays: on a server where the library's role is not a
# superuser, pgvector belongs to the superuser who created it, and dropping it (or the
# dump's COMMENT ON EXTENSION) fails with "must be owner of extension vector".
_EMPTY_SCHEMA = b"""
CREATE EXTENSION IF NOT EXISTS vector;
DO $empty$
DECLARE stmt text;
BEGIN
    FOR stmt IN
        SELECT format('DROP %s IF EXISTS %s CASCADE',
                      CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                     WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END, c.oid::regclass)
        FROM pg_class c
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                          AND d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))
    LOOP
        EXECUTE stmt;
    END LOOP;
    FOR stmt IN
        SELECT format('DROP %s IF EXISTS %s CASCADE', CASE p.prokind WHEN 'p' THEN 'PROCEDURE'
                      WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END, p.oid::regprocedure)
        FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                          AND d.objid = p.oid AND d.deptype = 'e')
    LOOP
        EXECUTE stmt;
    END LOOP;
END $empty$;
"""


def _toc_without_extensions(restore_exe: Path, dump: Path, into: Path) -> Path:
    """The archive's table of contents less its extension entries (made or kept by
    _EMPTY_SCHEMA instead), for `pg_restore --use-list`."""
    listing = subprocess.run([str(restore_exe), "--list", str(dump)], capture_output=True, text=True)
    if listing.returncode != 0:
        raise BackupError(f"pg_restore cannot read the dump: {listing.stderr.strip().splitlines()[:1]}")
    keep = [ln for ln in listing.stdout.splitlines() if not re.search(r"\bEXTENSION\b", ln)]
    out = into / "toc.list"
    out.write_text("\n".join(keep) + "\n", encoding="utf-8")
    return out


@dataclasses.dataclass
class RestoreResult:
    path: Path
    manifest: Manifest
    totals: dict[str, int]        # what the target holds afterwards
    inserted: dict[str, int]      # memories kind: rows added per table
    warnings: list[str]
    seconds: float


def holdings(conn: psycopg.Connection) -> dict[str, int]:
    """What a database holds that a restore would replace: library files, vault notes,
    passages, memories (zeros for a database without the library's tables)."""
    if conn.execute("SELECT to_regclass('documents') IS NULL OR to_regclass('memories') IS NULL").fetchone()[0]:
        return {"files": 0, "vault notes": 0, "passages": 0, "memories": 0, "versions": 0}
    row = conn.execute(
        "SELECT (SELECT count(*) FROM documents WHERE source = 'library'), "
        "(SELECT count(*) FROM documents WHERE source = 'vault'), (SELECT count(*) FROM passages), "
        "(SELECT count(*) FROM (SELECT DISTINCT agent, artifact_id FROM memories) a), "
        "(SELECT count(*) FROM memories)").fetchone()
    return dict(zip(("files", "vault notes", "passages", "memories", "versions"), row))


def _describe(held: dict[str, int]) -> str:
    return ", ".join(f"{v:,} {k}" for k, v in held.items() if v and k != "versions")


def replay_dump(dsn: str, dump: Path, dump_major: int, progress: Progress | None = None) -> None:
    """pg_restore's script of `dump` into psql, in one transaction that empties the schema first."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        target_major = server_major(conn)
    try:
        # pg_restore reads archives of its own version and older; psql speaks to the target
        restore_exe = pg_tool("pg_restore", max(dump_major, target_major))
        psql_exe = pg_tool("psql", target_major)
    except ToolError as exc:
        raise BackupError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="library-restore-") as tmp:
        _stream(restore_exe, psql_exe, dsn, dump, _toc_without_extensions(restore_exe, dump, Path(tmp)), progress)


def _stream(restore_exe: Path, psql_exe: Path, dsn: str, dump: Path, toc: Path, progress: Progress | None) -> None:
    conninfo, env = libpq_env(dsn)
    # a session idle in a transaction on the target must not hang the restore for ever;
    # HNSW indexes build several times faster when their graph fits in memory
    env["PGOPTIONS"] = "-c lock_timeout=60s -c maintenance_work_mem=512MB"
    script = subprocess.Popen(dies_with_parent([str(restore_exe), "--no-owner", "--no-privileges",
                                                f"--use-list={toc}", "--file=-", str(dump)]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    psql = subprocess.Popen(dies_with_parent([str(psql_exe), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                                              "--single-transaction", f"--dbname={conninfo}"]),
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert script.stdout is not None and psql.stdin is not None
    errors: dict[str, bytes] = {}
    readers = [threading.Thread(target=lambda n=n, p=p: errors.__setitem__(n, p.stderr.read()), daemon=True)
               for n, p in (("pg_restore", script), ("psql", psql))]
    for t in readers:
        t.start()
    sent = 0
    try:
        psql.stdin.write(_EMPTY_SCHEMA)
        while block := script.stdout.read(1 << 20):
            psql.stdin.write(block)
            sent += len(block)
            if progress:  # the SQL's size is not known ahead: bytes replayed, no total
                progress("restoring", sent, 0)
        psql.stdin.close()
    except BrokenPipeError:
        script.kill()  # psql stopped at an error (its message says which): pg_restore would block on the pipe
    script.wait()
    psql.wait()
    for t in readers:
        t.join()
    if psql.returncode != 0 or script.returncode != 0:
        failed = "psql" if psql.returncode != 0 else "pg_restore"
        lines = [ln for ln in errors.get(failed, b"").decode(errors="replace").splitlines() if ln.strip()]
        reason = next((ln for ln in lines if "ERROR" in ln or "error" in ln), lines[0] if lines else "no message")
        raise BackupError(f"the restore failed and was rolled back, the target is unchanged: {reason.strip()}")


def _scratch_dir(path: Path) -> Path | None:
    """Where the dump is copied out for pg_restore: beside the backup (the same disk has
    room for a file its size, where /tmp may be a small tmpfs), unless that folder is not
    writable (read-only backup media): then the system's temporary folder."""
    return path.parent if os.access(path.parent, os.W_OK) else None


def restore(db: Database, path: Path, *, force: bool = False, progress: Progress | None = None,
            manifest: Manifest | None = None, upgrade: bool = True) -> RestoreResult:
    """Restore the backup at `path` into `db`. `manifest`: the file was checked already;
    `upgrade=False` leaves a full backup's schema as it was saved (the restore check
    compares counts with the saved ones)."""
    started = time.perf_counter()
    path = path.expanduser().absolute()
    if manifest is None:
        size = path.stat().st_size if path.is_file() else 0
        read = [0]

        def checked(n: int) -> None:
            read[0] += n
            if progress:
                progress("checking the file", read[0], size)

        manifest = check_archive(path, checked)
    warnings: list[str] = []
    inserted: dict[str, int] = {}
    if manifest.kind == "full":
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            held = holdings(conn)
        if any(held.values()) and not force:
            raise BackupError(f"the target is not empty ({_describe(held)}); "
                              "`library restore --force` replaces what it holds")
        with tempfile.TemporaryDirectory(prefix="library-restore-", dir=_scratch_dir(path)) as tmp, \
                extracted(path, DUMP_MEMBER, Path(tmp)) as dump:
            replay_dump(db.dsn, dump, int(manifest.extra.get("pg_dump_major") or 0), progress)
        db._schema_ready = False  # noqa: SLF001 - the schema was replaced under this Database
        if upgrade:
            db.ensure_schema()
    else:
        with db.connect() as conn:
            held = {k: v for k, v in holdings(conn).items() if k in ("memories", "vault notes")}
            if any(held.values()) and not force:
                raise BackupError(f"the target already holds {_describe(held)}; "
                                  "`library restore --force` replaces them with the backup's")
            with conn.transaction():
                inserted = memories_kind.load(conn, path, manifest, force=force,
                                              progress=(lambda t: progress(f"restoring {t}", 0, 0))
                                              if progress else None)
            refresh_lexeme_df(conn, ["memory", "vault"])
            warnings += _model_warnings(conn)
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        if manifest.kind == "full":
            conn.execute("ANALYZE")
        totals = holdings(conn)
    seconds = time.perf_counter() - started
    log.info("restored %s (%s) in %.1f s: %s", path, manifest.kind, seconds, totals)
    return RestoreResult(path, manifest, totals, inserted, warnings, seconds)


def _model_warnings(conn: psycopg.Connection) -> list[str]:
    """Restored passages the library's vector lanes cannot read: embedded by another model
    than the one the library is on (the keyword lane still finds them)."""
    active = conn.execute("SELECT value ->> 'name' FROM settings WHERE key = 'embed_model'").fetchone()
    if active is None:
        return []
    rows = conn.execute("SELECT embed_model, count(*) FROM passages WHERE source IN ('memory', 'vault') "
                        "AND embed_model IS DISTINCT FROM %s GROUP BY 1", (active[0],)).fetchall()
    return [f"{n} restored passages were embedded by {model or 'no model'}, the library is on {active[0]}: "
            "`library migrate embedder start` re-embeds them" for model, n in rows]
