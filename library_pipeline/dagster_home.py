"""Dagster's instance lives in the same PostgreSQL as the library (runs,
event logs, schedules, sensor cursors), so the UI, the daemon's sensors and
`library ingest` on the command line all see one history."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psycopg
import yaml

from serving.db import Database, file_lock

log = logging.getLogger(__name__)

# The main table of each instance storage: dagster-postgres creates a storage's
# tables (and stamps alembic, migrates, reindexes) only when this one is missing.
INSTANCE_TABLES = ("runs", "instance_info", "event_logs", "jobs")
# Events a step or a run launch emits together are held and written as one batch
# of up to this many (Dagster's own switch, DAGSTER_EVENT_BATCH_SIZE, read per
# event; 0 = one by one). A sensor range run of 200 files plans 600
# materializations and reports 200 per asset. Measured on a 600-small-file first
# sync on the Postgres instance: 83 s / 77 s without, 59 s / 58 s with.
EVENT_BATCH_SIZE = 1000
INSTANCE_LOCK_ID = 7_301_116  # pg_advisory_lock key: one creation of the instance tables at a time

# the run lanes and pools are declared once, in library_pipeline.run_plan; the
# names stay importable from here for the definitions that use them
from library_pipeline.run_plan import ENRICH_POOL, LANE_TAG, POOLS, RUN_QUEUE

__all__ = ["ENRICH_POOL", "LANE_TAG", "POOLS", "RUN_QUEUE", "prepare_dagster_home", "ensure_instance_tables"]


def prepare_dagster_home(db: Database) -> Path:
    """Write DAGSTER_HOME/dagster.yaml for this database and export DAGSTER_HOME."""
    home = Path(os.environ.get("DAGSTER_HOME") or db.settings.home / "dagster")
    home.mkdir(parents=True, exist_ok=True)
    url = db.dagster_url()
    os.environ["LIBRARY_DAGSTER_PG_URL"] = url
    # an external server's URL may carry a password: reference it from the
    # environment rather than writing it to disk; the embedded one has none.
    postgres_url = url if db.embedded else {"env": "LIBRARY_DAGSTER_PG_URL"}
    config = {
        # dagster-postgres's storage, with a range run's planned events written in
        # batches (library_pipeline.dagster_storage)
        "storage": {"custom": {"module": "library_pipeline.dagster_storage", "class": "LibraryPostgresStorage",
                               "config": {"postgres_url": postgres_url}}},
        "run_coordinator": {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"},
        # run limits live here once `concurrency` is used (Dagster refuses them in
        # the run coordinator's config then)
        "concurrency": {"runs": RUN_QUEUE, "pools": POOLS},
        # step stdout/stderr viewable in the UI's run page (without it the
        # instance page showed `compute_logs: NoneType`)
        "compute_logs": {
            "module": "dagster._core.storage.local_compute_log_manager",
            "class": "LocalComputeLogManager",
            "config": {"base_dir": str(home / "compute_logs")},
        },
        "telemetry": {"enabled": False},
    }
    target = home / "dagster.yaml"
    text = yaml.safe_dump(config, sort_keys=False)
    # several commands start at once on a fresh home: write under a lock and
    # atomically (rename), so no process ever loads a half-written file
    with file_lock(home / ".dagster.yaml.lock"):
        if not target.exists() or target.read_text() != text:
            tmp = target.with_name(f".dagster.yaml.{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, target)
    os.environ["DAGSTER_HOME"] = str(home)
    # inherited by the daemon, the webserver, run workers and celery workers started from here
    os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", str(EVENT_BATCH_SIZE))
    ensure_instance_tables(home, url)
    return home


def _libpq_dsn(sqlalchemy_url: str) -> str:
    scheme, sep, rest = sqlalchemy_url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def _missing_tables(conn: psycopg.Connection) -> list[str]:
    return [t for t in INSTANCE_TABLES
            if conn.execute("SELECT to_regclass(%s) IS NULL", (t,)).fetchone()[0]]


def ensure_instance_tables(dagster_home: Path, url: str) -> None:
    """Create the Dagster instance's tables once, whoever starts first.

    dagster-postgres creates them when a storage is first built, retrying
    five times 0.2 s apart when another creator collides with it; the
    migrate, optimize and reindex steps that follow are not guarded at all,
    and a loaded 2-core box easily takes longer than that second. Here the
    first process builds the storages under a session advisory lock
    (released even if it dies); the others wait for it, then find every
    table and build nothing.
    """
    with psycopg.connect(_libpq_dsn(url), autocommit=True) as conn:
        if not _missing_tables(conn):
            return
        conn.execute("SELECT pg_advisory_lock(%s)", (INSTANCE_LOCK_ID,))
        try:
            missing = _missing_tables(conn)
            if not missing:
                return
            import dagster as dg

            log.info("creating the Dagster instance tables (missing: %s)", ", ".join(missing))
            instance = dg.DagsterInstance.from_config(str(dagster_home))
            try:
                # each property builds its storage, which creates its tables
                instance.run_storage  # noqa: B018
                instance.event_log_storage  # noqa: B018
                instance.schedule_storage  # noqa: B018
            finally:
                instance.dispose()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (INSTANCE_LOCK_ID,))
