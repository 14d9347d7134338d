"""Memory search precision (target > 0.7 on each language half): the fixed memory
eval set is what its builder makes from the test material, and the asset check
scores it through index_memory + search_memory in its own database with the real
embedder."""

from __future__ import annotations

import json

import dagster as dg

from library_pipeline.defs.eval.checks import memory_search_precision
from library_pipeline.defs.memory.assets import MemoryClock, memory_retention
from library_pipeline.eval.build_memory_set import OUT, build
from library_pipeline.eval.beir import eval_database, release
from library_pipeline.eval.memory_eval import load_memory_set, score_memory_set
from library_pipeline.resources import EmbedderResource, LibraryDatabase


def test_shipped_set_is_rebuilt_from_test_data(test_data):
    shipped = json.loads(OUT.read_text(encoding="utf-8"))
    assert build(test_data) == shipped
    mset = load_memory_set()
    assert len(mset["queries"]) >= 30 and len(mset["artifacts"]) >= 40
    for a in mset["artifacts"]:
        assert (test_data / a["source"].split("#")[0]).is_file() and len(a["content"]) >= 120
    halves = {q["lang"] for q in mset["queries"]}
    assert halves == {"en", "ru"} and sum(q["lang"] == "ru" for q in mset["queries"]) >= 30
    # some relevant artifacts are self / department records of the viewer, and the
    # outsider's records exist to be (not) found
    scopes = {a["scope"] for a in mset["artifacts"]}
    assert scopes == {"self", "department", "global"}
    assert any(a["agent"] == "eval-outsider" for a in mset["artifacts"])


def test_precision_check_passes_and_can_fail(db, embedder, tmp_path):
    resources = {"library_db": LibraryDatabase.from_settings(db.settings),
                 "embedder": EmbedderResource.from_settings(db.settings), "memory_clock": MemoryClock()}
    result = dg.materialize([memory_retention, memory_search_precision], resources=resources)
    evaluation = result.get_asset_check_evaluations()[0]
    meta = {k: v.value for k, v in evaluation.metadata.items()}
    assert evaluation.passed, meta
    assert meta["precision@R"] > 0.7 and meta["visibility leaks"] == "none" and meta["queries"] >= 60
    assert meta["precision@R en"] > 0.7 and meta["precision@R ru"] > 0.7, meta

    # the same set with an unreachable bar fails: the check is not a formality
    strict = json.loads(OUT.read_text(encoding="utf-8"))
    strict["threshold"]["precision@R"] = 0.99
    path = tmp_path / "strict.json"
    path.write_text(json.dumps(strict), encoding="utf-8")
    eval_db = eval_database("memory", base=db)  # still holds the set the check loaded
    try:
        with eval_db.connect() as conn:
            failing = score_memory_set(conn, embedder, load_memory_set(path))
    finally:
        release(eval_db)
    assert not failing.passed and failing.metrics["precision@R"] == meta["precision@R"]
    # the live memory store was never touched: the set went to its own database
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
