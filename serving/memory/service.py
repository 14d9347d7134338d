"""The memory actions against a serving `Library` (pool + embedder): what the MCP
tools and `library memory ...` call."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from serving.memory.store import forget_memory, get_memory, index_memory, search_memory
from serving.search import health
from serving.search.types import Viewer

log = logging.getLogger(__name__)


def memory_index(lib, viewer: Viewer | None, **kw: Any) -> dict[str, Any]:
    embedder = lib.embedder()
    with lib.connection() as conn:
        result = index_memory(conn, embedder, viewer, **kw)
    if result.status in ("created", "new_version"):
        lib.memory_statistics.written(result.chunks)
    return result.to_dict()


def memory_search(lib, viewer: Viewer | None, query: Any, **kw: Any) -> dict[str, Any]:
    embedder = lib.embedder()
    started = time.perf_counter()
    with lib.connection() as conn:
        health.reset_last_log_id()
        out = search_memory(conn, embedder, viewer, query, **kw)
        _complete_log(conn, out, kw, (time.perf_counter() - started) * 1000)
        return out


def _complete_log(conn, out: dict[str, Any], kw: dict[str, Any], latency_ms: float) -> None:
    """The engine logged the underlying search (up to 100 passages, as a library search
    would); rewrite that row as the memory_search the agent made: the record ids it got
    back, the top_k and filter it asked for, the whole call's latency."""
    log_id = health.last_log_id()
    if log_id is None:
        return
    results = [{"id": r["id"], "source": r["source"], "lanes": r.get("lanes", {})} for r in out["results"]]
    try:
        with conn.transaction():
            conn.execute("UPDATE search_log SET kind = 'memory', results = %s, returned = %s, top_k = %s, "
                         "filters = filters || %s, latency_ms = %s WHERE id = %s",
                         (Jsonb(results), out["returned"], kw.get("top_k", 5),
                          Jsonb({"memory_filter": kw.get("filter") or {}}), round(latency_ms, 2), log_id))
    except psycopg.Error as exc:
        log.warning("could not complete the memory_search log row (%s); results are unaffected", exc)
    finally:
        health.reset_last_log_id()


def memory_get(lib, viewer: Viewer | None, ref: Any) -> dict[str, Any]:
    with lib.connection() as conn:
        return get_memory(conn, viewer, ref)


def memory_forget(lib, viewer: Viewer | None, ref: Any, *, dry_run: bool = False) -> dict[str, Any]:
    with lib.connection() as conn:
        return forget_memory(conn, viewer, ref, dry_run=dry_run)
