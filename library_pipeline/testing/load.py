"""The load scenario (benchmarks/load.py measures it, library_pipeline_tests/test_load.py
runs it for 10 s): concurrent MCP clients over streamable HTTP (the real `mcp`
client, one bearer token = one agent each) searching the library and agent
memory while an ingest and the memory upkeep run beside them. Reports errors
and p50/p95.

The server is `python -m serving.mcp_server --http` in its own process with
the default request limits (LIBRARY_MCP_RATE etc.), so its 429/413 answers would
count as errors here. Beside the clients: a forked ingest process (the zygote of
library_pipeline/testing/crash.py) re-ingesting the library as new files arrive,
and a thread running the memory curation steps (near duplicates, decay,
promotion, retention) in a loop. Each client mostly calls library_search; one
call in ten is memory_index (its own `self` / `department` records) and one
memory_search.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from library_pipeline.testing import crash

# the folder holding the packages (the repository in a checkout): the MCP server
# process imports them from there
PACKAGES_ROOT = Path(__file__).resolve().parents[2]

QUERIES = ["tide tables", "harbour master", "when is high water", "northern coast fishing fleet",
           "lighthouse keeper lantern", "spring months at dawn", "ebb and flood", "chart of the reef",
           "moby dick", "the white whale"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def _client(url: str, token: str, n: int, deadline: float, out: dict[str, Any]) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    rng = random.Random(n)
    http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    try:
        async with http_client, Client(streamable_http_client(url, http_client=http_client),
                                       read_timeout_seconds=120) as client:
            calls = 0
            while time.monotonic() < deadline:
                calls += 1
                # A client's first call indexes and its second searches its memory, then
                # one in ten of each: on a slow box a 10-s run gives a client fewer than
                # ten calls, and a mix that indexed only at the tenth never indexed at all.
                phase = (calls - 1) % 10
                if phase == 0:
                    tool, args = "memory_index", {"artifact_id": f"load-{n}-{calls}", "scope": rng.choice(
                        ["self", "department"]), "content": f"Client {n} noted: {rng.choice(QUERIES)} at call {calls}."}
                elif phase == 1:
                    tool, args = "memory_search", {"query": rng.choice(QUERIES), "top_k": 5}
                else:
                    tool, args = "library_search", {"query": rng.choice(QUERIES), "top_k": 10}
                started = time.perf_counter()
                try:
                    result = await client.call_tool(tool, args)
                    ok = not result.is_error
                    detail = "" if ok else " ".join(getattr(c, "text", "") for c in result.content)[:300]
                except Exception as exc:  # transport errors are counted, not raised
                    ok, detail = False, f"{type(exc).__name__}: {exc}"[:300]
                out["latency"].setdefault(tool, []).append((time.perf_counter() - started) * 1000)
                if not ok:
                    out["errors"].append(f"client {n} {tool}: {detail}")
    except Exception as exc:
        out["errors"].append(f"client {n} session: {type(exc).__name__}: {exc}"[:300])


def _upkeep(dsn: str, stop: threading.Event, out: dict[str, Any]) -> None:
    import psycopg

    from library_pipeline.memory import curation

    while not stop.is_set():
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:  # so each step's transaction is its own
                from pgvector.psycopg import register_vector

                register_vector(conn)
                now = dt.datetime.now(dt.timezone.utc)
                # one transaction per step, as the memory assets commit them
                for step in (lambda: curation.near_duplicates(conn), lambda: curation.decay(conn, now),
                             lambda: curation.promotion(conn, now), lambda: curation.retention(conn, now)):
                    with conn.transaction():
                        step()
            out["upkeep_rounds"] += 1
        except Exception as exc:
            out["errors"].append(f"upkeep: {type(exc).__name__}: {exc}"[:300])
        stop.wait(0.5)


def _ingest_loop(zygote, env: dict[str, str], library: Path, stop: threading.Event, out: dict[str, Any]) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        (library / "arrivals" / f"arrival {n:03d}.txt").parent.mkdir(exist_ok=True)
        (library / "arrivals" / f"arrival {n:03d}.txt").write_text(
            f"Arrival {n}. The harbour master logged a schooner at dawn; the tide tables said high water. " * 8)
        result = zygote.run(env=env)
        if result.get("exit") != 0:
            out["errors"].append(f"ingest run {n}: {result}")
        else:
            out["ingest_runs"] += 1


def write_identities(path: Path, clients: int) -> list[str]:
    tokens = [f"load-token-{i:02d}-{uuid.uuid4().hex}" for i in range(clients)]
    lines = ["[tokens]"] + [f'"{t}" = {{ agent = "agent{i:02d}", department = "dept{i % 4}" }}'
                            for i, t in enumerate(tokens)]
    path.write_text("\n".join(lines) + "\n")
    return tokens


def run_load(dsn: str, library: Path, work: Path, *, clients: int = 20, seconds: float = 60.0,
             background: bool = True) -> dict[str, Any]:
    """The load run against an already ingested library; returns the figures."""
    tokens = write_identities(work / "identities.toml", clients)
    port = _free_port()
    env = {**os.environ, "LIBRARY_DB_DSN": dsn, "LIBRARY_DIR": str(library), "LIBRARY_HOME": str(work / "home"),
           "LIBRARY_IDENTITIES": str(work / "identities.toml"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "LIBRARY_LOG_LEVEL": "WARNING", "PYTHONPATH": str(PACKAGES_ROOT)}
    server_log = open(work / "server.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "serving.mcp_server", "--http", "--port", str(port)],
                              env=env, cwd=str(PACKAGES_ROOT), stdout=server_log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    out: dict[str, Any] = {"latency": {}, "errors": [], "upkeep_rounds": 0, "ingest_runs": 0}
    stop = threading.Event()
    threads: list[threading.Thread] = []
    zygote = None
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"MCP server did not start: {(work / 'server.log').read_text()[-2000:]}")
                time.sleep(0.3)
        # one warm call: the server loads MiniLM in the background at start
        warm: dict[str, Any] = {"latency": {}, "errors": []}
        asyncio.run(_client(url, tokens[0], 0, time.monotonic() + 0.1, warm))
        if warm["errors"]:
            raise RuntimeError(f"warm-up failed: {warm['errors']}")
        if background:
            zygote = crash.Zygote({k: env[k] for k in ("LIBRARY_DB_DSN", "LIBRARY_DIR", "LIBRARY_HOME")},
                                  log_path=work / "ingest.log").__enter__()
            threads = [threading.Thread(target=_upkeep, args=(dsn, stop, out), daemon=True),
                       threading.Thread(target=_ingest_loop, args=(zygote, {k: env[k] for k in (
                           "LIBRARY_DB_DSN", "LIBRARY_DIR", "LIBRARY_HOME")}, library, stop, out), daemon=True)]
            for t in threads:
                t.start()

        async def clients_run() -> None:
            end = time.monotonic() + seconds
            await asyncio.gather(*(_client(url, tokens[i], i, end, out) for i in range(clients)))

        started = time.perf_counter()
        asyncio.run(clients_run())
        wall = time.perf_counter() - started
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        if zygote is not None:
            zygote.__exit__(None, None, None)
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        server_log.close()
    every = [ms for values in out["latency"].values() for ms in values]
    figures = {
        "clients": clients, "seconds": round(wall, 1), "calls": len(every), "errors": len(out["errors"]),
        "error_samples": out["errors"][:5], "calls_per_s": round(len(every) / wall, 1),
        "p50_ms": round(percentile(every, 50), 1), "p95_ms": round(percentile(every, 95), 1),
        "per_tool": {tool: {"calls": len(v), "p50_ms": round(percentile(v, 50), 1),
                            "p95_ms": round(percentile(v, 95), 1), "mean_ms": round(statistics.fmean(v), 1)}
                     for tool, v in sorted(out["latency"].items())},
        "ingest_runs_during_load": out["ingest_runs"], "upkeep_rounds_during_load": out["upkeep_rounds"],
        "http_429_or_413_in_server_log": (work / "server.log").read_text(errors="replace").count("rate limit"),
    }
    return figures
