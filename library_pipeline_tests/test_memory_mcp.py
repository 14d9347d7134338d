"""Agent isolation through the real MCP client: two agents in different departments
(HTTP bearer tokens mapped to identities by a LIBRARY_IDENTITIES file) cannot see
each other's `self` / `department` memories through memory_search, memory_get,
library_search, counts or error messages; a third agent of the first one's
department sees its department records; identity can't be set by an argument;
an unknown token is refused. Then over stdio, identity from LIBRARY_AGENT."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from library_pipeline_tests.search_fixtures import create_database
from library_pipeline_tests.http_helpers import mcp_http_server

REPO = Path(__file__).resolve().parent.parent
TOKENS = {"A": "token-scout-marketing-1", "A2": "token-analyst-marketing-2", "B": "token-ops-operations-3"}
IDENTITIES = f"""
[tokens."{TOKENS['A']}"]
agent = "Agent-Scout"
department = "marketing"

[tokens."{TOKENS['A2']}"]
agent = "Agent-Analyst"
department = "marketing"

[tokens."{TOKENS['B']}"]
agent = "Agent-Ops"
department = "operations"
"""


def _text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture(scope="module")
def mdb(server_db):
    return create_database(server_db)


def _env(mdb, tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LIBRARY_AGENT", "LIBRARY_DEPARTMENT",
                                                            "LIBRARY_IDENTITIES", "LIBRARY_MCP_TOKEN")}
    return {**env, "LIBRARY_DB_DSN": mdb.settings.db_dsn, "LIBRARY_HOME": str(tmp_path / "home"),
            "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "LIBRARY_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(REPO), **extra}


async def _call(client, tool, args):
    result = await client.call_tool(tool, args)
    return result, (result.structured_content or {}), _text(result)


async def isolation(clients: dict) -> dict:
    a, a2, b = clients["A"], clients["A2"], clients["B"]
    tools = {t.name for t in (await a.list_tools()).tools}
    assert {"memory_index", "memory_search", "memory_get", "library_search", "library_files"} <= tools
    ids = {}
    for scope in ("self", "department", "global"):
        r, data, text = await _call(a, "memory_index", {
            "artifact_id": f"quokka-{scope}", "scope": scope, "meta": {"type": "field_note", "task_id": "t-1"},
            "content": f"Quokka sighting log ({scope}): seven quokkas near the Rottnest ferry pier."})
        assert not r.is_error, text
        assert data["status"] == "created" and data["meta"]["agent"] == "Agent-Scout"
        ids[scope] = data["id"]
    # identity is not an argument: an `agent` argument is refused or ignored, never obeyed
    r, data, text = await _call(b, "memory_index", {"artifact_id": "spoof", "scope": "self", "agent": "Agent-Scout",
                                                    "content": "Spoofed quokka note written by ops."})
    if not r.is_error:
        assert data["meta"]["agent"] == "Agent-Ops"
    # B (operations) sees only the global record: results, counts, filters
    for flt in (None, {"scope": ["self", "department"]}, {"scope": "department"},
                {"include_archived": True, "include_cold": True, "include_superseded": True}):
        args = {"query": "quokka sighting Rottnest ferry", "top_k": 20}
        if flt:
            args["filter"] = flt
        r, data, text = await _call(b, "memory_search", args)
        assert not r.is_error, text
        got = {x["id"] for x in data["results"]}
        assert not got & {ids["self"], ids["department"]}, (flt, data)
        assert "Rottnest" not in text.replace("Rottnest ferry", "") or ids["global"] in got
        visible = {ids["global"]} if (not flt or "scope" not in flt) else set()
        assert got - {x for x in got if x not in ids.values()} == visible
        assert data["total_found"] == len(got) and data["returned"] == len(got)
    # get: hidden reads exactly like missing, by id and by artifact id
    r1, _, hidden = await _call(b, "memory_get", {"id": str(ids["self"])})
    r2, _, missing = await _call(b, "memory_get", {"id": "987654321"})
    assert r1.is_error and r2.is_error
    assert hidden.replace(str(ids["self"]), "N") == missing.replace("987654321", "N")
    r3, _, hidden_dept = await _call(b, "memory_get", {"id": "quokka-department"})
    r4, _, missing_art = await _call(b, "memory_get", {"id": "quokka-nowhere"})
    assert r3.is_error and hidden_dept.replace("quokka-department", "X") == missing_art.replace("quokka-nowhere", "X")
    r, data, _ = await _call(b, "memory_get", {"id": ids["global"]})
    assert not r.is_error and data["content"].startswith("Quokka sighting log (global)")
    # the plain library search path is identity-aware too
    r, data, text = await _call(b, "library_search", {"query": "quokka sighting Rottnest", "top_k": 20,
                                                      "filters": {"source": "memory"}})
    assert not r.is_error, text
    assert "(self)" not in text and "(department)" not in text and "(global)" in text
    # A2 (same department as A) sees department + global, not A's self
    r, data, _ = await _call(a2, "memory_search", {"query": "quokka sighting Rottnest ferry", "top_k": 20})
    got = {x["id"] for x in data["results"]}
    assert {ids["department"], ids["global"]} <= got and ids["self"] not in got
    # A sees all three of its own
    r, data, _ = await _call(a, "memory_search", {"query": "quokka sighting Rottnest ferry", "top_k": 20})
    assert set(ids.values()) <= {x["id"] for x in data["results"]}
    # bad input over MCP: clear one-line errors, no traceback
    for args, needle in (({"artifact_id": "x", "content": "", "scope": "self"}, "content is empty"),
                         ({"artifact_id": "x", "content": "hi", "scope": "team"}, "unknown scope"),
                         ({"artifact_id": "x", "content": "hi", "scope": "self", "meta": {"date": 5}}, "meta.date"),
                         ({"artifact_id": "x", "content": "y" * 300_000, "scope": "self"}, "limit is")):
        r, _, text = await _call(a, "memory_index", args)
        assert r.is_error and needle in text and "Traceback" not in text, text[:300]
    return ids


def test_two_agents_over_http_cannot_see_each_others_memories(mdb, tmp_path):
    ident = tmp_path / "identities.toml"
    ident.write_text(IDENTITIES)
    with mcp_http_server(_env(mdb, tmp_path, LIBRARY_IDENTITIES=str(ident)), tmp_path / "server.log") as url:
        r = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10)
        assert r.status_code == 401
        unknown = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                             headers={"Authorization": "Bearer token-nobody-knows"}, timeout=10)
        assert unknown.status_code == 401 and "unknown" in unknown.text

        async def run() -> dict:
            from contextlib import AsyncExitStack

            async with AsyncExitStack() as stack:
                clients = {}
                for who, token in TOKENS.items():
                    http_client = await stack.enter_async_context(
                        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}))
                    clients[who] = await stack.enter_async_context(
                        Client(streamable_http_client(url, http_client=http_client), read_timeout_seconds=180))
                return await isolation(clients)

        asyncio.run(run())


def test_stdio_identity_comes_from_the_environment(mdb, tmp_path):
    """Runs after the HTTP test (same module): the quokka records exist."""

    async def run(env) -> tuple:
        params = StdioServerParameters(command=sys.executable, args=["-m", "serving.mcp_server"], env=env,
                                       cwd=str(REPO))
        async with Client(params, read_timeout_seconds=180) as client:
            search = await client.call_tool("memory_search", {"query": "quokka sighting Rottnest", "top_k": 20})
            index = await client.call_tool("memory_index", {"artifact_id": "stdio-1", "scope": "self",
                                                            "content": "stdio agent note about quokkas"})
            return search, index

    search, index = asyncio.run(run(_env(mdb, tmp_path, LIBRARY_AGENT="Agent-Analyst",
                                         LIBRARY_DEPARTMENT="marketing")))
    assert not search.is_error and not index.is_error, _text(search) + _text(index)
    scopes = {r["meta"]["scope"] for r in search.structured_content["results"] if r["meta"]["agent"] == "Agent-Scout"}
    assert scopes == {"department", "global"}
    assert index.structured_content["meta"]["agent"] == "Agent-Analyst"
    # no identity configured: memory tools refuse, library tools still work
    search, index = asyncio.run(run(_env(mdb, tmp_path)))
    assert search.is_error and "no agent identity" in _text(search)
    assert index.is_error and "no agent identity" in _text(index)
