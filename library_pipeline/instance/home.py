"""Dagster's instance lives in the same PostgreSQL as the library (runs,
event logs, schedules, sensor cursors), so the UI, the daemon's sensors and
`library ingest` on the command line all see one history."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import yaml

from serving.db import Database, file_lock

if TYPE_CHECKING:
    import dagster as dg

log = logging.getLogger(__name__)

# The main table of each instance storage: dagster-postgres creates a storage's
# tables (and stamps alembic, migrates, reindexes) only when this one is missing.
INSTANCE_TABLES = ("runs", "instance_info", "event_logs", "jobs")
# Events a step or a run launch emits together are held and written as one batch
# of up to this many (the instance's `_get_event_batch_size`, set by
# dagster_storage.LibraryInstance; 0 = one by one). A sensor range run of 200 files
# plans 600 materializations and reports 200 per asset. Measured on a
# 600-small-file first sync on the Postgres instance: 83 s / 77 s without, 59 s / 58 s with.
EVENT_BATCH_SIZE = 1000
PG_URL_VARIABLE = "LIBRARY_DAGSTER_PG_URL"  # what dagster.yaml names for an external server's URL
INSTANCE_LOCK_ID = 7_301_116  # pg_advisory_lock key: one creation of the instance tables at a time

# the run lanes and pools are declared once, in library_pipeline.launch.run_plan; the
# names stay importable from here for the definitions that use them
from library_pipeline.launch.run_plan import ENRICH_POOL, LANE_TAG, POOLS, RUN_QUEUE

__all__ = ["ENRICH_POOL", "EVENT_BATCH_SIZE", "LANE_TAG", "POOLS", "RUN_QUEUE", "DagsterHome", "prepare_dagster_home",
           "ensure_instance_tables"]


@dataclass(frozen=True)
class DagsterHome:
    """A prepared Dagster home: the folder holding dagster.yaml and the instance
    storage's URL. `instance()` opens it in this process; `env()` is what a child
    process that loads the home from disk (`dagster dev`, a celery worker or run
    launcher) needs in its environment."""

    path: Path
    url: str
    embedded: bool

    def env(self) -> dict[str, str]:
        env = {"DAGSTER_HOME": str(self.path)}
        if not self.embedded:
            # dagster.yaml names this variable instead of holding the URL (it may carry
            # a password); a child resolves it from its environment
            env[PG_URL_VARIABLE] = self.url
        return env

    def instance(self) -> dg.DagsterInstance:
        """The instance in this process, its storage given the URL directly (nothing
        read from or written to the environment). Runs executed in-process use it as
        is; a process of its own (a celery step) opens the home from disk instead."""
        import dagster as dg
        from dagster._core.instance.ref import InstanceRef

        ref = InstanceRef.from_dir(str(self.path), overrides={"storage": _storage(self.url)})
        return dg.DagsterInstance.from_ref(ref)


def _storage(postgres_url: str | dict) -> dict:
    # dagster-postgres's storage, with a range run's planned events written in
    # batches (library_pipeline.instance.storage)
    return {"custom": {"module": "library_pipeline.instance.storage", "class": "LibraryPostgresStorage",
                       "config": {"postgres_url": postgres_url}}}


def prepare_dagster_home(db: Database, home: Path | None = None) -> DagsterHome:
    """Write dagster.yaml for this database under `home` (default: DAGSTER_HOME, else
    LIBRARY_HOME/dagster) and create the instance's tables."""
    home = home or Path(os.environ.get("DAGSTER_HOME") or db.settings.home / "dagster")
    home.mkdir(parents=True, exist_ok=True)
    url = db.dagster_url()
    # an external server's URL may carry a password: reference it from the
    # environment rather than writing it to disk; the embedded one has none.
    postgres_url = url if db.embedded else {"env": PG_URL_VARIABLE}
    config = {
        # the instance class sets the event batch size (library_pipeline.instance.storage)
        "instance_class": {"module": "library_pipeline.instance.storage", "class": "LibraryInstance"},
        "storage": _storage(postgres_url),
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
    prepared = DagsterHome(path=home, url=url, embedded=db.embedded)
    ensure_instance_tables(prepared)
    return prepared


def _libpq_dsn(sqlalchemy_url: str) -> str:
    scheme, sep, rest = sqlalchemy_url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def _missing_tables(conn: psycopg.Connection) -> list[str]:
    return [t for t in INSTANCE_TABLES
            if conn.execute("SELECT to_regclass(%s) IS NULL", (t,)).fetchone()[0]]


def ensure_instance_tables(home: DagsterHome) -> None:
    """Create the Dagster instance's tables once, whoever starts first.

    dagster-postgres creates them when a storage is first built, retrying
    five times 0.2 s apart when another creator collides with it; the
    migrate, optimize and reindex steps that follow are not guarded at all,
    and a loaded 2-core box easily takes longer than that second. Here the
    first process builds the storages under a session advisory lock
    (released even if it dies); the others wait for it, then find every
    table and build nothing.
    """
    with psycopg.connect(_libpq_dsn(home.url), autocommit=True) as conn:
        if not _missing_tables(conn):
            return
        conn.execute("SELECT pg_advisory_lock(%s)", (INSTANCE_LOCK_ID,))
        try:
            missing = _missing_tables(conn)
            if not missing:
                return
            log.info("creating the Dagster instance tables (missing: %s)", ", ".join(missing))
            instance = home.instance()
            try:
                # each property builds its storage, which creates its tables
                instance.run_storage  # noqa: B018
                instance.event_log_storage  # noqa: B018
                instance.schedule_storage  # noqa: B018
            finally:
                instance.dispose()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (INSTANCE_LOCK_ID,))
