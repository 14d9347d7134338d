"""The embedded server starts with the library's own settings (serving/pgconf.py): the
shared_buffers a search at scale needs instead of initdb's 128 MB, changed by a setting
from the next start, written without taking the data directory from its owner."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from serving.db import Database
from serving.pgconf import AUTO_MAX_MB, CONF_NAME, INCLUDE, MIN_MB, shared_buffers_mb
from serving.settings import Settings


def _shared_buffers(settings: Settings) -> str:
    db = Database(settings)
    try:
        with db.connect() as conn:
            return conn.execute("SHOW shared_buffers").fetchone()[0]
    finally:
        db.stop()


def test_the_embedded_server_starts_with_the_configured_shared_buffers(tmp_path: Path):
    settings = Settings(library_dir=tmp_path / "library", home=tmp_path, pg_shared_buffers_mb=160)
    assert _shared_buffers(settings) == "160MB"
    pgdata = tmp_path / "pgdata"
    # a changed setting counts from the next start; the include is added once
    assert _shared_buffers(dataclasses.replace(settings, pg_shared_buffers_mb=200)) == "200MB"
    main = pgdata / "postgresql.conf"
    assert main.read_text().splitlines().count(INCLUDE) == 1
    ours = pgdata / CONF_NAME
    assert (ours.stat().st_uid, ours.stat().st_mode & 0o777) == (main.stat().st_uid, main.stat().st_mode & 0o777)
    assert not list(pgdata.glob(".*.tmp"))


def test_auto_is_a_quarter_of_memory_within_bounds():
    assert shared_buffers_mb(300) == 300
    assert MIN_MB <= shared_buffers_mb(0) <= AUTO_MAX_MB
