"""Changes to the library: edits re-embed only what changed, a SIGKILL in
the middle of a file's swap leaves the old version whole, removal hides and
purge deletes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import dagster as dg
import pytest

from library_pipeline.defs.ingest.partitions import partition_key_for
from library_pipeline.launch.ingest_runner import purge_removed_files
from library_pipeline_tests.ingest_helpers import doc_rows, ingest, latest_metadata, write

PARAGRAPHS = [
    f"Paragraph {i}. " + " ".join(
        f"The {w} of chapter {i} is discussed with care, and its {w}s are counted one by one."
        for w in ("lighthouse", "harbour", "keeper", "storm", "lantern", "reef"))
    for i in range(40)
]


@pytest.fixture()
def instance():
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def passages_of(db, relpath: str) -> list[tuple]:
    with db.connect() as conn:
        return conn.execute(
            "SELECT p.id, p.ordinal, p.content, p.embedding::text FROM passages p JOIN documents d "
            "ON d.id = p.document_id WHERE d.path = %s AND p.summary_level = 0 ORDER BY p.ordinal",
            (relpath,)).fetchall()


def test_edit_reembeds_only_changed_passages(make_db, instance):
    db = make_db()
    path = write(db.settings.library_dir / "notes/lighthouse.txt", "\n\n".join(PARAGRAPHS))
    first = ingest(db, instance)
    assert first["failed"] == 0
    total = latest_metadata(instance, "embeddings")["passages"]
    assert total >= 10
    edited = list(PARAGRAPHS)
    edited[20] = "Paragraph 20 was rewritten: the keeper left the lighthouse and never came back."
    path.write_text("\n\n".join(edited), encoding="utf-8")
    ingest(db, instance)
    meta = latest_metadata(instance, "embeddings")
    assert 1 <= meta["embedded"] <= 3, meta  # the edited window and its overlapping neighbours
    assert meta["reused"] >= meta["passages"] - 3
    assert any("never came back" in p[2] for p in passages_of(db, "notes/lighthouse.txt"))


CRASH_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from serving.db import Database
    from serving.settings import Settings
    from serving.embedding import load_embedder
    from library_pipeline.ingest.store import chunk_step, embed_step, extract_step
    import dataclasses, json
    cfg = json.loads(sys.argv[1])
    settings = dataclasses.replace(Settings.from_env(), db_dsn=cfg["dsn"], library_dir=__import__("pathlib").Path(cfg["lib"]))
    db = Database(settings)
    emb = load_embedder("minilm")
    def hook(point):
        if point == cfg["point"]:
            os.kill(os.getpid(), signal.SIGKILL)
    extract_step(db, settings.library_dir, cfg["key"])
    chunk_step(db, cfg["key"], emb)
    embed_step(db, cfg["key"], emb, crash_hook=hook)
""")


@pytest.mark.parametrize("point", ["before_swap", "inside_swap"])
def test_sigkill_during_ingest_leaves_old_version_whole(make_db, instance, point):
    db = make_db()
    rel = "lighthouse.txt"
    path = write(db.settings.library_dir / rel, "\n\n".join(PARAGRAPHS))
    ingest(db, instance)
    before = passages_of(db, rel)
    assert before
    path.write_text("\n\n".join(p.replace("lighthouse", "windmill") for p in PARAGRAPHS), encoding="utf-8")
    cfg = {"dsn": db.dsn, "lib": str(db.settings.library_dir), "key": partition_key_for(rel), "point": point}
    proc = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, json.dumps(cfg)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert passages_of(db, rel) == before  # old version whole: same ids, text and vectors
    assert doc_rows(db)[rel]["status"] == "ingested"
    # the rerun completes the new version, with no duplicate passages
    ingest(db, instance)
    after = passages_of(db, rel)
    assert all("windmill" in p[2] or "lighthouse" not in p[2] for p in after)
    assert len({p[1] for p in after}) == len(after)


def test_removed_file_hidden_then_purged(make_db, instance):
    db = make_db()
    write(db.settings.library_dir / "keep.txt", "\n\n".join(PARAGRAPHS[:5]))
    gone = write(db.settings.library_dir / "gone.txt", "\n\n".join(PARAGRAPHS[5:10]))
    ingest(db, instance)
    gone.unlink()
    summary = ingest(db, instance)
    assert summary["removed"] == 1
    docs = doc_rows(db)
    assert docs["gone.txt"]["status"] == "removed" and docs["gone.txt"]["passages"] == 0
    with db.connect() as conn:  # rows are kept, only hidden, until purge
        kept = conn.execute("SELECT count(*) FROM passages p JOIN documents d ON d.id = p.document_id "
                            "WHERE d.path = 'gone.txt' AND p.removed").fetchone()[0]
    assert kept > 0
    assert purge_removed_files(db, instance) == ["gone.txt"]
    assert "gone.txt" not in doc_rows(db)
    assert partition_key_for("gone.txt") not in instance.get_dynamic_partitions("library_files")
    assert doc_rows(db)["keep.txt"]["status"] == "ingested"
