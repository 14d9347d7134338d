"""Security rules that need no database or model: bearer tokens off loopback
(constant-time), request-size and rate limits on the HTTP transport, SQL built only
with parameters (a source scan with an allowlist), a hypothesis fuzz of the query
parser and filters, and no password or token in logs or error messages (against a
database that cannot be reached). Path traversal through tool arguments, the fuzz
against a real database and memory scopes under concurrency are
library_pipeline_tests/test_security.py."""

from __future__ import annotations

import ast
import asyncio
import hmac
import logging
import re
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving import mcp_server
from serving.db import Database, redact
from serving.mcp_server import BearerAuth, HttpLimits, RequestGuard, build_server, http_app
from serving.runtime import Library
from serving.search.filters import passage_predicate
from serving.search.query import normalise_query, validate_top_k
from serving.search.types import MAX_QUERY_CHARS, MAX_TOP_K, SearchError, SearchFilters, Viewer
from serving.settings import Settings

REPO = Path(__file__).resolve().parents[2]


# -- SQL only with parameters ----------------------------------------------------------

# Places where SQL text is assembled from Python values. Each is assembled from
# constants written in the same module (never from caller input); values are bound.
SQL_ALLOWLIST = {
    ("library_pipeline/instance/storage.py", "call"): "a SQLAlchemy Insert from Dagster's own "
                                                     "prepare_insert_event_batch: every value bound",
    ("library_pipeline/eval/realset.py", "f-string"): "joins constant WHERE clauses; days/kinds are bound",
    ("library_pipeline/migrate/embedder.py", "f-string"): "_eligible_sql() returns a constant clause; target is bound",
    ("library_pipeline/vault/store.py", "concat"): "appends the constant ' FOR UPDATE'",
    ("serving/memory/store.py", "format"): "_MERGE_SQL is a psycopg.sql.SQL composed with sql.Identifier",
    ("library_pipeline/enrich/raptor.py", "format"): "LEAVES_SQL is a psycopg.sql.SQL composed with sql.Identifier "
                                                      "of one of two constant column pairs",
    ("serving/passage_writer.py", "f-string"): "function name, column list and level clause are constants of "
                                               "the module; `stale`'s clause is a literal at both callers; "
                                               "every value is bound",
}
_SQL_START = re.compile(r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|TRUNCATE|COPY)\b", re.I)


def _is_sql_composition(node: ast.AST) -> bool:
    """psycopg.sql.SQL(...) / sql.SQL(...), or .format/.join on one: safe composition."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "SQL" or isinstance(func, ast.Name) and func.id == "SQL":
            return isinstance(node.args[0], ast.Constant) if node.args else True
        if isinstance(func, ast.Attribute) and func.attr in ("format", "join", "as_string"):
            return _is_sql_composition(func.value)
    return False


def _kind(node: ast.AST) -> str | None:
    """Why a query argument is dynamic, or None when it is static / safely composed."""
    if isinstance(node, ast.Constant) or _is_sql_composition(node):
        return None
    if isinstance(node, (ast.Name, ast.Attribute)):  # a module constant or a composed object
        return None
    if isinstance(node, ast.JoinedStr):
        return "f-string" if any(isinstance(v, ast.FormattedValue) for v in node.values) else None
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mod):
            return "percent"
        left, right = _kind(node.left), _kind(node.right)
        return left or right or (None if all(isinstance(s, (ast.Constant, ast.JoinedStr)) for s in (node.left, node.right))
                                 else "concat")
    if isinstance(node, ast.IfExp):
        return _kind(node.body) or _kind(node.orelse)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return "format"
    return "call"


def sql_violations() -> list[str]:
    found = []
    for path in sorted([*(REPO / "serving").rglob("*.py"), *(REPO / "library_pipeline").rglob("*.py")]):
        rel = path.relative_to(REPO).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            kind, where = None, None
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("execute", "executemany") and node.args):
                kind, where = _kind(node.args[0]), node.args[0]
            elif isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.FormattedValue) for v in node.values):
                head = node.values[0]
                if isinstance(head, ast.Constant) and _SQL_START.match(str(head.value)):
                    kind, where = "f-string", node
            if kind and (rel, kind) not in SQL_ALLOWLIST:
                found.append(f"{rel}:{where.lineno}: {kind}: {ast.unparse(where)[:120]}")
    return sorted(set(found))


def test_sql_is_built_with_parameters_only():
    """The rule: user values reach SQL only as bound parameters; SQL text is a
    constant or composed with psycopg.sql (Identifier / Placeholder). Dynamic text
    (f-strings, %, +, str.format) in a query is allowed only where listed above."""
    assert sql_violations() == []
    # the scanner is not blind: it flags what it must
    bad = ast.parse('conn.execute(f"SELECT * FROM t WHERE a = {x}")\nconn.execute("SELECT %s" % x)\n'
                    'conn.execute("SELECT " + x)\nq = f"DELETE FROM t WHERE id = {x}"')
    kinds = [_kind(n.args[0]) for n in ast.walk(bad) if isinstance(n, ast.Call) and n.args]
    assert kinds == ["f-string", "percent", "concat"]
    assert _kind(ast.parse('sql.SQL("SELECT {}").format(sql.Identifier(x))').body[0].value) is None


# -- HTTP transport: tokens, sizes, rates ------------------------------------------------

def _asgi_client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("203.0.113.9", 40000)),
                             base_url="http://library.test")


async def _echo_app(scope, receive, send):
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"got %d bytes" % len(body)})


def test_off_loopback_needs_a_valid_token_compared_in_constant_time(monkeypatch):
    lib = Library(Settings(library_dir=Path("/nonexistent"), home=Path("/nonexistent"), db_dsn="dbname=none"))
    server = build_server(lib, stdio_identity=Viewer())
    monkeypatch.delenv(mcp_server.TOKEN_ENV, raising=False)
    monkeypatch.delenv("LIBRARY_IDENTITIES", raising=False)
    with pytest.raises(SystemExit, match="without a token"):
        http_app(server, "0.0.0.0")
    token = "correct-horse-battery-staple-9"
    app = http_app(server, "0.0.0.0", token=token)
    assert isinstance(app, BearerAuth)
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))

    async def run() -> list[int]:
        async with _asgi_client(app) as client:
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            codes = [(await client.post("/mcp", json=ping)).status_code]
            for header in ("Bearer wrong", f"Bearer {token[:-1]}X", f"Basic {token}", f"Bearer {token[1:]}", "Bearer",
                           f"Bearer {token}{token}"):
                codes.append((await client.post("/mcp", json=ping, headers={"Authorization": header})).status_code)
            return codes

    codes = asyncio.run(run())
    assert codes == [401] * 7
    assert compared, "tokens must be compared with hmac.compare_digest"


def test_request_size_limit_413_and_rate_limit_429():
    guard = RequestGuard(_echo_app, HttpLimits(max_request_bytes=1024, rate_per_s=1.0, burst=3))

    async def run() -> dict:
        out = {}
        async with _asgi_client(guard) as client:
            out["small"] = await client.post("/mcp", content=b"x" * 1000, headers={"Authorization": "Bearer a"})
            out["declared"] = await client.post("/mcp", content=b"x" * 5000, headers={"Authorization": "Bearer b"})

            async def stream():
                for _ in range(10):
                    yield b"y" * 500  # chunked: no Content-Length to trust

            out["chunked"] = await client.post("/mcp", content=stream(), headers={"Authorization": "Bearer c"})
            burst = [await client.post("/mcp", content=b"{}", headers={"Authorization": "Bearer d"})
                     for _ in range(4)]
            out["burst"] = burst
            out["other_client"] = await client.post("/mcp", content=b"{}", headers={"Authorization": "Bearer e"})
        return out

    out = asyncio.run(run())
    assert out["small"].status_code == 200 and out["small"].text == "got 1000 bytes"
    for name in ("declared", "chunked"):
        assert out[name].status_code == 413, name
        assert "too large" in out[name].json()["error"] and "LIBRARY_MCP_MAX_REQUEST_KB" in out[name].text
    assert [r.status_code for r in out["burst"]] == [200, 200, 200, 429]
    refused = out["burst"][-1]
    assert int(refused.headers["retry-after"]) >= 1 and "too many requests" in refused.json()["error"]
    assert out["other_client"].status_code == 200  # buckets are per client


def test_limits_sit_behind_the_token_check(monkeypatch):
    """Through http_app: an unauthenticated flood gets 401s (never a bucket), an
    authenticated oversized body gets 413 before the MCP app sees it."""
    monkeypatch.delenv("LIBRARY_IDENTITIES", raising=False)
    lib = Library(Settings(library_dir=Path("/nonexistent"), home=Path("/nonexistent"), db_dsn="dbname=none"))
    app = http_app(build_server(lib, stdio_identity=Viewer()), "0.0.0.0", token="tok-123456789",
                   limits=HttpLimits(max_request_bytes=2048, rate_per_s=0.001, burst=2))

    async def run() -> list[int]:
        async with _asgi_client(app) as client:
            codes = [(await client.post("/mcp", content=b"{}")).status_code for _ in range(5)]
            big = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"x": "' + b"a" * 9000 + b'"}}'
            codes.append((await client.post("/mcp", content=big, headers={"Authorization": "Bearer tok-123456789",
                                                                        "Content-Type": "application/json"})).status_code)
            return codes

    assert asyncio.run(run()) == [401] * 5 + [413]


def test_limits_settings_from_env(monkeypatch):
    monkeypatch.setenv("LIBRARY_MCP_MAX_REQUEST_KB", "64")
    monkeypatch.setenv("LIBRARY_MCP_RATE", "0")
    limits = HttpLimits.from_env()
    assert limits.max_request_bytes == 64 * 1024 and limits.rate_per_s == 0
    monkeypatch.setenv("LIBRARY_MCP_RATE", "fast")
    with pytest.raises(SystemExit, match="LIBRARY_MCP_RATE must be a number"):
        HttpLimits.from_env()


# -- fuzzing the parser and filters --------------------------------------------------------

_filter_values = st.one_of(st.text(max_size=30), st.integers(min_value=-2**70, max_value=2**70), st.booleans(),
                           st.none(), st.lists(st.text(max_size=10), max_size=3), st.floats(allow_nan=True),
                           st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2))
_filter_maps = st.one_of(st.none(), st.dictionaries(
    st.sampled_from([*SearchFilters.accepted_names(), "colour", "Path", " scope ", "viewer", "agents"]),
    _filter_values, max_size=4), st.text(max_size=5), st.lists(st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(query=st.one_of(st.text(max_size=3000), st.binary(max_size=50).map(lambda b: b.decode("latin-1")),
                       st.integers(), st.none()),
       top_k=st.one_of(st.integers(), st.text(max_size=6), st.booleans(), st.floats(allow_nan=True)),
       filters=_filter_maps)
def test_fuzz_parser_and_filters(query, top_k, filters):
    """Only SearchError, never another exception; what passes is clean, bounded,
    and reaches SQL only as bound parameters."""
    try:
        text, _ = normalise_query(query)
    except SearchError:
        text = None
    if text is not None:
        assert 0 < len(text) <= MAX_QUERY_CHARS
        assert not any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in text)
    try:
        k, _ = validate_top_k(top_k)
        assert 1 <= k <= MAX_TOP_K
    except SearchError:
        pass
    try:
        parsed = SearchFilters.from_mapping(filters)
    except SearchError:
        return
    assert parsed.viewer is None and parsed.agents is None  # never settable by an agent
    predicate = passage_predicate(parsed)
    rendered = predicate.clause.as_string(None)
    for value in (parsed.paths or ()) + (parsed.kinds or ()):
        if len(value) > 3:
            assert value not in rendered  # bound, not spliced


# -- no secrets in logs or errors --------------------------------------------------------------

def test_no_password_or_token_in_logs_or_errors(caplog, tmp_path, monkeypatch):
    password, token = "Pa55-SECRET-w0rd", "tok-SECRET-0123456789"
    dsn = f"postgresql://alice:{password}@127.0.0.1:1/library?connect_timeout=2"
    caplog.set_level(logging.DEBUG)
    settings_ = Settings(library_dir=tmp_path, home=tmp_path, db_dsn=dsn)
    messages = []
    with pytest.raises(ConnectionError) as err:
        Database(settings_)._raw_connect()
    messages.append(str(err.value))
    lib = Library(settings_)
    try:
        with pytest.raises(ConnectionError) as err:
            lib.files("tides")
        messages.append(str(err.value))
    finally:
        lib.close()
    assert password not in redact(dsn) and "alice" in redact(dsn)
    # the MCP tool result an agent would see
    server = build_server(Library(settings_), stdio_identity=Viewer())

    async def call() -> str:
        result = await server.call_tool("library_files", {"pattern": "tides"})
        return repr(result)

    with pytest.raises(Exception) as tool_err:
        asyncio.run(call())
    messages.append(str(tool_err.value))
    # a token over HTTP, right and wrong, refused for size (never reaching the app)
    monkeypatch.delenv("LIBRARY_IDENTITIES", raising=False)
    app = http_app(server, "0.0.0.0", token=token, limits=HttpLimits(max_request_bytes=10, rate_per_s=0.001,
                                                                        burst=1))

    async def http() -> list[str]:
        async with _asgi_client(app) as client:
            texts = []
            for auth in (token, token + "x", token, token):
                r = await client.post("/mcp", content=b"x" * 100, headers={"Authorization": f"Bearer {auth}"})
                texts.append(f"{r.status_code} {r.headers} {r.text}")
            return texts

    messages.extend(asyncio.run(http()))
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''} {r.args!r}" for r in caplog.records)
    for text in [*messages, logged]:
        assert password not in text and token not in text, text[:500]
    assert any("413" in m for m in messages) and any("429" in m for m in messages)
    assert any("127.0.0.1" in m or "database" in m for m in messages[:2])
