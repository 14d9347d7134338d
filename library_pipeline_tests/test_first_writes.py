"""First writes on a fresh library never fail because another writer started at the
same moment. The first write of every path creates the models' HNSW indexes
(schema.sql `ensure_hnsw_indexes`); two sessions running CREATE INDEX IF NOT EXISTS
for the same name both pass the existence check and the second fails on the catalog's
unique index (UniqueViolation). Measured before the fix, 8 agents' simultaneous first
`memory_index` calls: 0, 1 and 3 failures in three rounds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from library_pipeline_tests.search_fixtures import create_database
from serving.memory import Viewer, index_memory, search_memory

AGENTS = 8
ROUNDS = 10
FACTS = ["the staging cluster's backups run at 03:10 from the north rack",
         "invoice 7741 for the lighthouse survey was paid twice in March",
         "the orchid greenhouse humidity sensor reads nine percent high",
         "Maria's onboarding checklist lacks the badge photo step",
         "the ferry timetable changes on the first Sunday of October",
         "our llama feed supplier moved its depot to Hollow Creek",
         "the observatory dome motor needs a new capacitor every winter",
         "the bakery's sourdough starter is fed with rye flour at dawn"]


def _first_writes(db) -> list[str]:
    """Every agent's first memory_index at one moment, each on its own connection;
    the errors, as text."""
    barrier = threading.Barrier(AGENTS)
    errors: list[str] = []

    def agent(i: int) -> None:
        try:
            with db.connect(autocommit=True) as conn:
                barrier.wait(timeout=60)
                index_memory(conn, EMBEDDER[0], Viewer(f"agent-{i}", "ops"), artifact_id=f"note-{i}",
                             scope="self", content=f"Remember: {FACTS[i]}.")
        except Exception as exc:  # the assertion below reports every one
            errors.append(f"agent-{i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(AGENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return errors


EMBEDDER: list = []


@pytest.mark.db  # the external server too: its catalog races the same way
def test_simultaneous_first_memory_writes_all_stored(server_db, embedder):
    EMBEDDER[:] = [embedder]
    for rnd in range(ROUNDS):
        db = create_database(server_db)
        errors = _first_writes(db)
        assert errors == [], f"round {rnd}: {errors}"
        with db.connect(autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == AGENTS
            names = {r[0] for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'passages' AND indexname LIKE 'passages_hnsw%'")}
            assert len(names) == 4, names  # both models, verbatim and summaries
            for i in range(AGENTS):
                found = search_memory(conn, embedder, Viewer(f"agent-{i}", "ops"), FACTS[i], top_k=3)
                assert found["results"] and found["results"][0]["meta"]["agent"] == f"agent-{i}", (rnd, i, found)
                assert FACTS[i] in found["results"][0]["content"]


# -- library ingest and a vault sync started at the same moment on a fresh home ----------

# Each round starts two processes that load both models and Dagster (~100 s a round on the
# shared 2-core box); the memory test above is the one that repeats ten times.
INGEST_ROUNDS = int(os.environ.get("LIBRARY_FIRST_WRITE_ROUNDS", "2"))
REPO = Path(__file__).resolve().parent.parent
BOOK = "The harbour master kept tide tables for the northern coast and the lighthouse log. " * 30
NOTE = "# Orchard\n\nThe orchard's pear trees were grafted onto quince rootstock in the dry spring.\n" * 10


@pytest.mark.slow
@pytest.mark.timeout(120 + 400 * INGEST_ROUNDS)
def test_ingest_and_vault_sync_first_writes_at_once(tmp_path, embedder):
    from library_pipeline_tests.test_concurrent_start import _base_env, _fresh_home, _server_stopped
    from library_pipeline_tests.vault_helpers import commit_all, init_repo, write
    from serving.db import Database
    from serving.search.engine import search
    from serving.search.types import SearchConfig
    from serving.settings import Settings

    for rnd in range(INGEST_ROUNDS):
        home = _fresh_home()  # its library holds one small text file
        try:
            (home / "library" / "tides.txt").write_text(BOOK, encoding="utf-8")
            repo = init_repo(tmp_path / f"vault-{rnd}")
            write(repo / "orchard.md", NOTE)
            commit_all(repo, "first note")
            env = dict(_base_env(home), LIBRARY_VAULT_REPO=str(repo), LIBRARY_VAULT_BRANCH="main")
            procs = {name: subprocess.Popen([sys.executable, "-m", "library_pipeline.cli.main", *args], cwd=REPO, env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for name, args in (("ingest", ["ingest"]), ("vault", ["vault", "sync"]))}
            outs = {name: p.communicate(timeout=360) for name, p in procs.items()}
            for name, p in procs.items():
                assert p.returncode == 0, f"round {rnd} {name}: exit {p.returncode}\n{outs[name][1][-3000:]}"
            assert _server_stopped(home)[0]
            db = Database(Settings(library_dir=home / "library", home=home))
            try:
                with db.connect() as conn:
                    for query, path in (("harbour master tide tables", "tides.txt"),
                                        ("pear trees grafted onto quince", "orchard.md")):
                        top = search(conn, embedder, query, top_k=3, config=SearchConfig(rerank=False)).results
                        assert top and top[0].path == path, (rnd, query, top)
            finally:
                db.stop()
        finally:
            shutil.rmtree(home, ignore_errors=True)
