"""Query logs: every library_search and memory_search call, made through
the real MCP client against the real server object, leaves one search_log row with
the query, the caller (from the transport, not an argument), filters, the ids and
lanes it returned in order, and the latency; LIBRARY_QUERY_LOG=off writes none;
retention prunes old rows (the asset the daily schedule runs). Then `library eval
real-set` builds a PII-light query set from those rows."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import dagster as dg
import pytest
from mcp import Client

from library_pipeline.defs.ops.reembed import query_log_retention
from library_pipeline.eval.realset import build_real_set, scrub
from library_pipeline.resources import LibraryDatabase
from library_pipeline_tests.search_fixtures import small_library
from serving.mcp_server import build_server
from serving.memory.store import index_memory
from serving.runtime import Library
from serving.search.types import Viewer

SCOUT = Viewer(agent="Agent-Scout", department="marketing")


@pytest.fixture()
def logged(db, embedder, test_data):
    small_library(db, embedder, test_data, books=1)
    with db.connect() as conn:
        index_memory(conn, embedder, SCOUT, artifact_id="pricing-notes", scope="department",
                     content="Pricing test for the spring campaign: the 9.99 tier converted best.")
        index_memory(conn, embedder, SCOUT, artifact_id="holmes-reading", scope="self",
                     content="Reading notes: Sherlock Holmes deduces a visitor's travels from his tan.")
        conn.commit()
    lib = Library(db.settings, embedder=embedder)
    yield db, lib
    lib.close()


def _rows(db) -> list[dict]:
    with db.connect() as conn:
        cur = conn.execute("SELECT id, kind, query, caller_agent, caller_department, filters, results, returned, "
                           "top_k, latency_ms, lanes, config FROM search_log ORDER BY id")
        names = [c.name for c in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


async def _calls(lib) -> tuple[dict, dict]:
    async with Client(build_server(lib, stdio_identity=SCOUT)) as client:
        lib_res = await client.call_tool("library_search", {"query": "Sherlock Holmes and the red-headed league",
                                                            "top_k": 4, "filters": {"source": "library"}})
        mem_res = await client.call_tool("memory_search", {"query": "which price tier converted best",
                                                           "top_k": 2})
    assert not lib_res.is_error and not mem_res.is_error
    return lib_res.structured_content, mem_res.structured_content


def test_every_call_is_logged_with_caller_ids_and_latency(logged, monkeypatch):
    db, lib = logged
    monkeypatch.delenv("LIBRARY_QUERY_LOG", raising=False)
    searched, remembered = asyncio.run(_calls(lib))
    rows = _rows(db)
    assert [r["kind"] for r in rows] == ["library", "memory"]
    lib_row, mem_row = rows

    assert lib_row["query"] == "Sherlock Holmes and the red-headed league"
    assert (lib_row["caller_agent"], lib_row["caller_department"]) == ("Agent-Scout", "marketing")
    assert "viewer" not in lib_row["filters"] and lib_row["filters"]["sources"] == ["library"]
    returned = [r["id"] for r in searched["results"]]
    assert returned and [r["id"] for r in lib_row["results"]] == returned
    assert lib_row["returned"] == len(returned) and lib_row["top_k"] == 4
    assert all(r["lanes"] for r in lib_row["results"])  # each result says which lanes found it
    assert lib_row["latency_ms"] > 0 and lib_row["lanes"]["vector"] > 0

    assert mem_row["caller_agent"] == "Agent-Scout" and mem_row["config"] == "memory"
    assert [r["id"] for r in mem_row["results"]] == [r["id"] for r in remembered["results"]]
    assert mem_row["returned"] == remembered["returned"] and mem_row["top_k"] == 2
    assert mem_row["latency_ms"] > 0

    # opt-out: nothing written, searches unaffected
    monkeypatch.setenv("LIBRARY_QUERY_LOG", "off")
    searched_again, _ = asyncio.run(_calls(lib))
    assert searched_again["results"]
    assert len(_rows(db)) == 2


def test_retention_asset_prunes_old_rows(logged, monkeypatch):
    db, lib = logged
    asyncio.run(_calls(lib))
    with db.connect() as conn:
        conn.execute("UPDATE search_log SET at = now() - interval '40 days' WHERE kind = 'library'")
        conn.commit()
    # the resource's settings decide, not the environment the run's process happens to have
    monkeypatch.setenv("LIBRARY_QUERY_LOG_DAYS", "5")
    settings = dataclasses.replace(db.settings, query_log_days=30)
    result = dg.materialize([query_log_retention], resources={"library_db": LibraryDatabase.from_settings(settings)})
    meta = result.asset_materializations_for_node("query_log_retention")[0].metadata
    assert meta["deleted"].value == 1 and meta["kept"].value == 1 and meta["retention_days"].value == 30
    assert [r["kind"] for r in _rows(db)] == ["memory"]


def test_real_set_is_deduplicated_and_carries_no_caller(logged, tmp_path):
    db, lib = logged
    asyncio.run(_calls(lib))
    with db.connect() as conn:
        # the same query typed differently, and one with an e-mail address in it
        for query in ("  sherlock holmes AND the Red-Headed League ", "notes from jane.doe@example.com about pricing"):
            lib.search(query, top_k=3)
        conn.execute("UPDATE search_log SET caller_agent = 'Agent-Ops' WHERE caller_agent IS NULL")
        conn.commit()
        data = build_real_set(conn)
    queries = {q["query"]: q for q in data["queries"]}
    assert len(data["queries"]) == 3, queries.keys()
    holmes = queries["Sherlock Holmes and the red-headed league"]
    assert holmes["count"] == 2 and holmes["callers"] == 2 and holmes["kind"] == "library"
    assert "notes from <email> about pricing" in queries
    assert queries["which price tier converted best"]["kind"] == "memory"
    text = json.dumps(data)
    assert "Agent-Scout" not in text and "Agent-Ops" not in text and "marketing" not in text
    assert "jane.doe" not in text
    assert data["shape"]["queries"] == 3 and 0 < data["shape"]["mean_words"] < 10
    assert scrub("call +1 (555) 123-4567 or 4111 1111 1111 1111") == "call <number> or <number>"


def test_real_set_cli_writes_a_set_the_pool_command_reads(logged, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from library_pipeline.eval.cli import eval_app

    db, lib = logged
    asyncio.run(_calls(lib))
    monkeypatch.setenv("LIBRARY_DB_DSN", db.settings.db_dsn)
    monkeypatch.setenv("LIBRARY_HOME", str(tmp_path / "home"))
    out = tmp_path / "real.json"
    result = CliRunner().invoke(eval_app, ["real-set", str(out)])
    assert result.exit_code == 0, result.output
    assert "mean_words" in result.output and "synthetic" in result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    # the shape `library eval pool --queries` reads: {"queries": [{"id", "query"}]}
    assert {q["id"]: q["query"] for q in data["queries"]} == {
        "real-1": "Sherlock Holmes and the red-headed league", "real-2": "which price tier converted best"}
