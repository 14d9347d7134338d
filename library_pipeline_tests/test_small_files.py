"""Many small files in one range run: their passages are embedded across files
in one encode call per model, and each file is still its own unit - a hostile file fails
alone, every other file's passages are exactly its chunks, with the vectors the
model gives for those texts."""

from __future__ import annotations

import hashlib

import dagster as dg
import numpy as np
import psycopg
import pytest
from pgvector import HalfVector

from library_pipeline.ingest.store import ReusedConnection
from library_pipeline.launch.ingest_runner import run_ingest
from serving.embedding import embed_text_for_passage, multilingual_embedder

TOPICS = ["tidal energy in narrow straits", "sourdough starter hydration", "glacier retreat in the Alps",
          "bicycle frame geometry", "Byzantine coin hoards", "octopus camouflage"]


def test_small_files_are_embedded_in_one_batch_and_stay_atomic(db, embedder):
    root = db.settings.library_dir
    for i in range(24):
        topic = TOPICS[i % len(TOPICS)]
        (root / f"note-{i:02d}.txt").write_text(
            f"Note {i} on {topic}.\n\nThis short note number {i} records one observation about {topic}, "
            f"written on day {i * 7 % 31} of the survey.")
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n" + b"\x00\xff" * 500)
    with dg.DagsterInstance.ephemeral() as instance:
        summary = run_ingest(db, instance=instance, progress=False, batch=200)
        assert summary["runs"] == 2, summary  # one range run + the lexeme refresh
        runs = [r.run_id for r in instance.get_runs() if "dagster/asset_partition_range_start" in r.tags]
        assert len(runs) == 1
        meta = {}
        for record in instance.get_records_for_run(runs[0]).records:
            event = record.event_log_entry.dagster_event
            if event and event.is_step_materialization:
                mat = event.event_specific_data.materialization
                if mat.asset_key.to_user_string() == "embeddings":
                    meta = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    assert summary["ingested"] == 24 and summary["failed"] == 1, summary
    assert summary["failures"][0][0] == "broken.pdf"
    # all 24 files' passages in one encode call per model (both vector lanes)
    assert meta["batched_encode_calls"] == 1 and meta["embedded"] == meta["passages"] > 0, meta
    assert meta["batched_encode_calls_multilingual"] == 1, meta
    assert meta["embedded_multilingual"] == meta["passages"], meta

    with db.connect() as conn:
        rows = conn.execute(
            "SELECT d.path, d.title, c.heading, c.content, p.embedding, p.embedding_multi, "
            "       (SELECT count(*) FROM chunks c2 WHERE c2.document_id = d.id), "
            "       (SELECT count(*) FROM passages p2 WHERE p2.document_id = d.id AND p2.summary_level = 0) "
            "FROM documents d JOIN chunks c ON c.document_id = d.id "
            "JOIN passages p ON p.document_id = d.id AND p.ordinal = c.ordinal AND p.summary_level = 0 "
            "WHERE d.status = 'ingested' ORDER BY d.path, c.ordinal").fetchall()
    assert {r[0] for r in rows} == {f"note-{i:02d}.txt" for i in range(24)}
    assert all(r[6] == r[7] for r in rows)  # each file: passages == chunks
    # the vectors are each model's for each file's own texts (batching changes padding only)
    texts = [embed_text_for_passage(r[1], r[2], r[3]) for r in rows]
    for model, column in ((embedder, 4), (multilingual_embedder(), 5)):
        alone = model.encode_passages(texts[:3])
        stored = np.array([r[column].to_list() for r in rows[:3]], dtype=np.float32)
        cosine = (alone * stored).sum(axis=1) / (np.linalg.norm(alone, axis=1) * np.linalg.norm(stored, axis=1))
        assert cosine.min() > 0.99, (model.name, cosine)


def test_a_range_run_does_not_repeat_per_file_what_its_group_already_did(db, monkeypatch):
    """Two per-file costs of a range run of small files, gone: the stored-vector lookups
    (the group's encode ahead made them for all its files: one per vector lane) and the
    index check (a transaction a file; once per database now)."""
    from serving.passage_writer import PassageWriter

    root = db.settings.library_dir
    for i in range(12):
        (root / f"note-{i:02d}.txt").write_text(f"Field note {i}: a short record about {TOPICS[i % 6]}, day {i}.")
    lookups, checks = [], []
    execute, ensure = psycopg.Connection.execute, PassageWriter.ensure_indexes

    def spy_execute(self, query, params=None, *args, **kwargs):
        if isinstance(query, str) and "embed_hash = ANY" in query:
            lookups.append(query)
        return execute(self, query, params, *args, **kwargs)

    def spy_ensure(self, conn, **kwargs):
        checks.append(conn)
        return ensure(self, conn, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", spy_execute)
    monkeypatch.setattr(PassageWriter, "ensure_indexes", spy_ensure)
    with dg.DagsterInstance.ephemeral() as instance:
        summary = run_ingest(db, instance=instance, progress=False, batch=200)
    assert summary["ingested"] == 12, summary
    lanes = 1 + (multilingual_embedder() is not None)
    assert len(lookups) == lanes, lookups
    assert len(checks) == 1


def test_reused_connection_keeps_each_block_atomic_and_replaces_a_dropped_connection(db):
    """The range steps share one connection: each block still commits or rolls back
    on its own, and a connection the server dropped is replaced, not reused."""
    with db.connect() as conn:
        conn.execute("CREATE TABLE reuse_probe (x int)")
    seen = lambda: {r[0] for r in db.connect().execute("SELECT x FROM reuse_probe").fetchall()}  # noqa: E731
    with ReusedConnection(db) as shared:
        with pytest.raises(ZeroDivisionError):
            with shared.transaction() as conn:
                first_pid = conn.info.backend_pid
                conn.execute("INSERT INTO reuse_probe VALUES (1)")
                1 / 0
        with shared.transaction() as conn:
            conn.execute("INSERT INTO reuse_probe VALUES (2)")
        with shared.connect() as conn:
            conn.execute("INSERT INTO reuse_probe VALUES (3)")
            assert conn.info.backend_pid == first_pid  # one connection for all blocks
        with pytest.raises(ZeroDivisionError):
            with shared.connect() as conn:
                conn.execute("INSERT INTO reuse_probe VALUES (4)")
                1 / 0
        assert seen() == {2, 3}  # committed at each block's end, the failed blocks rolled back
        with db.connect() as other:
            other.execute("SELECT pg_terminate_backend(%s, 10000)", (first_pid,))  # waits for its exit
        with shared.transaction() as conn:
            assert conn.info.backend_pid != first_pid
            conn.execute("INSERT INTO reuse_probe VALUES (5)")
    assert seen() == {2, 3, 5}


def test_a_first_sync_builds_the_vector_indexes_once_after_its_rows(db, embedder):
    """A range run writes a new library's passages without the verbatim HNSW indexes
    (pgvector inserting each row into the graph cost five times the rest of a small file's
    write); search meanwhile reads the rows by exact scan; the corpus-index refresh after
    the sync builds the indexes, and the vector lane then reads through them - with the
    same answer."""
    from library_pipeline.defs.ingest.assets import chunks, embeddings, extracted_text
    from library_pipeline.defs.ingest.vector_indexes import vector_indexes_present
    from library_pipeline.definitions import definitions_for
    from library_pipeline.launch import plans as launch
    from library_pipeline.resources import EmbedderResource, LibraryDatabase
    from library_pipeline.launch.run_plan import range_tags
    from library_pipeline_tests.ingest_helpers import latest_metadata
    from serving.search import search
    from serving.search.filters import passage_predicate
    from serving.search.types import SearchFilters
    from serving.search.vector import vector_sql

    root = db.settings.library_dir
    for i in range(12):
        topic = TOPICS[i % len(TOPICS)]
        (root / f"note-{i:02d}.txt").write_text(f"Field note {i}: a short record about {topic}, day {i}.")
    multi = multilingual_embedder()
    tag, mtag = (hashlib.md5(m.name.encode()).hexdigest()[:10] for m in (embedder, multi))
    verbatim = {f"passages_hnsw_{tag}", f"passages_hnsw_multi_{mtag}"}
    summaries = {f"passages_hnsw_summary_{tag}", f"passages_hnsw_multi_summary_{mtag}"}
    library_db = LibraryDatabase.from_settings(db.settings)

    def indexes() -> set[str]:
        with db.connect() as conn:
            return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'passages' "
                                               "AND indexname LIKE 'passages_hnsw%'")}

    def lane_plan_and_answer() -> tuple[str, list[int]]:
        pred = passage_predicate(SearchFilters())
        qvec = embedder.encode_queries(["octopus camouflage"])[0]
        with db.connect() as conn:
            # a dozen rows: the planner would rather sort them; is the index there to use?
            conn.execute("SET enable_seqscan = off")
            plan = "\n".join(r[0] for r in conn.execute(
                psycopg.sql.SQL("EXPLAIN ") + vector_sql(embedder.name, embedder.dims, pred, summaries=False),
                {**pred.params, "qvec": HalfVector(qvec), "k": 5}))
            conn.execute("RESET enable_seqscan")
            found = search(conn, embedder, "octopus camouflage", top_k=5)
        assert found.stages["vector"].startswith("ok") and found.stages["multilingual"].startswith("ok")
        return plan, [r.passage_id for r in found.results]

    with dg.DagsterInstance.ephemeral() as instance:
        changes = launch.library_changes(db, instance)
        plan = launch.ingest_plan(changes, "test")
        launch.register(plan, instance)
        order = instance.get_dynamic_partitions(launch.LIBRARY_FILES)
        run = dg.materialize([extracted_text, chunks, embeddings], instance=instance, tags=range_tags(order),
                             resources={"library_db": library_db,
                                        "embedder": EmbedderResource.from_settings(db.settings)},
                             run_config=launch.QUIET_RUN_CONFIG)
        assert run.success
        assert indexes() == summaries   # the verbatim ones wait for the end of the sync
        check = vector_indexes_present(library_db=library_db)
        missing = getattr(check.metadata["missing"], "value", check.metadata["missing"])
        assert not check.passed and "(embedding, 12 passages)" in missing and "embedding_multi" in missing
        before_plan, before = lane_plan_and_answer()
        assert "passages_hnsw" not in before_plan and before

        # what follows the sync: the ingest job's automation
        refresh = launch.Launched()
        launch.follow_up(plan, instance, refresh, definitions_for(db.settings))
        assert refresh.runs == 1 and not refresh.failed_runs
        assert indexes() == summaries | verbatim
        built = latest_metadata(instance, "vector_indexes")
        assert all(name in built["built"] for name in verbatim) and built["passages"] == 12, built
        assert vector_indexes_present(library_db=library_db).passed
        after_plan, after = lane_plan_and_answer()
        assert f"passages_hnsw_{tag}" in after_plan and after == before

        # the next sync finds them built: nothing to do
        launch.follow_up(plan, instance, refresh, definitions_for(db.settings))
        assert refresh.runs == 2 and not refresh.failed_runs
        assert latest_metadata(instance, "vector_indexes")["built"] == "nothing missing"
