"""A real database of an older release, opened by today's code.

library_pipeline_tests/data/upgrade holds a pg_dump of the `library` database that
the release at commit 3b68a2a (the last of 2026-12-03) wrote through its own ingest
and memory API, and what that release answered on it (expected.json; made by
scripts/make_upgrade_fixture.py, see data/SOURCES.md). Here the dump is restored into
an empty database, today's `ensure_schema` migrates it, and today's read and write
paths must find everything the old release stored: every memory row and version,
the library's passages, and the same answers to the recorded queries.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from library_pipeline.backup.backup import table_counts
from library_pipeline.backup.pgtools import server_major
from library_pipeline.backup.restore import replay_dump
from library_pipeline.backup.verify import with_dbname
from serving.db import Database
from serving.memory import Viewer, get_memory, index_memory, search_memory
from serving.search import search

UPGRADE = Path(__file__).resolve().parent / "data" / "upgrade"
EXPECTED: dict[str, Any] = json.loads((UPGRADE / "expected.json").read_text(encoding="utf-8"))
DUMP = UPGRADE / EXPECTED["dump"]
DUMP_MAJOR = int(EXPECTED["server_version"].split(".")[0])
VIEWERS = {k: Viewer(v["agent"], v["department"]) for k, v in EXPECTED["agents"].items()}
BY_ID = {m["id"]: m for m in EXPECTED["memories"]}
LIBRARY_QUERIES = [q for q in EXPECTED["queries"] if q["kind"] == "library"]
MEMORY_QUERIES = [q for q in EXPECTED["queries"] if q["kind"] == "memory"]
# tables whose rows are what the old release stored; not the keyword statistics (lexeme_df*,
# recounted per source by today's schema.sql) nor the ontology schema.sql seeds (kg_*_types:
# 11 relation types then, 13 today)
STORED_TABLES = ("documents", "pages", "chunks", "passages", "postings", "memories", "memory_access_log",
                 "search_log")


def restore(server_db: Database, library_dir: Path) -> Database:
    """An empty database on the session server (no schema), the dump restored into it,
    then opened by today's code."""
    name = f"t_upgrade_{uuid.uuid4().hex[:10]}"   # t_: scripts/services.py drops these on the external server
    with psycopg.connect(server_db.dsn, autocommit=True) as conn:
        major = server_major(conn)
        if major < DUMP_MAJOR:
            pytest.skip(f"the dump is of PostgreSQL {DUMP_MAJOR}; pg_restore loads it into {DUMP_MAJOR} or newer, "
                        f"this server is {major}")
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    dsn = with_dbname(server_db.dsn, name)
    # through the restore's own replay: one transaction, the extension left to the server
    replay_dump(dsn, DUMP, DUMP_MAJOR)
    settings = dataclasses.replace(server_db.settings, db_dsn=dsn, library_dir=library_dir)
    db = Database(settings)
    db.ensure_schema()
    return db


def counts(db: Database) -> dict[str, int]:
    with db.connect() as conn:
        return table_counts(conn)


@pytest.fixture(scope="module")
def upgraded(server_db: Database, tmp_path_factory: pytest.TempPathFactory) -> tuple[Database, dict[str, int]]:
    db = restore(server_db, tmp_path_factory.mktemp("upgrade") / "library")
    after_upgrade = counts(db)
    # a second start (a new process's Database) applies schema.sql again: it must change nothing
    Database(db.settings).ensure_schema()
    assert counts(db) == after_upgrade
    return db, after_upgrade


@pytest.fixture()
def conn(upgraded):
    with upgraded[0].connect(autocommit=True) as c:
        yield c


def test_stored_rows_survive_the_upgrade(upgraded):
    _, after = upgraded
    for table in STORED_TABLES:
        assert after[table] == EXPECTED["row_counts"][table], table
    # every table the old release had is still there, and the ontology only grew
    assert set(EXPECTED["row_counts"]) <= set(after)
    for table in ("kg_entity_types", "kg_relation_types"):
        assert after[table] >= EXPECTED["row_counts"][table], table


def test_keyword_statistics_recounted_per_source(conn):
    # the old release kept one row per text configuration over every source; today's
    # schema counts the library and the memories apart, and the migration recounts at once
    # rather than waiting for the next ingest
    totals = dict(((c, s), n) for c, s, n in conn.execute(
        "SELECT ts_config::text, source, passages FROM lexeme_df_totals"))
    live = dict(((c, s), n) for c, s, n in conn.execute(
        "SELECT ts_config::text, source, count(*) FROM passages WHERE NOT removed AND NOT superseded "
        "AND summary_level = 0 GROUP BY 1, 2"))
    assert totals == live and {s for _, s in totals} == {"library", "memory"}


def test_every_memory_row_is_as_the_old_release_wrote_it(conn):
    rows = conn.execute("SELECT id, agent, department, artifact_id, version, scope, type, meta, content, "
                        "content_hash, superseded, chunks FROM memories ORDER BY id").fetchall()
    cols = ("id", "agent", "department", "artifact_id", "version", "scope", "type", "meta", "content",
            "content_hash", "superseded", "chunks")
    assert [dict(zip(cols, r)) for r in rows] == EXPECTED["memories"]
    # the content hash is recomputed the same way by today's function
    assert conn.execute("SELECT count(*) FROM memories WHERE content_hash <> memory_content_hash(content)"
                        ).fetchone()[0] == 0
    # each superseded version's passages stay hidden, the live version's searchable
    stale = conn.execute("SELECT count(*) FROM passages p JOIN memories m ON m.id = p.memory_id "
                         "WHERE p.superseded <> m.superseded").fetchone()[0]
    assert stale == 0


def test_versions_of_reindexed_artifacts(conn):
    reindexed = {(m["agent"], m["artifact_id"]) for m in EXPECTED["memories"] if m["version"] == 2}
    assert len(reindexed) == 4
    author = {v.agent: v for v in VIEWERS.values()}
    for agent, aid in sorted(reindexed):
        got = get_memory(conn, author[agent], aid)
        old = [m for m in EXPECTED["memories"] if m["agent"] == agent and m["artifact_id"] == aid]
        assert [(v["id"], v["version"], v["superseded"]) for v in got["versions"]] == [
            (m["id"], m["version"], m["superseded"]) for m in sorted(old, key=lambda m: m["version"])]
        live = next(m for m in old if not m["superseded"])
        assert got["id"] == live["id"] and got["content"] == live["content"]
        assert got["meta"]["version"] == 2 and got["meta"]["task_id"] == live["meta"]["task_id"]
    for recorded in EXPECTED["gets"]:   # the old release's own reads, read again by the same viewer
        got = get_memory(conn, VIEWERS[recorded["viewer"]], recorded["artifact_id"])
        assert got["id"] == recorded["id"]
        assert [{k: v[k] for k in ("id", "version", "superseded")} for v in got["versions"]] == recorded["versions"]


def test_passages_per_file_unchanged(conn):
    files = conn.execute(
        "SELECT d.path, d.title, d.status, d.language, d.ts_config::text, "
        "(SELECT count(*) FROM passages p WHERE p.document_id = d.id AND p.summary_level = 0 AND NOT p.removed) "
        "FROM documents d ORDER BY d.path").fetchall()
    keys = ("path", "title", "status", "language", "ts_config", "passages")
    assert [dict(zip(keys, f)) for f in files] == EXPECTED["files"]


@pytest.mark.parametrize("query", LIBRARY_QUERIES, ids=[q["name"] for q in LIBRARY_QUERIES])
def test_library_search_answers_as_the_old_release(conn, embedder, query):
    resp = search(conn, embedder, query["query"], top_k=len(query["results"]))
    got = [(r.path, r.passage_id) for r in resp.results]
    old = [(r["path"], r["passage_id"]) for r in query["results"]]
    assert got[0][0] == old[0][0], (got, old)
    # the same passage first, too. Below the first, today's ranking differs on purpose and
    # is not compared: the old release fused by a convex combination, today's calibrated
    # fusion also lets the multilingual lane score English queries, so the two Russian
    # passages the old release put 4th and 5th for `en_lion_air` (multilingual hits only)
    # gave way to English ones, and `ru_beaupre` swaps its 3rd and 4th.
    assert got[0][1] == old[0][1], (got, old)


@pytest.mark.parametrize("query", MEMORY_QUERIES, ids=[q["name"] for q in MEMORY_QUERIES])
def test_memory_search_answers_as_the_old_release(conn, embedder, query):
    found = search_memory(conn, embedder, VIEWERS[query["viewer"]], query["query"], top_k=len(query["results"]))
    # the first record only: below it the old release ranked a Russian memory second for
    # `mem_tiktok` (a cross-script multilingual hit), which today's fusion drops from the top 5
    top, old = found["results"][0], query["results"][0]
    assert (top["id"], top["meta"]["artifact_id"], top["meta"]["version"]) == (
        old["id"], old["artifact_id"], old["version"])
    # a superseded version never comes back, nor a record the viewer may not see
    for r in found["results"]:
        if r["source"] != "memory":
            continue
        row = BY_ID[r["id"]]
        assert not row["superseded"]
        viewer = VIEWERS[query["viewer"]]
        assert row["scope"] == "global" or (row["scope"] == "department" and row["department"] == viewer.department) \
            or (row["scope"] == "self" and row["agent"] == viewer.agent), row


def test_new_memories_are_written_and_found_after_the_upgrade(server_db, embedder, tmp_path):
    # a restore of its own: this test writes, the module's database stays as restored
    db = restore(server_db, tmp_path / "library")
    ops = VIEWERS["ops"]
    with db.connect(autocommit=True) as conn:
        new = index_memory(conn, embedder, ops, artifact_id="inc-cold-storage", scope="department",
                           content="Incident: the cold storage room in Sharjah lost power for forty minutes; "
                                   "the generator failover switch was replaced.",
                           meta={"type": "incident", "task_id": "t-401", "date": "2026-12-06"})
        assert new.status == "created" and new.record["id"] > max(BY_ID)
        # an artifact of the old release gets a third version; its second is superseded
        third = index_memory(conn, embedder, ops, artifact_id="inc-db-disk", scope="department",
                             content="Incident closed: replication slot lag alerts fire at 1 GB; no recurrence "
                                     "in two weeks.",
                             meta={"type": "incident", "task_id": "t-301", "date": "2026-12-06"})
        assert third.status == "new_version" and third.record["version"] == 3
        versions = get_memory(conn, ops, "inc-db-disk")["versions"]
        assert [(v["version"], v["superseded"]) for v in versions] == [(1, True), (2, True), (3, False)]

        found = search_memory(conn, embedder, VIEWERS["ops"], "power outage in the cold storage room", top_k=3)
        assert found["results"][0]["id"] == new.record["id"]
        found = search_memory(conn, embedder, VIEWERS["ops"], "replication slot lag alerts", top_k=3)
        assert found["results"][0]["id"] == third.record["id"]
        # the old records are still found next to the new ones
        found = search_memory(conn, embedder, VIEWERS["analyst"], MEMORY_QUERIES[0]["query"], top_k=3)
        assert found["results"][0]["id"] == MEMORY_QUERIES[0]["results"][0]["id"]
