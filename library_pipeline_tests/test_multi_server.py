"""Several MCP servers on one database: two `library serve --http` processes on
distinct ports against the external PostgreSQL, driven by the real MCP client.
They answer the same searches; a memory written through one is found through
the other at once; the circuit breaker and the query log, which live in the
database, count the calls of both."""

from __future__ import annotations

import asyncio
import os
from contextlib import AsyncExitStack
from pathlib import Path

import dagster as dg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from library_pipeline.launch.ingest_runner import run_ingest
from library_pipeline_tests.conftest import REPO, new_database
from library_pipeline_tests.http_helpers import mcp_http_server

pytestmark = [pytest.mark.external]

TOKEN = "token-scout-multi-1"
IDENTITIES = f"""
[tokens."{TOKEN}"]
agent = "Agent-Scout"
department = "marketing"
"""

TEXTS = {
    "lighthouses.txt": "Lighthouse keepers on the Cornish coast trimmed the lamp wicks every four hours. "
                       "Fresnel lenses focused the beam so ships saw it twenty miles out at sea. "
                       "Storms cracked the lantern glass twice during the winter of 1891.",
    "beekeeping.txt": "A honey bee colony raises a new queen when the old one fails: workers feed royal jelly "
                      "to a few larvae in queen cells. Swarming splits the colony in late spring, and the "
                      "beekeeper catches the swarm in an empty hive box.",
    "volcanoes.txt": "Basaltic lava from shield volcanoes flows far before it cools; explosive eruptions of "
                     "andesite volcanoes throw ash columns into the stratosphere and cool the climate for "
                     "a year or two afterwards.",
}
QUERIES = ["how were lighthouse lamps maintained", "why does a bee colony swarm", "volcanic ash and climate"]


def library_serve_http(env: dict[str, str], log_path: Path, timeout: float = 180):
    """`library serve --http` on a free port until the block ends; yields its URL."""
    return mcp_http_server(env, log_path, timeout=timeout, module=("library_pipeline.cli.main", "serve"))


async def _call(client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    text = "\n".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, text
    return result.structured_content or {}


def test_two_http_servers_share_one_database(server_db, tmp_path):
    library = tmp_path / "library"
    library.mkdir()
    for name, text in TEXTS.items():
        (library / name).write_text(text)
    db = new_database(server_db, library)
    with dg.DagsterInstance.ephemeral() as instance:
        summary = run_ingest(db, instance=instance, progress=False)
    assert summary["ingested"] == len(TEXTS), summary

    identities = tmp_path / "identities.toml"
    identities.write_text(IDENTITIES)
    env = {k: v for k, v in os.environ.items() if k not in ("LIBRARY_AGENT", "LIBRARY_DEPARTMENT",
                                                            "LIBRARY_MCP_TOKEN", "LIBRARY_DAGSTER_DSN")}
    env.update({"LIBRARY_DB_DSN": db.dsn, "LIBRARY_HOME": str(tmp_path / "home"), "LIBRARY_DIR": str(library),
                "LIBRARY_IDENTITIES": str(identities), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONPATH": str(REPO), "LIBRARY_LOG_LEVEL": "WARNING"})

    with library_serve_http(env, tmp_path / "one.log") as url_one, \
            library_serve_http(env, tmp_path / "two.log") as url_two:
        assert url_one != url_two

        async def run() -> dict:
            async with AsyncExitStack() as stack:
                clients = []
                for url in (url_one, url_two):
                    http = await stack.enter_async_context(
                        create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}))
                    clients.append(await stack.enter_async_context(
                        Client(streamable_http_client(url, http_client=http), read_timeout_seconds=180)))
                one, two = clients
                out: dict = {"searches": 0}
                # the same searches, the same answers
                for query in QUERIES:
                    a = await _call(one, "library_search", {"query": query, "top_k": 3})
                    b = await _call(two, "library_search", {"query": query, "top_k": 3})
                    out["searches"] += 2
                    ids_a = [r["id"] for r in a["results"]]
                    ids_b = [r["id"] for r in b["results"]]
                    assert ids_a and ids_a == ids_b, (query, a, b)
                # a memory written through one is found through the other at once
                written = await _call(one, "memory_index", {
                    "artifact_id": "multi-server-note", "scope": "self",
                    "content": "Quarterly inventory: the warehouse in Tromsø holds 412 snow shovels."})
                found = await _call(two, "memory_search", {"query": "snow shovels in the Tromsø warehouse",
                                                           "top_k": 5})
                out["searches"] += 1
                assert found["results"] and found["results"][0]["id"] == written["id"], found
                got = await _call(two, "memory_get", {"id": written["id"]})
                assert "412 snow shovels" in got["content"]
                out["memory_id"] = written["id"]
                # the breaker: degenerate searches counted across both processes
                # (the library's passages re-labelled to models no server has, as
                # after a model switch gone wrong: every pool is empty; both models,
                # since the multilingual lane alone still answers when the primary is empty)
                with db.connect() as conn:
                    conn.execute("UPDATE passages SET embed_model = 'retired-model', "
                                 "embed_model_multi = 'retired-model'")
                    conn.commit()
                states = []
                for client in (one, two, one, two):
                    r = await _call(client, "library_search", {"query": "zqxv wplk", "top_k": 3})
                    out["searches"] += 1
                    states.append((r.get("health") or {}).get("pool", {}).get("state", "closed"))
                out["states"] = states
                return out

        out = asyncio.run(run())

    # one count across both processes: the third degenerate search (the second
    # through server one) opens it, the fourth, through server two, sees it open
    assert out["states"] == ["counting", "counting", "open", "open"], out["states"]
    with db.connect() as conn:
        consecutive, total = conn.execute(
            "SELECT consecutive, degenerate_total FROM search_breaker WHERE component = 'pool'").fetchone()
        logged = conn.execute("SELECT count(*), count(*) FILTER (WHERE degenerate LIKE '%%empty pool%%') "
                              "FROM search_log").fetchone()
    assert consecutive >= 3 and total == 4, (consecutive, total)
    # every search through either server left exactly one log row
    assert logged == (out["searches"], 4), (logged, out["searches"])
