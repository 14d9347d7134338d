"""Backup and restore through the `library` command line and the Dagster asset, on a
real library database (the sample library's books and vault notes, memories in three
scopes with versions and reads): the same memories and the same top 10 after a
restore, a restore that refuses a non-empty target or a bad file and leaves the
target untouched, a backup killed at random moments that leaves the previous one
restorable, writes during a backup wholly in it or wholly out, and a memories-only
backup restored beside a library ingested again."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from typer.testing import CliRunner

from library_pipeline.backup.archive import check_archive
from library_pipeline.backup.backup import backup
from library_pipeline.backup.restore import restore
from library_pipeline.backup.verify import with_dbname
from library_pipeline.cli.main import app
from library_pipeline.defs.ops.backup import library_backup, library_backup_restorable
from library_pipeline.resources import LibraryDatabase, release_databases
from library_pipeline.testing.sample_library import small_library
from library_pipeline_tests.conftest import EXTERNAL_PG_DSN
from serving.db import Database
from serving.memory import Viewer, get_memory, index_memory, search_memory
from serving.search import search
from serving.settings import Settings

A = Viewer("Agent-Scout", "marketing")
A2 = Viewer("Agent-Analyst", "marketing")
B = Viewer("Agent-Ops", "operations")
LIBRARY_QUERIES = ("Who is Irene Adler?", "white whale harpoon", "Капитанская дочка Гринёв", "configuration hosting")
MEMORY_QUERIES = ((A, "launch budget"), (A2, "supplier contract renewal"), (B, "incident runbook database"))

MEMORIES = [
    (A, "plan", "global", "Plan: launch the spring catalogue in May with a 40k budget.", {"type": "plan"}),
    (A, "plan", "global", "Plan: launch the spring catalogue in June; budget cut to 30k.", {"type": "plan"}),
    (A, "notes-1", "self", "Private note: the supplier contract renewal is due on 3 March.", {"task_id": "t-1"}),
    (A, "campaign", "department", "Campaign retro: TikTok seeding cost 2,000 a month, poor reach.", {}),
    (A2, "suppliers", "department", "Supplier list: Acme (contract renewal yearly), Globex, Initech.",
     {"type": "list", "date": "2026-11-02"}),
    (A2, "suppliers", "department", "Supplier list: Acme, Globex (contract ended), Initech, Umbrella.",
     {"type": "list", "date": "2026-11-20"}),
    (A2, "memo", "self", "Заметка: поставщик просит продлить договор до конца года.", {"lang": "ru"}),
    (B, "runbook", "department", "Incident runbook: restart the database replica, then the search workers.",
     {"type": "runbook"}),
    (B, "runbook", "department", "Incident runbook v2: fail over the database, drain the search workers.",
     {"type": "runbook"}),
    (B, "oncall", "self", "On-call handover: disk on db-2 is 91% full, ticket OPS-1182.", {"task_id": "OPS-1182"}),
    (B, "glossary", "global", "Glossary: RAPTOR summaries are tree summaries of a book's passages.", {}),
    (A, "long", "global", "Quarterly review. " + " ".join(
        f"Section {i}: the team shipped feature {i} and measured its adoption at {10 + i}% of users."
        for i in range(60)), {"type": "report"}),
]


def _populate(db: Database, embedder, test_data: Path) -> None:
    small_library(db, embedder, test_data, books=11)  # six books and five vault notes
    with db.connect(autocommit=True) as conn:
        for viewer, aid, scope, content, meta in MEMORIES:
            index_memory(conn, embedder, viewer, artifact_id=aid, scope=scope, content=content, meta=meta)
        get_memory(conn, A2, "plan")  # a read: the access log and counters have something to keep


def memory_state(conn: psycopg.Connection) -> list[tuple]:
    """Every memory version as a user sees it, ids left out (a memories-only restore gives new ones)."""
    return conn.execute(
        "SELECT m.agent, m.artifact_id, m.version, m.scope, m.department, m.type, m.meta, m.content, "
        "m.content_hash, m.superseded, m.relevance, m.access_count, m.tier, m.chunks, "
        "(SELECT d.artifact_id || '#' || d.version FROM memories d WHERE d.id = m.duplicate_of), "
        "(SELECT count(*) FROM passages p WHERE p.memory_id = m.id), "
        "(SELECT count(*) FROM memory_access_log l WHERE l.memory_id = m.id) "
        "FROM memories m ORDER BY m.agent, m.artifact_id, m.version").fetchall()


def vault_state(conn: psycopg.Connection) -> list[tuple]:
    return conn.execute("SELECT d.path, d.version, count(p.id) FROM documents d LEFT JOIN passages p "
                        "ON p.document_id = d.id WHERE d.source = 'vault' GROUP BY 1, 2 ORDER BY 1").fetchall()


def top10(conn: psycopg.Connection, embedder) -> dict[str, list]:
    """The fixed queries' top 10, library search and memory search, by content (not ids)."""
    out: dict[str, list] = {}
    for q in LIBRARY_QUERIES:
        out[q] = [(r.path, r.text[:80]) for r in search(conn, embedder, q, top_k=10).results]
    for viewer, q in MEMORY_QUERIES:
        res = search_memory(conn, embedder, viewer, q, top_k=10)
        out[f"{viewer.agent}: {q}"] = [(r["meta"]["agent"], r["content"][:80]) for r in res["results"]]
    return out


def _empty_database(server_db: Database, tmp_path: Path) -> Database:
    """A database with nothing in it, not even the schema (a new external database)."""
    name = f"t_{os.urandom(6).hex()}"
    with psycopg.connect(server_db.dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    return Database(dataclasses.replace(server_db.settings, db_dsn=with_dbname(server_db.dsn, name),
                                        library_dir=tmp_path / "library"))


@pytest.fixture()
def populated(make_db, embedder, test_data) -> Database:
    db = make_db()
    _populate(db, embedder, test_data)
    return db


@pytest.fixture()
def cli(monkeypatch, tmp_path):
    def invoke(db: Database, *args: str):
        monkeypatch.setenv("LIBRARY_DB_DSN", db.settings.db_dsn)
        monkeypatch.setenv("LIBRARY_HOME", str(tmp_path / "home"))
        return CliRunner().invoke(app, list(args))

    return invoke


def test_backup_and_restore_give_back_every_memory_and_the_same_top_10(populated, server_db, embedder, cli,
                                                                       tmp_path):
    with populated.connect() as conn:
        memories, vault = memory_state(conn), vault_state(conn)
    file = tmp_path / "lib.backup"
    out = cli(populated, "backup", str(file))
    assert out.exit_code == 0, out.output
    assert "full backup" in out.output and "memory versions" in out.output
    with populated.connect() as conn:
        before = top10(conn, embedder)
    target = _empty_database(server_db, tmp_path)
    out = cli(target, "restore", str(file))
    assert out.exit_code == 0, out.output
    assert "6 files, 5 vault notes" in out.output and "memories (12 versions)" in out.output
    with target.connect() as conn:
        assert memory_state(conn) == memories and vault_state(conn) == vault
        assert top10(conn, embedder) == before
        # the restored library takes new memories with ids after the restored ones
        r = index_memory(conn, embedder, A, artifact_id="after", scope="self", content="written after the restore")
        conn.commit()
        assert r.status == "created"
        assert r.record["id"] > conn.execute("SELECT max(id) FROM memories WHERE artifact_id <> 'after'").fetchone()[0]


def test_restore_refuses_a_non_empty_target_unless_forced(populated, make_db, embedder, test_data, cli, tmp_path):
    file = tmp_path / "lib.backup"
    assert cli(populated, "backup", str(file)).exit_code == 0
    other = make_db(tmp_path / "other")
    with other.connect(autocommit=True) as conn:
        index_memory(conn, embedder, B, artifact_id="mine", scope="self", content="a memory of the target's own")
        held = memory_state(conn)
    out = cli(other, "restore", str(file))
    assert out.exit_code == 2 and "not empty" in out.output and "--force" in out.output
    with other.connect() as conn:
        assert memory_state(conn) == held
    out = cli(other, "restore", "--force", str(file))
    assert out.exit_code == 0, out.output
    with other.connect() as conn, populated.connect() as source:
        assert memory_state(conn) == memory_state(source)


def test_a_truncated_or_foreign_file_is_refused_and_the_target_untouched(populated, make_db, cli, tmp_path):
    file = tmp_path / "lib.backup"
    assert cli(populated, "backup", str(file)).exit_code == 0
    data = file.read_bytes()
    truncated = tmp_path / "truncated.backup"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    flipped = tmp_path / "flipped.backup"
    mid = len(data) // 2  # inside the dump, not the tar's zero padding at the end
    flipped.write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 100]) + data[mid + 100:])
    foreign = tmp_path / "notes.tar"
    subprocess.run(["tar", "cf", str(foreign), "-C", str(tmp_path), "lib.backup"], check=True)
    random_bytes = tmp_path / "random.backup"
    random_bytes.write_bytes(os.urandom(50_000))
    target = make_db(tmp_path / "target")
    with target.connect() as conn:
        conn.execute("INSERT INTO settings (key, value) VALUES ('marker', '1')")
        conn.commit()
    for bad, reason in ((truncated, "truncated"), (flipped, "damaged"), (foreign, "not a library-pipeline backup"),
                        (random_bytes, "not a library-pipeline backup"), (tmp_path / "missing.backup", "no such file")):
        out = cli(target, "restore", "--force", str(bad))
        assert out.exit_code == 2, (bad.name, out.output)
        assert reason in out.output, (bad.name, out.output)
        assert len([ln for ln in out.output.splitlines() if ln.strip()]) == 1  # one line: the reason
    with target.connect() as conn:
        assert conn.execute("SELECT count(*) FROM settings WHERE key = 'marker'").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM passages").fetchone()[0] == 0


def _backup_process(db: Database, file: Path) -> subprocess.Popen:
    env = {**os.environ, "LIBRARY_DB_DSN": db.settings.db_dsn, "LIBRARY_HOME": str(file.parent / "home")}
    return subprocess.Popen([sys.executable, "-m", "library_pipeline.cli.main", "backup", str(file)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_backup_killed_at_any_moment_leaves_the_previous_one_restorable(populated, server_db, embedder,
                                                                          tmp_path):
    file = tmp_path / "lib.backup"
    started = time.perf_counter()
    assert _backup_process(populated, file).wait() == 0
    whole = time.perf_counter() - started
    previous = file.read_bytes()
    with populated.connect(autocommit=True) as conn:  # the next backup would differ
        index_memory(conn, embedder, B, artifact_id="later", scope="global", content="written after the first backup")
    rng = random.Random(7)
    for _ in range(5):
        proc = _backup_process(populated, file)
        time.sleep(rng.uniform(0.3, 1.0) * whole)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if file.read_bytes() != previous:  # the kill came after the rename: a whole new backup
            check_archive(file)
            previous = file.read_bytes()
    manifest = check_archive(file)
    target = _empty_database(server_db, tmp_path)
    restore(target, file)
    with target.connect() as conn:
        assert len(memory_state(conn)) == len(manifest.memories)
    # the next backup clears what the killed ones left beside the file
    assert _backup_process(populated, file).wait() == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lib.backup")) == ["lib.backup"]


def test_memories_written_during_a_backup_are_wholly_in_it_or_wholly_out(populated, server_db, embedder, tmp_path):
    stop, written, errors = threading.Event(), [], []

    def writer() -> None:
        try:
            with populated.connect(autocommit=True) as conn:
                i = 0
                while not stop.is_set():
                    content = f"Concurrent note {i}: " + " ".join(f"fact {i}.{j} about the warehouse."
                                                                 for j in range(40))
                    written.append(index_memory(conn, embedder, A, artifact_id=f"c-{i}", scope="self",
                                                content=content).record["id"])
                    i += 1
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(written) < 3:
            time.sleep(0.05)
        result = backup(populated, tmp_path / "live.backup")
        after = len(written)
    finally:
        stop.set()
        thread.join()
    assert not errors
    target = _empty_database(server_db, tmp_path)
    restore(target, result.path)
    with target.connect() as conn:
        restored = conn.execute("SELECT count(*) FROM memories WHERE artifact_id LIKE 'c-%'").fetchone()[0]
        torn = conn.execute("SELECT count(*) FROM memories m WHERE m.chunks <> "
                            "(SELECT count(*) FROM passages p WHERE p.memory_id = m.id)").fetchone()[0]
        assert {tuple(k) for k in result.manifest.memories} == {tuple(r) for r in conn.execute(
            "SELECT agent, artifact_id, version, content_hash FROM memories")}
    assert 3 <= restored <= after and torn == 0


def test_a_memories_only_backup_restores_beside_a_library_ingested_again(populated, make_db, embedder, test_data,
                                                                         cli, tmp_path):
    with populated.connect() as conn:
        memories, vault = memory_state(conn), vault_state(conn)
        passages = conn.execute("SELECT count(*) FROM passages WHERE source = 'library'").fetchone()[0]
    file = tmp_path / "memories.backup"
    out = cli(populated, "backup", "--memories-only", str(file))
    assert out.exit_code == 0 and "memories backup" in out.output, out.output
    assert file.stat().st_size < 200_000
    with populated.connect() as conn:
        before = top10(conn, embedder)
    fresh = make_db(tmp_path / "again")
    small_library(fresh, embedder, test_data, books=6)  # the books only: the vault comes from the backup
    out = cli(fresh, "restore", str(file))
    assert out.exit_code == 0, out.output
    assert "12 versions" in out.output and "5 vault notes" in out.output
    with fresh.connect() as conn:
        assert memory_state(conn) == memories and vault_state(conn) == vault
        assert conn.execute("SELECT count(*) FROM passages WHERE source = 'library'").fetchone()[0] == passages
        assert top10(conn, embedder) == before
        got = get_memory(conn, A, "plan")
        assert [v["version"] for v in got["versions"]] == [1, 2] and "June" in got["content"]
    # a second restore would double every memory: refused, and --force replaces instead
    assert cli(fresh, "restore", str(file)).exit_code == 2
    assert cli(fresh, "restore", "--force", str(file)).exit_code == 0
    with fresh.connect() as conn:
        assert len(memory_state(conn)) == len(memories)


def _asset_resources(db: Database, backups: Path, keep: int = 7) -> dict:
    settings = dataclasses.replace(db.settings, backup_dir=backups, backup_keep=keep)
    return {"library_db": LibraryDatabase.from_settings(settings)}


def test_the_backup_asset_keeps_the_newest_and_its_check_restores_them(populated, tmp_path):
    backups = tmp_path / "backups"
    for _ in range(3):
        result = dg.materialize([library_backup, library_backup_restorable],
                                resources=_asset_resources(populated, backups, keep=2), raise_on_error=True)
        [check] = result.get_asset_check_evaluations()
        assert check.passed, check.description
    meta = {k: v.value for k, v in result.asset_materializations_for_node("library_backup")[-1].metadata.items()}
    assert meta["kind"] == "full" and meta["memory versions"] == 12 and meta["pruned"] == 1
    files = sorted(backups.glob("library-*.backup"))
    assert len(files) == 2 and Path(meta["path"]) == files[-1]
    assert check.metadata["tables compared"].value >= 20
    # a backup damaged on disk is red at the next check
    data = files[-1].read_bytes()
    files[-1].write_bytes(data[: len(data) // 2])
    result = dg.materialize([library_backup_restorable], resources=_asset_resources(populated, backups, keep=2),
                            selection=dg.AssetSelection.checks(library_backup_restorable), raise_on_error=False)
    [check] = result.get_asset_check_evaluations()
    assert not check.passed and "truncated" in check.description


_MATERIALIZE = ("import dagster as dg\n"
                "from library_pipeline.defs.ops.backup import library_backup\n"
                "from library_pipeline.resources import LibraryDatabase\n"
                "from serving.settings import get_settings\n"
                "dg.materialize([library_backup], resources={'library_db': LibraryDatabase.from_settings("
                "get_settings())}, raise_on_error=True)\n")


def test_an_asset_run_killed_mid_backup_leaves_the_newest_backup_restorable(populated, embedder, tmp_path):
    backups = tmp_path / "backups"
    env = {**os.environ, "LIBRARY_DB_DSN": populated.settings.db_dsn, "LIBRARY_HOME": str(tmp_path / "home"),
           "LIBRARY_BACKUP_DIR": str(backups)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", _MATERIALIZE], env=env, check=True, capture_output=True)
    whole = time.perf_counter() - started
    with populated.connect(autocommit=True) as conn:
        index_memory(conn, embedder, B, artifact_id="later", scope="global", content="written after the first backup")
    rng = random.Random(3)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _MATERIALIZE], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 1.0) * whole)  # the second half: the backup itself, after the imports
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        result = dg.materialize([library_backup_restorable], resources=_asset_resources(populated, backups),
                                selection=dg.AssetSelection.checks(library_backup_restorable))
        [check] = result.get_asset_check_evaluations()
        assert check.passed, check.description


def test_the_backup_asset_memories_only(populated, tmp_path):
    result = dg.materialize([library_backup, library_backup_restorable],
                            resources=_asset_resources(populated, tmp_path / "b"),
                            run_config={"ops": {"library_backup": {"config": {"memories_only": True}}}})
    [check] = result.get_asset_check_evaluations()
    assert check.passed, check.description
    assert check.metadata["kind"].value == "memories" and check.metadata["memory versions"].value == 12


@pytest.mark.skipif(EXTERNAL_PG_DSN is not None, reason="deletes an embedded server's home")
def test_backup_delete_the_home_restore(embedder, test_data, monkeypatch):
    root = Path(tempfile.mkdtemp(prefix="library-backup-home-"))
    root.chmod(0o755)  # the embedded server runs as its own user
    try:
        monkeypatch.delenv("LIBRARY_DB_DSN", raising=False)
        monkeypatch.setenv("LIBRARY_HOME", str(root / "home"))
        settings = Settings(library_dir=root / "home" / "library", home=root / "home")
        db = Database(settings)
        _populate(db, embedder, test_data)
        with db.connect() as conn:
            memories = memory_state(conn)
            before = top10(conn, embedder)  # the searches' reads are in the backup, as in the restored home
        db.stop()
        out = CliRunner().invoke(app, ["backup", str(root / "home.backup")])
        assert out.exit_code == 0, out.output
        dg.materialize([library_backup], resources=_asset_resources(db, root / "nightly"), raise_on_error=True)
        release_databases(root / "home")  # the resource's claim on the server, before the home goes
        [nightly] = (root / "nightly").glob("library-*.backup")
        shutil.rmtree(root / "home")
        for file in (root / "home.backup", nightly):  # the command's backup, then the asset's
            shutil.rmtree(root / "home", ignore_errors=True)
            out = CliRunner().invoke(app, ["restore", str(file)])
            assert out.exit_code == 0, out.output
            db = Database(settings)
            with db.connect() as conn:
                assert [m[:10] for m in memory_state(conn)] == [m[:10] for m in memories]
                assert top10(conn, embedder) == before
            db.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
