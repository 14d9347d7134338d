"""The MCP server through the real client (mcp.Client): over stdio (the server
spawned as `python -m serving.mcp_server`) and over streamable HTTP (spawned
with --http, bearer token), calling every tool, with the bad input an agent
will eventually send."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from library_pipeline_tests.http_helpers import mcp_http_server
from library_pipeline_tests.search_fixtures import corpus  # noqa: F401  (fixture)
from serving.mcp_server import BearerAuth, build_server, http_app, is_loopback
from serving.runtime import Library

REPO = Path(__file__).resolve().parent.parent
MOBY = "epub/pg2701-moby-dick.epub"

# (tool, arguments, expect_error, text the answer must contain)
BAD_INPUT = [
    ("library_search", {"query": ""}, True, "query is empty"),
    ("library_search", {"query": " \n\t "}, True, "query is empty"),
    ("library_search", {"query": "the of and"}, False, "no searchable words"),
    ("library_search", {"query": "whale " * 20_000}, False, "characters"),
    ("library_search", {"query": "'; DROP TABLE passages; --"}, False, '"results"'),
    ("library_search", {"query": "!&|:*()<->"}, False, '"results"'),
    ("library_search", {"query": "whale 🐋🐳"}, False, '"results"'),
    ("library_search", {"query": "Pushkin Пушкин 普希金"}, False, '"results"'),
    ("library_search", {"query": "whale", "top_k": 0}, True, "top_k must be between 1 and 100"),
    ("library_search", {"query": "whale", "top_k": -5}, True, "top_k"),
    ("library_search", {"query": "whale", "top_k": 10**9}, False, "maximum"),
    ("library_search", {"query": "whale", "top_k": "many"}, True, "top_k"),
    ("library_search", {"query": "whale", "filters": {"colour": "red"}}, True, "unknown filter 'colour'"),
    ("library_search", {"query": "whale", "filters": {"source": "web"}}, True, "not one of"),
    ("library_search", {"query": "whale", "filters": {"path": "no/such.pdf"}}, True, "library_files"),
    ("library_search", {}, True, "query"),
    ("library_files", {"pattern": "x", "limit": 0}, True, "limit"),
    ("library_files", {"pattern": "!&|:*()<->"}, False, '"matched"'),
]


def _text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def exercise(client: Client) -> None:
    """Every tool, the known-item / absence answers, and the bad-input table."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"library_search", "library_files"} <= set(tools)
    assert "matched = 0" in tools["library_files"].description
    assert "score" in tools["library_search"].description and "library_files" in tools["library_search"].description

    found = await client.call_tool("library_search", {"query": "moby dick", "top_k": 3})
    assert not found.is_error, _text(found)
    data = found.structured_content
    top = data["results"][0]
    assert top["path"] == MOBY and "title" in top["lanes"]
    assert set(top) >= {"source", "location", "kind", "score", "lanes", "text"}
    assert data["stages"]["rerank"].startswith("skipped") and data["summaries"]

    filtered = await client.call_tool("library_search", {"query": "hosting", "filters": {"source": "vault"}})
    assert {r["source"] for r in filtered.structured_content["results"]} == {"vault"}

    absent = await client.call_tool("library_files", {"pattern": "The Hitchhiker's Guide to the Galaxy"})
    assert absent.structured_content["matched"] == 0 and absent.structured_content["total"] > 0
    present = await client.call_tool("library_files", {"pattern": "moby dick"})
    assert [f["path"] for f in present.structured_content["files"]] == [MOBY]

    for tool, args, expect_error, needle in BAD_INPUT:
        result = await client.call_tool(tool, args)
        text = _text(result)
        assert result.is_error == expect_error, (tool, str(args)[:80], text[:300])
        assert needle in text, (tool, str(args)[:80], text[:300])
        assert "Traceback" not in text and 'File "' not in text  # never a stack trace to the agent


def _env(corpus, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"LIBRARY_DB_DSN": corpus.db.settings.db_dsn, "LIBRARY_HOME": str(tmp_path / "home"),
            "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "LIBRARY_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(REPO), **extra}


def test_stdio_server_with_the_real_client(corpus, tmp_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "serving.mcp_server"],
                                   env=_env(corpus, tmp_path), cwd=str(REPO))

    async def run() -> None:
        async with Client(params, read_timeout_seconds=180) as client:
            await exercise(client)

    asyncio.run(run())


def test_http_server_with_bearer_token(corpus, tmp_path):
    token = "s3cret-token-for-tests"
    env = {**os.environ, **_env(corpus, tmp_path, LIBRARY_MCP_TOKEN=token)}
    with mcp_http_server(env, tmp_path / "server.log") as url:
        init = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert httpx.post(url, json=init, timeout=10).status_code == 401
        wrong = httpx.post(url, json=init, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401 and "unauthorized" in wrong.text

        async def run() -> None:
            http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with http_client, Client(streamable_http_client(url, http_client=http_client),
                                           read_timeout_seconds=180) as client:
                await exercise(client)

        asyncio.run(run())


def test_wider_binding_requires_a_token(corpus, monkeypatch):
    monkeypatch.delenv("LIBRARY_MCP_TOKEN", raising=False)
    server = build_server(Library(corpus.db.settings))
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.10")
    with pytest.raises(SystemExit, match="LIBRARY_MCP_TOKEN"):
        http_app(server, "0.0.0.0")
    assert isinstance(http_app(server, "0.0.0.0", token="t0ken"), BearerAuth)
    assert not isinstance(http_app(server, "127.0.0.1"), BearerAuth)  # loopback, no token: open


def test_serving_never_imports_the_pipeline():
    code = ("import sys, serving.mcp_server, serving.cli, serving.search, serving.inventory, serving.lexemes, "
            "serving.rerank, serving.runtime; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('library_pipeline', 'dagster')); "
            "print(json.dumps(bad))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code], cwd=str(REPO), capture_output=True,
                         text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
