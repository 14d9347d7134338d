"""The MCP server's HTTP transport: bearer authentication, the caller's identity on
the ASGI scope, request-size and rate limits.

HTTP binds 127.0.0.1 by default. Binding any other address requires a bearer token
(LIBRARY_MCP_TOKEN), compared in constant time; when a token is set it is required on
loopback too. Over HTTP each bearer token in the LIBRARY_IDENTITIES file names an agent
and its department (an unknown token is refused before any tool runs).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import math
import threading
import time
from typing import Any

from mcp.server.mcpserver import MCPServer

from serving.memory.identity import IdentityError, IdentityMap, env_identity, load_identities
from serving.search.types import Viewer
from serving.settings import Settings, get_settings

log = logging.getLogger("serving.mcp")

TOKEN_ENV = "LIBRARY_MCP_TOKEN"
IDENTITY_SCOPE_KEY = "library.identity"  # set on the ASGI scope by BearerAuth


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
