"""A 10-second version of benchmarks/load.py: 20 real MCP clients over
streamable HTTP (one bearer token each) searching and indexing memories while a
forked ingest process re-ingests new arrivals and the memory upkeep loops.
Zero errors allowed: no 429 / 413 for honest clients under the default limits,
no pool timeouts, no internal errors."""

from __future__ import annotations

import logging

import dagster as dg

from library_pipeline.testing import crash, load
from library_pipeline_tests.ingest_helpers import ingest

log = logging.getLogger(__name__)


def test_20_mcp_clients_under_ingest_and_upkeep(make_db, tmp_path):
    library = tmp_path / "library"
    db = make_db(library)
    crash.write_small_library(library, files=4)
    with dg.DagsterInstance.ephemeral() as instance:
        assert ingest(db, instance)["ingested"] == 4
    figures = load.run_load(db.settings.db_dsn, library, tmp_path, clients=20, seconds=10)
    log.info("load: %s", figures)
    assert figures["errors"] == 0, figures["error_samples"]
    assert figures["calls"] >= 40 and set(figures["per_tool"]) == {"library_search", "memory_search", "memory_index"}
    assert figures["ingest_runs_during_load"] >= 1 and figures["upkeep_rounds_during_load"] >= 1
    assert figures["http_429_or_413_in_server_log"] == 0
    with db.connect() as conn:  # what the clients indexed is stored, once per artifact
        stored, distinct = conn.execute("SELECT count(*), count(DISTINCT (agent, artifact_id)) FROM memories "
                                        "WHERE artifact_id LIKE 'load-%%' AND NOT superseded").fetchone()
    assert stored == distinct >= 1
