"""The MCP surface: `library_search`, `library_files` and agent memory
(`memory_index`, `memory_search`, `memory_get`), over stdio or streamable HTTP
(mcp 2.x MCPServer).

    python -m serving.mcp_server                 # stdio (what an agent host spawns)
    python -m serving.mcp_server --http          # http://127.0.0.1:8765/mcp

HTTP binds 127.0.0.1 by default. Binding any other address requires a bearer
token (LIBRARY_MCP_TOKEN), compared in constant time; when a token is set it
is required on loopback too. The tool descriptions carry what an agent needs
to use the results honestly: what the scores mean, and that only
library_files' `matched = 0` proves a work is absent - agent-library's agents
otherwise softened real absences into "closest matches".

Identity (who is calling) comes from the transport, never from a tool argument:
over HTTP each bearer token in the LIBRARY_IDENTITIES file names an agent and
its department (an unknown token is refused before any tool runs); over stdio
the server process is one agent's, configured by LIBRARY_AGENT /
LIBRARY_DEPARTMENT. The identity decides which `self` / `department` memories
exist for the caller, in the SQL of every read (library_search included).

Errors an agent can fix come back as a one-line message; anything else is
logged here with its traceback and reported as an internal error, never as a
stack trace in the tool result.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from serving import graph
from serving.memory import service as memsvc
from serving.memory.identity import IdentityError, IdentityMap, env_identity, load_identities
from serving.runtime import Library
from serving.search.types import LANES, MAX_TOP_K, SearchConfig, SearchFilters, Viewer
from serving.settings import Settings, get_settings
from serving.tool_errors import tool_call

log = logging.getLogger("serving.mcp")

TOKEN_ENV = "LIBRARY_MCP_TOKEN"
IDENTITY_SCOPE_KEY = "library.identity"  # set on the ASGI scope by BearerAuth
DEFAULT_PORT = 8765

INSTRUCTIONS = """\
A local library of books, papers and notes. Use library_files to check whether a
work is in the library at all (matched = 0 is the only proof it is absent), and
library_search to find passages about something. Cite results by path and location.
library_entity, library_related, library_path and library_subgraph query the knowledge
graph extracted from the files (what a name is, what it connects to, how two connect)."""

# What each lane is, in the words an agent reads; keyed by the names results carry
# in `lanes` (serving/search/types.py LANES, checked by a test).
LANE_TEXT = {
    "vector": '"vector" (meaning, by the English model)',
    "multilingual": '"multilingual" (meaning, by a multilingual model: a Russian question finds English '
                    'passages too)',
    "keyword": '"keyword" (BM25 over every query term, each passage stemmed in its own language)',
    "title": '"title" (the document\'s file name or title)',
    "structure": '"structure" (tables of contents)',
}


def search_description(config: SearchConfig | None = None) -> str:
    """library_search's description, written from the configuration it describes
    (lanes, fusion, weights), so the text cannot drift from what the code does."""
    cfg = config or SearchConfig()
    lanes = ", ".join(LANE_TEXT[lane] for lane in LANES if getattr(cfg, lane))
    if cfg.fusion == "convex":
        fusion = ("fused by adding each lane's min-max normalised score times its weight"
                  + (", trusting lanes per query by language (a lane that cannot read the query's "
                     "language, or keyword hits in another script, count nothing)" if cfg.language_aware else ""))
        scores = (f'under score_kind "convex" each lane adds up to its weight (up to {cfg.vector_weight:g} from '
                  f"the meaning lanes and {cfg.keyword_weight:g} from the keyword lane's best hit, up to "
                  f"{cfg.title_weight:g} from a title match; about 1.5 or more is a strong hit two lanes rank high)")
    else:
        fusion = f"fused by weighted reciprocal-rank fusion (k = {cfg.rrf_k})"
        scores = 'under score_kind "rrf" they are weighted reciprocal ranks'
    return f"""\
Search the library's passages (books, papers, vault notes) for a topic, a quote, a
title or a chapter. Hybrid lanes: {lanes}; {fusion}; then reranked by a cross-encoder
when one is configured.

Arguments: query (words, a title, a question; any language); top_k 1-{MAX_TOP_K} (default 10);
filters (optional object): source ("library" | "vault" | "memory"), path (exact
document path from library_files), document_id, scope, kind ("text" | "toc" | ...;
"boilerplate" = licence / publisher text such as the Project Gutenberg licence, left
out unless named), include_removed / include_superseded / include_archived (default false).

Each result: source, path, title, location (page / section), kind ("toc" = a table
of contents), score, lanes, text. `lanes` says which lanes found it and at what rank,
e.g. {{"title": 1, "vector": 3}}: a "title" hit means the document's name matches
your query. Scores rank results within ONE response only: {scores};
with "cross-encoder" they are relevance probabilities. A score is
never evidence that the library contains something: search always returns its
closest guesses, even for works that are absent. To prove a work is NOT here, call
library_files and get matched = 0.

`summaries` holds document-level summaries ranked separately (use them for
overview questions). `stages` says what ran (e.g. rerank "skipped: ..."), `warnings`
and `health` report truncated queries and degraded components."""


SEARCH_DESCRIPTION = search_description()

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


MEMORY_INDEX_DESCRIPTION = """\
Store an artifact in agent memory (the Librarian's `index`). It is chunked, embedded
and searchable as soon as this returns. You are the author: your identity comes from
this connection, not from an argument.

Arguments: artifact_id (your id for the artifact; indexing the same id again stores a
new version and supersedes the old one, which is kept); content (text, up to 200,000
characters); scope: "self" (only you), "department" (your department's agents) or
"global" (every agent); meta (optional object: type, task_id, date "YYYY-MM-DD", any
other JSON fields).

Exact duplicates (same normalised text in the same scope) are not stored twice: the
existing record is returned (status "duplicate" or "unchanged") with your meta merged
in. Returns {status: created | new_version | duplicate | unchanged, id, artifact_id,
version, scope, chunks, meta}."""

MEMORY_SEARCH_DESCRIPTION = f"""\
Search agent memory (the Librarian's `search`): the same hybrid lanes as
library_search, over the memories you may see - your own `self` records, your
department's, and `global` ones.

Arguments: query; top_k 1-{MAX_TOP_K} (default 5); filter (optional object): scope (one
or a list of "self" | "department" | "global"), type, agent, min_relevance (0-1),
include_archived (decayed records, default false), include_cold (records retention
moved to cold storage, default false), include_superseded (old versions),
include_library (also search books and vault notes).

Returns {{results: [{{id, content, score, meta: {{agent, date, task_id, type, scope,
artifact_id, version, relevance, ...}}}}], total_found, returned}}. `content` is the
best-matching passage of the record (memory_get returns the whole text); one result
per record. Scores rank within one response only. total_found counts the records
among the candidates the search considered (at most 100 passages), not the store."""

MEMORY_GET_DESCRIPTION = """\
Fetch one memory record with its full content: id is the numeric id from
memory_search / memory_index, or an artifact id (your own artifact first, then
the newest visible one). Returns {id, content, meta, access_count, versions}.
A record you may not see reads exactly like one that does not exist."""


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

    graph.register_tools(server, lib)  # library_entity / _related / _path / _subgraph
    server.library = lib  # type: ignore[attr-defined]  # for warm-up and shutdown
    return server


def _memory_call(tool: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Memory writes race the curation jobs: a conflict the database rolled back is retried."""
    return tool_call(tool, fn, retry_conflicts=True)


# -- HTTP ----------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class BearerAuth:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <token>`,
    either LIBRARY_MCP_TOKEN (identity: LIBRARY_AGENT / LIBRARY_DEPARTMENT, if set) or
    a token of the LIBRARY_IDENTITIES file (identity: its agent and department). The
    identity is attached to the ASGI scope for the tools (caller_identity)."""

    def __init__(self, app: Any, token: str | None, identities: IdentityMap | None = None,
                 token_identity: Viewer | None = None) -> None:
        self.app = app
        self._token = token.encode("utf-8") if token else None
        self._identities = identities
        self._token_identity = token_identity

    def _identify(self, given: bytes) -> tuple[bool, Viewer | None]:
        ok, viewer = False, None
        if self._token is not None and hmac.compare_digest(given, self._token):
            ok, viewer = True, self._token_identity
        if self._identities is not None:
            found = self._identities.lookup(given)
            if found is not None:
                ok, viewer = True, found
        return ok, viewer

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, given = header.partition(b" ")
            ok, viewer = self._identify(given.strip()) if scheme.lower() == b"bearer" else (False, None)
            if ok:
                scope[IDENTITY_SCOPE_KEY] = viewer
            else:
                body = json.dumps({"error": "unauthorized: send Authorization: Bearer <token> with "
                                            "LIBRARY_MCP_TOKEN or a token of the LIBRARY_IDENTITIES file; "
                                            "this token is unknown"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="library"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class _LocalIdentity:
    """Loopback without tokens: every request is the process's configured identity."""

    def __init__(self, app: Any, viewer: Viewer | None) -> None:
        self.app, self.viewer = app, viewer

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope[IDENTITY_SCOPE_KEY] = self.viewer
        await self.app(scope, receive, send)


class HttpLimits:
    """Bounds on what one HTTP client may send: body size and request rate.

    LIBRARY_MCP_MAX_REQUEST_KB (default 2048): memory_index accepts 200,000
    characters, which JSON-escaped as \\uXXXX can reach 1.2 MB; anything larger is
    refused with 413 before a byte reaches the JSON parser.
    LIBRARY_MCP_RATE / LIBRARY_MCP_BURST (default 20/s, burst 60) per client: a
    token bucket keyed by the bearer token when one is sent (one agent), else by
    the peer address. 20 clients calling flat out measured ~1.7 calls/s each
    on the 2-core box (benchmarks/load.py), so the default never throttles honest
    agents and stops a runaway loop from starving the others (429 + Retry-After).
    0 disables a limit."""

    def __init__(self, max_request_bytes: int = 2048 * 1024, rate_per_s: float = 20.0, burst: int = 60) -> None:
        self.max_request_bytes = max_request_bytes
        self.rate_per_s = rate_per_s
        self.burst = burst

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpLimits:
        return cls(max_request_bytes=int(settings.mcp_max_request_kb * 1024), rate_per_s=settings.mcp_rate,
                   burst=int(settings.mcp_burst))

    @classmethod
    def from_env(cls) -> HttpLimits:
        """The limits of this process's settings; a bad value stops the server with its name."""
        try:
            return cls.from_settings(get_settings())
        except ValueError as exc:
            raise SystemExit(str(exc)) from None


class RequestGuard:
    """ASGI middleware: 413 for bodies above the limit, 429 for clients
    above their rate. The body is read here, bounded, and replayed to the app, so a
    chunked upload without Content-Length is cut off at the limit too."""

    MAX_CLIENTS = 10_000  # buckets kept; the least recently seen are dropped beyond this

    def __init__(self, app: Any, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits
        self._buckets: dict[bytes, tuple[float, float]] = {}  # client -> (tokens, last refill)
        self._lock = threading.Lock()

    def _client_key(self, scope: dict) -> bytes:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        if header:
            # the token itself is never kept: its digest identifies the client
            return b"t:" + hashlib.sha256(header).digest()
        client = scope.get("client") or ("?", 0)
        return b"a:" + str(client[0]).encode()

    def _allow(self, key: bytes) -> float:
        """0 when allowed, else the seconds until a request would be."""
        rate, burst = self.limits.rate_per_s, max(1, self.limits.burst)
        if rate <= 0:
            return 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.pop(key, (float(burst), now))
            tokens = min(float(burst), tokens + (now - last) * rate)
            wait = 0.0 if tokens >= 1 else (1 - tokens) / rate
            self._buckets[key] = (tokens - 1 if tokens >= 1 else tokens, now)  # re-inserted: most recent last
            while len(self._buckets) > self.MAX_CLIENTS:
                self._buckets.pop(next(iter(self._buckets)))
        return wait

    @staticmethod
    async def _refuse(send: Any, status: int, message: str, headers: list | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), *(headers or [])]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        wait = self._allow(self._client_key(scope))
        if wait:
            log.warning("rate limit: %s %s refused (429)", scope.get("method"), scope.get("path"))
            await self._refuse(send, 429, f"too many requests: at most {self.limits.rate_per_s:g} per second "
                                          f"(burst {self.limits.burst}) per client; retry after {wait:.1f} s",
                               [(b"retry-after", str(max(1, math.ceil(wait))).encode())])
            return
        limit = self.limits.max_request_bytes
        if not limit or scope.get("method") in ("GET", "HEAD", "DELETE", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        too_large = (f"request body too large: the limit is {limit // 1024:,} KB "
                     f"(LIBRARY_MCP_MAX_REQUEST_KB); send less text per call")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            await self._refuse(send, 413, too_large)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later: disconnect notices

        await self.app(scope, replay, send)


def http_app(server: MCPServer, host: str = "127.0.0.1", token: str | None = None,
             identities: IdentityMap | None = None, limits: HttpLimits | None = None) -> Any:
    """The streamable-HTTP ASGI app (endpoint /mcp), behind the bearer check when a token
    or an identities file is configured. Raises SystemExit when asked to bind beyond
    loopback without either."""
    token = token if token is not None else get_settings().mcp_token
    if identities is None:
        try:
            identities = load_identities()
        except IdentityError as exc:
            raise SystemExit(str(exc)) from None
    if not is_loopback(host) and not token and not identities:
        raise SystemExit(f"refusing to serve MCP on {host} without a token: set {TOKEN_ENV} "
                         f"(clients then send 'Authorization: Bearer <token>') or LIBRARY_IDENTITIES, "
                         f"or bind 127.0.0.1")
    limits = limits or HttpLimits.from_env()
    # mcp 2.x refuses bodies above 4 MiB itself (a bare "Request body too large");
    # RequestGuard answers first with the setting's name, the transport's limit
    # follows it so the two cannot disagree
    app = server.streamable_http_app(  # DNS-rebinding protection on loopback
        host=host, **({"max_request_body_size": limits.max_request_bytes} if limits.max_request_bytes else {}))
    try:
        local = env_identity()
    except IdentityError as exc:
        raise SystemExit(str(exc)) from None
    # the guard sits inside the bearer check: a request without a valid token costs
    # one header comparison and never reaches a bucket or the body reader
    app = RequestGuard(app, limits)
    if token or identities:
        return BearerAuth(app, token, identities, token_identity=local)
    return _LocalIdentity(app, local)


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
