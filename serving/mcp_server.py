"""The MCP surface: `library_search`, `library_files` and agent memory
(`memory_index`, `memory_search`, `memory_get`), over stdio or streamable HTTP
(mcp 2.x MCPServer).

    python -m serving.mcp_server                 # stdio (what an agent host spawns)
    python -m serving.mcp_server --http          # http://127.0.0.1:8765/mcp

This module registers the tools and runs the server. What agents read about each
tool is in serving/mcp_descriptions.py; the HTTP transport (bearer tokens, identities,
size and rate limits) in serving/mcp_http.py; how a failure reaches the agent in
serving/tool_errors.py.

Identity (who is calling) comes from the transport, never from a tool argument:
over HTTP each bearer token in the LIBRARY_IDENTITIES file names an agent and
its department (an unknown token is refused before any tool runs); over stdio
the server process is one agent's, configured by LIBRARY_AGENT /
LIBRARY_DEPARTMENT. The identity decides which `self` / `department` memories
exist for the caller, in the SQL of every read (library_search included).

Errors an agent can fix come back as a one-line message; anything else is
logged with its traceback and reported as an internal error, never as a
stack trace in the tool result.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from serving import graph_tools
from serving.mcp_descriptions import (
    FILES_DESCRIPTION,
    INSTRUCTIONS,
    LANE_TEXT,
    MEMORY_GET_DESCRIPTION,
    MEMORY_INDEX_DESCRIPTION,
    MEMORY_SEARCH_DESCRIPTION,
    SEARCH_DESCRIPTION,
    search_description,
)
from serving.mcp_http import (
    IDENTITY_SCOPE_KEY,
    TOKEN_ENV,
    BearerAuth,
    HttpLimits,
    RequestGuard,
    http_app,
    is_loopback,
)
from serving.memory import service as memsvc
from serving.memory.identity import IdentityError, env_identity
from serving.runtime import Library
from serving.search.types import SearchFilters, Viewer
from serving.settings import get_settings
from serving.tool_errors import tool_call

# the descriptions and the HTTP transport live in their own modules; their public
# names stay importable from here, where agents' hosts and tests have found them
__all__ = [
    "DEFAULT_PORT", "FILES_DESCRIPTION", "IDENTITY_SCOPE_KEY", "INSTRUCTIONS", "LANE_TEXT", "MEMORY_GET_DESCRIPTION",
    "MEMORY_INDEX_DESCRIPTION", "MEMORY_SEARCH_DESCRIPTION", "SEARCH_DESCRIPTION", "TOKEN_ENV", "BearerAuth",
    "HttpLimits", "RequestGuard", "build_server", "caller_identity", "http_app", "is_loopback", "main",
    "search_description", "serve_http", "serve_stdio",
]

log = logging.getLogger("serving.mcp")

DEFAULT_PORT = 8765


def caller_identity(ctx: Context | None, stdio_identity: Viewer | None) -> Viewer | None:
    """The identity BearerAuth attached to this HTTP request; over stdio (no HTTP
    request) the process's configured identity. None: anonymous (global rows only)."""
    request = None
    if ctx is not None:
        try:
            request = ctx.request_context.request
        except (AttributeError, LookupError, ValueError):
            request = None
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict):
        return scope.get(IDENTITY_SCOPE_KEY)
    return stdio_identity


def build_server(library: Library | None = None, *, stdio_identity: Viewer | None = None) -> MCPServer:
    """`stdio_identity` defaults to LIBRARY_AGENT / LIBRARY_DEPARTMENT; HTTP requests
    carry their token's identity instead (see http_app)."""
    lib = library or Library()
    server = MCPServer("library", instructions=INSTRUCTIONS, version="0.1.0")
    if stdio_identity is None:
        try:
            stdio_identity = env_identity()
        except IdentityError as exc:
            raise SystemExit(str(exc)) from None

    @server.tool(name="library_search", description=SEARCH_DESCRIPTION)
    def library_search(query: str, top_k: int = 10, filters: dict[str, Any] | None = None,
                       ctx: Context | None = None) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            parsed = SearchFilters.from_mapping(filters)
            viewer = caller_identity(ctx, stdio_identity) or Viewer()
            parsed = dataclasses.replace(parsed, viewer=viewer)
            return lib.search(query, top_k=top_k, filters=parsed).to_dict()

        return tool_call("library_search", run)

    @server.tool(name="library_files", description=FILES_DESCRIPTION)
    def library_files(pattern: str = "", limit: int = 50) -> dict[str, Any]:
        return tool_call("library_files", lambda: lib.files(pattern, limit))

    @server.tool(name="memory_index", description=MEMORY_INDEX_DESCRIPTION)
    def memory_index(artifact_id: str, content: str, scope: str = "self", meta: dict[str, Any] | None = None,
                     ctx: Context | None = None) -> dict[str, Any]:
        return _memory_call("memory_index", lambda: memsvc.memory_index(lib, 
            caller_identity(ctx, stdio_identity), artifact_id=artifact_id, content=content, scope=scope,
            meta=meta))

    @server.tool(name="memory_search", description=MEMORY_SEARCH_DESCRIPTION)
    def memory_search(query: str, top_k: int = 5, filter: dict[str, Any] | None = None,
                      ctx: Context | None = None) -> dict[str, Any]:
        return _memory_call("memory_search", lambda: memsvc.memory_search(lib, 
            caller_identity(ctx, stdio_identity), query, top_k=top_k, filter=filter))

    @server.tool(name="memory_get", description=MEMORY_GET_DESCRIPTION)
    def memory_get(id: int | str, ctx: Context | None = None) -> dict[str, Any]:
        return _memory_call("memory_get", lambda: memsvc.memory_get(lib, caller_identity(ctx, stdio_identity), id))

    graph_tools.register_tools(server, lib)  # library_entity / _related / _path / _subgraph
    server.library = lib  # type: ignore[attr-defined]  # for warm-up and shutdown
    return server


def _memory_call(tool: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Memory writes race the curation jobs: a conflict the database rolled back is retried."""
    return tool_call(tool, fn, retry_conflicts=True)


def serve_http(host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str | None = None,
               library: Library | None = None) -> None:
    import uvicorn

    server = build_server(library)
    app = http_app(server, host, token)
    _warm_up_in_background(server)
    log.info("MCP over streamable HTTP at http://%s:%d/mcp%s", host, port,
             " (bearer token required)" if isinstance(app, BearerAuth) else "")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def serve_stdio(library: Library | None = None) -> None:
    server = build_server(library)
    _warm_up_in_background(server)
    server.run("stdio")


def _warm_up_in_background(server: MCPServer) -> None:
    def run() -> None:
        try:
            server.library.warm_up()  # type: ignore[attr-defined]
        except Exception as exc:  # the first tool call will report it properly
            log.warning("warm-up failed: %s", exc)

    threading.Thread(target=run, name="library-warm-up", daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m serving.mcp_server", description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    # stdout is the protocol channel in stdio mode: logs go to stderr only
    logging.basicConfig(level=get_settings().log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.http:
        serve_http(args.host, args.port)
    else:
        serve_stdio()


if __name__ == "__main__":
    main()
