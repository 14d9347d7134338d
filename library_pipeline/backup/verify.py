"""Proof that a backup restores: it is restored into a scratch database on the same
server and what came back is compared with what the manifest says was saved (row
counts per table, every memory version's content hash). The nightly backup's asset
check runs this, so a backup that cannot be restored shows red the morning after,
not on the day it is needed."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import psycopg
from psycopg import sql

from library_pipeline.backup.archive import Manifest, check_archive
from library_pipeline.backup.backup import memory_keys, table_counts
from library_pipeline.backup.restore import restore
from serving.db import Database


@dataclasses.dataclass
class Verification:
    manifest: Manifest
    counts: dict[str, tuple[int, int]]     # table -> (saved, restored)
    missing_memories: list[list]           # saved versions not restored (or with another hash)
    unexpected_memories: list[list]
    seconds: float

    @property
    def mismatched(self) -> dict[str, tuple[int, int]]:
        return {t: c for t, c in self.counts.items() if c[0] != c[1]}

    @property
    def ok(self) -> bool:
        return not self.mismatched and not self.missing_memories and not self.unexpected_memories


def with_dbname(dsn: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


def verify(db: Database, path: Path) -> Verification:
    """Restore `path` into a scratch database beside `db`'s and compare; the scratch
    database is dropped afterwards, whatever happens."""
    started = time.perf_counter()
    manifest = check_archive(path)
    name = f"library_restore_check_{os.getpid()}"
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(db.dsn, autocommit=True) as conn:
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    scratch = Database(dataclasses.replace(db.settings, db_dsn=with_dbname(db.dsn, name)))
    try:
        result = restore(scratch, path, manifest=manifest, upgrade=False)
        with psycopg.connect(scratch.dsn) as conn:
            if manifest.kind == "full":
                got = table_counts(conn, list(manifest.counts))
                counts = {t: (n, got[t]) for t, n in manifest.counts.items()}
            else:
                counts = {t: (n, result.inserted.get(t, 0)) for t, n in manifest.counts.items()}
            keys = {tuple(k) for k in memory_keys(conn)}
    finally:
        with psycopg.connect(db.dsn, autocommit=True) as conn:
            conn.execute(drop)
    saved = manifest.memory_keys
    return Verification(manifest, counts, sorted(map(list, saved - keys)), sorted(map(list, keys - saved)),
                        time.perf_counter() - started)
