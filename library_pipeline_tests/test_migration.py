"""Re-embed migration: MiniLM -> paraphrase-MiniLM-L3-v2 (ONNX), with a real
SIGKILL of the migrating process midway, search answering between every step, and
the new model active at the end. Passages come from the real writers (the ingest
steps for a library file, index_memory for memories), so the migration's
reconstruction of each embedded text is checked against their embed_hash."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from library_pipeline.ingest.store import chunk_step, embed_step, extract_step, register_files
from library_pipeline.migrate.embedder import (EmbedderSpec, MigrationError, abort, active_model, counts, passage_text,
                                      run, start, status)
from serving.embedding import PARAPHRASE_MINILM_NAME, load_embedder
from serving.lexemes import refresh_lexeme_df
from serving.memory.store import index_memory, search_memory
from serving.migration import load_active_embedder
from serving.search import SearchConfig, search
from serving.search.types import Viewer

REPO = Path(__file__).resolve().parent.parent
CFG = SearchConfig(rerank=False, log_queries=False, label="migration-test")
NOTES = ["index.md", "build.md", "configuration.md", "hosting.md", "philosophy.md",
         "setting up your GitHub repository.md", "upgrading.md", "layout.md"]


@pytest.fixture(scope="module")
def onnx():
    return load_embedder("onnx")


def _library(make_db, tmp_path: Path, test_data: Path, embedder):
    lib = tmp_path / "library"
    lib.mkdir()
    src = test_data / "documents/pdf_scanned/federal-register-2020-17221_rasterized-p1-3.groundtruth.txt"
    shutil.copy(src, lib / "federal-register-notice.txt")
    db = make_db(lib)
    keys = register_files(db, {"federal-register-notice.txt": lib / "federal-register-notice.txt"})
    key = keys["federal-register-notice.txt"]
    assert extract_step(db, lib, key).status == "ok"
    assert chunk_step(db, key, embedder).status == "ok"
    assert embed_step(db, key, embedder).status == "ok"
    notes = test_data / "obsidian_vaults/quartz_docs"
    viewer = Viewer(agent="tester", department="research")
    with db.connect() as conn:
        for name in NOTES:
            path = next(notes.rglob(name))
            text = path.read_text(encoding="utf-8")[:1500]
            index_memory(conn, embedder, viewer, artifact_id=path.stem, content=text, scope="global",
                         meta={"type": "note"})
        refresh_lexeme_df(conn)
        conn.commit()
    return db


def _answers(db, embedder, query: str = "comment period for the proposed rule") -> list[int]:
    """A search with `embedder`; asserts the vector lane found rows of that model."""
    with db.connect() as conn:
        resp = search(conn, embedder, query, top_k=5, config=CFG)
    assert resp.results, resp.stages
    assert resp.stages["vector"].startswith("ok"), resp.stages
    return [r.passage_id for r in resp.results]


def _models(db) -> dict[str, int]:
    with db.connect() as conn:
        return dict(conn.execute("SELECT coalesce(embed_model, '-'), count(*) FROM passages GROUP BY 1").fetchall())


def test_migration_survives_sigkill_and_switches_atomically(make_db, tmp_path, test_data, embedder, onnx):
    db = _library(make_db, tmp_path, test_data, embedder)
    before = _models(db)
    assert set(before) == {embedder.name} and sum(before.values()) >= 40
    _answers(db, embedder)

    record = start(db, EmbedderSpec("onnx"), batch_size=8, embedder=onnx)
    assert record["source"] == embedder.name and record["target"]["name"] == PARAPHRASE_MINILM_NAME

    env = {**os.environ, "LIBRARY_DB_DSN": db.settings.db_dsn, "LIBRARY_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "library_pipeline.cli.migrate", "embedder", "resume",
                             "--pause", "0.3"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        done = 0
        while done < 16:  # two committed batches
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the migration made no progress"
            _answers(db, embedder)  # search answers from the old model meanwhile
            with db.connect() as conn:
                done = counts(conn, PARAPHRASE_MINILM_NAME)["done"]
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()

    # killed midway: progress kept, nothing switched, search still on the old model
    with db.connect() as conn:
        assert load_active_embedder(conn, lambda: embedder) is embedder
        st = status(conn)
        assert st["state"] == "running" and st["active"] == embedder.name
        assert 0 < st["done"] < st["total"] and st["remaining"] > 0
    assert _models(db) == before
    _answers(db, embedder)

    # a writer still on the old model adds a memory mid-migration: the resume (or the
    # switch's catch-up) must take it along
    with db.connect() as conn:
        index_memory(conn, embedder, Viewer(agent="tester"), artifact_id="late-note", scope="global",
                     content="Late note: the migration must also move memories written while it runs.")
        conn.commit()

    seen_during: list[int] = []
    out = run(db, embedder=onnx, on_batch=lambda res, left: seen_during.append(len(_answers(db, embedder))))
    assert out["switched"] and out["state"] == "done"
    assert seen_during and all(seen_during)
    assert out["text_mismatches"] == 0, "the migration embedded a text the writers did not"

    # the new model is active, every passage is on it, and search answers with it
    after = _models(db)
    assert set(after) == {PARAPHRASE_MINILM_NAME} and sum(after.values()) == sum(before.values()) + 1
    with db.connect() as conn:
        active = active_model(conn)
        assert active["name"] == PARAPHRASE_MINILM_NAME and active["backend"] == "onnx"
        assert active["previous"] == embedder.name
        # what serving and the pipeline load from now on, whatever LIBRARY_EMBED_* say
        assert load_active_embedder(conn, lambda: embedder) is onnx
        # the old vectors are kept aside (switching back embeds nothing), the new ones moved in
        kept = conn.execute("SELECT count(*) FROM passage_embeddings WHERE model = %s",
                            (embedder.name,)).fetchone()[0]
        assert kept == sum(before.values()) + 1  # the late memory was written with the old model too
        assert conn.execute("SELECT count(*) FROM passage_embeddings WHERE model = %s",
                            (PARAPHRASE_MINILM_NAME,)).fetchone()[0] == 0
        # stored vectors are the new model's vectors of the writers' texts
        rows = conn.execute("SELECT p.source, d.title, p.heading, p.content, p.embedding FROM passages p "
                            "LEFT JOIN documents d ON d.id = p.document_id ORDER BY p.id LIMIT 12").fetchall()
        fresh = onnx.encode_passages([passage_text(r[0], r[1], r[2], r[3]) for r in rows])
        stored = np.stack([r[4].to_numpy().astype(np.float32) for r in rows])
        assert float(np.min(np.sum(fresh * stored, axis=1))) > 0.99
        # the new model's HNSW indexes exist
        names = [r[0] for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'passages'")]
        assert any(PARAPHRASE_MINILM_NAME in n for n in names)
    ids = _answers(db, onnx)
    assert ids
    with db.connect() as conn:
        stale = search(conn, embedder, "comment period for the proposed rule", top_k=5, config=CFG)
        assert stale.stages["vector"].startswith("empty"), "an old-model query found rows"
        mem = search_memory(conn, onnx, Viewer(agent="tester"), "how do I host my site", top_k=3)
        assert mem["results"] and all(r["source"] == "memory" for r in mem["results"])


def test_start_refuses_and_abort_discards(make_db, tmp_path, test_data, embedder, onnx):
    db = make_db(tmp_path / "lib")
    viewer = Viewer(agent="tester")
    with db.connect() as conn:
        for i, name in enumerate(NOTES[:3]):
            text = next((test_data / "obsidian_vaults/quartz_docs").rglob(name)).read_text(encoding="utf-8")
            index_memory(conn, embedder, viewer, artifact_id=f"n{i}", content=text[:800], scope="self")
        conn.commit()
    with pytest.raises(MigrationError, match="no migration is running"):
        run(db, embedder=onnx)
    with pytest.raises(MigrationError, match="already the active model"):
        start(db, EmbedderSpec("minilm"), embedder=embedder)
    start(db, EmbedderSpec("onnx"), batch_size=2, embedder=onnx)
    with pytest.raises(MigrationError, match="already running"):
        start(db, EmbedderSpec("onnx"), embedder=onnx)
    out = run(db, embedder=onnx, max_batches=1)
    assert not out["switched"] and out["done"] == 2 and out["remaining"] > 0

    # progress shows in `library status` and `library migrate embedder status`
    from typer.testing import CliRunner

    from library_pipeline.cli.main import app

    env = {"LIBRARY_DB_DSN": db.settings.db_dsn, "LIBRARY_HOME": str(tmp_path / "home")}
    shown = CliRunner().invoke(app, ["status"], env=env)
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.split())  # rich wraps the line to the terminal width
    assert f"running: 2/{out['total']} passages done, {out['remaining']} remaining" in flat
    st = CliRunner().invoke(app, ["migrate", "embedder", "status", "--json"], env=env)
    assert json.loads(st.output)["remaining"] == out["remaining"]
    aborted = abort(db)
    assert aborted["state"] == "aborted" and aborted["dropped_vectors"] == 2
    with db.connect() as conn:
        assert status(conn)["state"] == "aborted"
        assert conn.execute("SELECT count(*) FROM passage_embeddings").fetchone()[0] == 0
        assert active_model(conn)["name"] == embedder.name
    assert set(_models(db)) == {embedder.name}
    with pytest.raises(MigrationError, match="no migration is running"):
        abort(db)


def test_reembed_asset_reports_progress_and_switches(make_db, tmp_path, test_data, embedder, onnx):
    import dagster as dg

    from library_pipeline.defs.ops.reembed import reembed_migration
    from library_pipeline.resources import LibraryDatabase

    db = make_db(tmp_path / "lib")
    with db.connect() as conn:
        for i, name in enumerate(NOTES[:4]):
            text = next((test_data / "obsidian_vaults/quartz_docs").rglob(name)).read_text(encoding="utf-8")
            index_memory(conn, embedder, Viewer(agent="tester"), artifact_id=f"n{i}", content=text[:600],
                         scope="global")
        conn.commit()
    resources = {"library_db": LibraryDatabase.from_settings(db.settings)}

    def materialize(**config):
        result = dg.materialize([reembed_migration], resources=resources,
                                run_config={"ops": {"reembed_migration": {"config": config}}})
        assert result.success
        mats = result.asset_materializations_for_node("reembed_migration")
        return {k: v.value for k, v in mats[0].metadata.items()}

    idle = materialize()
    assert idle["state"] == "none" and idle["active model"] == embedder.name
    start(db, EmbedderSpec("onnx"), batch_size=1, embedder=onnx)
    partial = materialize(max_seconds=0.01)  # one batch, then it stops; progress kept
    assert partial["state"] == "running" and partial["model"] == PARAPHRASE_MINILM_NAME
    assert partial["done"] >= 1 and partial["remaining"] >= 1
    final = materialize()
    assert final["state"] == "done" and final["remaining"] == 0
    assert final["active model"] == PARAPHRASE_MINILM_NAME
    # the pipeline's embedder resource and the serving runtime now load the switched-to
    # model although the environment (LIBRARY_EMBED_*) still names MiniLM
    from library_pipeline.resources import EmbedderResource
    from serving.runtime import Library

    configured = EmbedderResource.from_settings(db.settings)
    assert configured.get().name == embedder.name
    assert configured.get(db).name == PARAPHRASE_MINILM_NAME
    library = Library(db.settings)
    try:
        assert library.embedder().name == PARAPHRASE_MINILM_NAME
    finally:
        library.close()
