"""The MCP surface: `library_search` and `library_files`, over stdio or
streamable HTTP (mcp 2.x MCPServer).

    python -m serving.mcp_server                 # stdio (what an agent host spawns)
    python -m serving.mcp_server --http          # http://127.0.0.1:8765/mcp

HTTP binds 127.0.0.1 by default. Binding any other address requires a bearer
token (LIBRARY_MCP_TOKEN), compared in constant time; when a token is set it
is required on loopback too. The tool descriptions carry what an agent needs
to use the results honestly: what the scores mean, and that only
library_files' `matched = 0` proves a work is absent - the reference agent
otherwise softened real absences into "closest matches".

Errors an agent can fix come back as a one-line message; anything else is
logged here with its traceback and reported as an internal error, never as a
stack trace in the tool result.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import logging
import os
import sys
import threading
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from serving.runtime import Library
from serving.search.types import MAX_TOP_K, SearchError, SearchFilters

log = logging.getLogger("serving.mcp")

TOKEN_ENV = "LIBRARY_MCP_TOKEN"
DEFAULT_PORT = 8765

INSTRUCTIONS = """\
A local library of books, papers and notes. Use library_files to check whether a
work is in the library at all (matched = 0 is the only proof it is absent), and
library_search to find passages about something. Cite results by path and location."""

SEARCH_DESCRIPTION = f"""\
Search the library's passages (books, papers, vault notes) for a topic, a quote, a
title or a chapter. Hybrid: semantic (vector), keyword (rarest terms, BM25) and
title/file-name lanes, fused by weighted reciprocal-rank fusion, then reranked by a
cross-encoder when one is configured.

Arguments: query (words, a title, a question); top_k 1-{MAX_TOP_K} (default 10);
filters (optional object): source ("library" | "vault" | "memory"), path (exact
document path from library_files), document_id, scope, kind ("text" | "toc" | ...),
include_removed / include_superseded / include_archived (default false).

Each result: source, path, title, location (page / section), kind ("toc" = a table
of contents), score, lanes, text. `lanes` says which lanes found it and at what rank,
e.g. {{"title": 1, "vector": 3}}: a "title" hit means the document's name matches
your query. Scores rank results within ONE response only: with score_kind "rrf" they
are fusion scores (about 0.016 per lane that ranked it first; 0.03-0.05 is a strong
multi-lane hit); with "cross-encoder" they are relevance probabilities. A score is
never evidence that the library contains something: search always returns its
closest guesses, even for works that are absent. To prove a work is NOT here, call
library_files and get matched = 0.

`summaries` holds document-level summaries ranked separately (use them for
overview questions). `stages` says what ran (e.g. rerank "skipped: ..."), `warnings`
and `health` report truncated queries and degraded components."""

FILES_DESCRIPTION = """\
Inventory: which files the library holds, matched by name or title - NOT by content.
pattern: a title, author, file name or part of one ("moby dick", "sicp", ".epub");
an empty pattern lists everything. A file matches if the pattern is a substring of
its path or title (case-insensitive) or shares at least 2 distinct (stemmed) words
with them; a single shared word is deliberately not enough.

Returns {total, matched, returned, truncated, files: [{path, title, source, format,
language, pages, status, match}]}. matched = 0 is a definitive answer: no file by
that name or title is in the library - say so plainly rather than offering
library_search's nearest passages as if they were the work (passages that merely
quote or mention a work are not the work). status "failed" means the file is present
but could not be read; "pending" means not yet searchable. Limitation: a work stored
under an unrecognisable file name and without a title reads as absent."""


def _internal(tool: str, exc: BaseException) -> ToolError:
    log.error("%s failed", tool, exc_info=exc)
    return ToolError(f"{tool} failed with an internal error ({type(exc).__name__}); the server log has "
                     f"details. Retry, or simplify the request.")


def build_server(library: Library | None = None) -> MCPServer:
    lib = library or Library()
    server = MCPServer("library", instructions=INSTRUCTIONS, version="0.1.0")

    @server.tool(name="library_search", description=SEARCH_DESCRIPTION)
    def library_search(query: str, top_k: int = 10, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            parsed = SearchFilters.from_mapping(filters)
            return lib.search(query, top_k=top_k, filters=parsed).to_dict()
        except SearchError as exc:
            raise ToolError(str(exc)) from None
        except ConnectionError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # never a stack trace to the agent
            raise _internal("library_search", exc) from None

    @server.tool(name="library_files", description=FILES_DESCRIPTION)
    def library_files(pattern: str = "", limit: int = 50) -> dict[str, Any]:
        try:
            return lib.files(pattern, limit)
        except SearchError as exc:
            raise ToolError(str(exc)) from None
        except ConnectionError as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:
            raise _internal("library_files", exc) from None

    server.library = lib  # type: ignore[attr-defined]  # for warm-up and shutdown
    return server


# -- HTTP ----------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerAuth:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, given = header.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self._token):
                body = json.dumps({"error": "unauthorized: send Authorization: Bearer <LIBRARY_MCP_TOKEN>"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="library"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(server: MCPServer, host: str = "127.0.0.1", token: str | None = None) -> Any:
    """The streamable-HTTP ASGI app (endpoint /mcp), behind the bearer check when a token is set.
    Raises SystemExit when asked to bind beyond loopback without a token."""
    token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
    if not is_loopback(host) and not token:
        raise SystemExit(f"refusing to serve MCP on {host} without a token: set {TOKEN_ENV} "
                         f"(clients then send 'Authorization: Bearer <token>'), or bind 127.0.0.1")
    app = server.streamable_http_app(host=host)  # DNS-rebinding protection on loopback
    return BearerAuth(app, token) if token else app


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
    logging.basicConfig(level=os.environ.get("LIBRARY_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.http:
        serve_http(args.host, args.port)
    else:
        serve_stdio()


if __name__ == "__main__":
    main()
