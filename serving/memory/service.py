"""The memory actions against a serving `Library` (pool + embedder): what the MCP
tools and `library memory ...` call."""

from __future__ import annotations

from typing import Any

from serving.memory.store import forget_memory, get_memory, index_memory, search_memory
from serving.search.types import Viewer


def memory_index(lib, viewer: Viewer | None, **kw: Any) -> dict[str, Any]:
    embedder = lib.embedder()
    with lib.connection() as conn:
        return index_memory(conn, embedder, viewer, **kw).to_dict()


def memory_search(lib, viewer: Viewer | None, query: Any, **kw: Any) -> dict[str, Any]:
    embedder = lib.embedder()
    with lib.connection() as conn:
        return search_memory(conn, embedder, viewer, query, **kw)


def memory_get(lib, viewer: Viewer | None, ref: Any) -> dict[str, Any]:
    with lib.connection() as conn:
        return get_memory(conn, viewer, ref)


def memory_forget(lib, viewer: Viewer | None, ref: Any, *, dry_run: bool = False) -> dict[str, Any]:
    with lib.connection() as conn:
        return forget_memory(conn, viewer, ref, dry_run=dry_run)
