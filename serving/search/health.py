"""Circuit breaker and query log, both kept in the database.

A degenerate result - an unfiltered search whose fused pool is empty, a vector
lane whose similarities are all equal, a cross-encoder whose scores are all
equal - is counted per component across calls and processes (table
`search_breaker` in schema.sql). THRESHOLD in a row opens the
breaker: the vector lane or the reranker is then bypassed (their output would
only add noise to fusion) until COOLDOWN_S has passed, when one search tries
it again (half-open) and either closes the breaker or re-opens it. Every state
other than closed is reported in the search response, so an agent - and the
person reading its transcript - sees "the embedder is returning constants"
instead of plausible-looking garbage.

Writes happen only when something changes (a degenerate result, or a reset
after one): a healthy search costs one small SELECT here, plus the log row.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from serving.db import database_key

log = logging.getLogger(__name__)

THRESHOLD = 3
COOLDOWN_S = 300.0
_ready: set[str] = set()
_ready_lock = threading.Lock()
_warned: set[str] = set()


def ensure_serving_tables(conn: psycopg.Connection) -> bool:
    """Whether search_breaker / search_log exist (schema.sql creates them; a
    database whose schema predates them still searches, unlogged)."""
    key = database_key(conn)
    if key in _ready:
        return True
    with _ready_lock:
        try:
            with conn.transaction():
                row = conn.execute("SELECT to_regclass('search_breaker') IS NOT NULL "
                                   "AND to_regclass('search_log') IS NOT NULL").fetchone()
        except psycopg.Error as exc:
            row = (False,)
            _warn_once("tables-error", f"cannot check the search breaker/log tables ({type(exc).__name__})")
        if row[0]:
            _ready.add(key)
            return True
        _warn_once("tables", "search breaker/log tables are missing (schema.sql not applied to this database); "
                             "searches are neither logged nor counted")
        return False


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


@dataclass
class Breaker:
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    now: dt.datetime | None = None
    available: bool = True

    def is_open(self, component: str) -> bool:
        """Open and still cooling down: bypass the component."""
        row = self.rows.get(component)
        if not row or row["opened_at"] is None or self.now is None:
            return False
        return (self.now - row["opened_at"]).total_seconds() < COOLDOWN_S

    def describe(self, component: str) -> str:
        row = self.rows[component]
        retry = row["opened_at"] + dt.timedelta(seconds=COOLDOWN_S)
        return (f"circuit open after {row['consecutive']} degenerate results in a row "
                f"({row['last_reason']}); retried after {retry:%H:%M:%S} UTC")


def read_breaker(conn: psycopg.Connection) -> Breaker:
    if not ensure_serving_tables(conn):
        return Breaker(available=False)
    rows = conn.execute("SELECT component, consecutive, degenerate_total, last_reason, opened_at, now() "
                        "FROM search_breaker").fetchall()
    state = Breaker(now=rows[0][5] if rows else None)
    for comp, consecutive, total, reason, opened_at, _ in rows:
        state.rows[comp] = {"consecutive": consecutive, "total": total, "last_reason": reason,
                            "opened_at": opened_at}
    return state


def record(conn: psycopg.Connection, state: Breaker, observations: dict[str, str | None],
           query: str) -> dict[str, Any]:
    """Count degenerate observations (reason given) and reset healthy ones. Returns the
    health report for the response: every component that is not plainly closed."""
    if not state.available:
        return {}
    for comp, reason in observations.items():
        if reason:
            row = conn.execute(
                "INSERT INTO search_breaker AS b (component, consecutive, degenerate_total, last_reason, "
                "  last_query, opened_at, updated_at) "
                "VALUES (%(c)s, 1, 1, %(r)s, %(q)s, CASE WHEN 1 >= %(t)s THEN now() END, now()) "
                "ON CONFLICT (component) DO UPDATE SET consecutive = b.consecutive + 1, "
                "  degenerate_total = b.degenerate_total + 1, last_reason = excluded.last_reason, "
                "  last_query = excluded.last_query, updated_at = now(), "
                "  opened_at = CASE WHEN b.consecutive + 1 >= %(t)s THEN now() ELSE b.opened_at END "
                "RETURNING consecutive, degenerate_total, opened_at",
                {"c": comp, "r": reason, "q": query[:500], "t": THRESHOLD}).fetchone()
            state.rows[comp] = {"consecutive": row[0], "total": row[1], "last_reason": reason,
                                "opened_at": row[2]}
            if row[0] == THRESHOLD:
                log.error("circuit breaker %r opened: %s (%d in a row)", comp, reason, row[0])
        elif comp in state.rows and (state.rows[comp]["consecutive"] or state.rows[comp]["opened_at"]):
            conn.execute("UPDATE search_breaker SET consecutive = 0, opened_at = NULL, updated_at = now() "
                         "WHERE component = %s", (comp,))
            state.rows[comp].update(consecutive=0, opened_at=None)
            log.info("circuit breaker %r closed", comp)
    return health_report(state)


def health_report(state: Breaker) -> dict[str, Any]:
    out = {}
    for comp, row in sorted(state.rows.items()):
        if row["consecutive"] or row["opened_at"]:
            out[comp] = {"state": "open" if row["opened_at"] else "counting",
                         "consecutive": row["consecutive"], "threshold": THRESHOLD,
                         "last_reason": row["last_reason"]}
    return out


_last_log_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("search_log_id", default=None)


def last_log_id() -> int | None:
    """The search_log row the last search in this context wrote (None: not logged),
    so a wrapper such as memory_search can complete the row with what it returned."""
    return _last_log_id.get()


def reset_last_log_id() -> None:
    _last_log_id.set(None)


def log_search(conn: psycopg.Connection, *, query: str, top_k: int, filters: dict, config: str, returned: int,
               pool: int, lanes: dict[str, int], timings: dict[str, float], degenerate: str | None,
               results: list[dict[str, Any]] | None = None, kind: str = "library") -> int | None:
    """One search_log row (unless LIBRARY_QUERY_LOG=off). The caller's identity comes out
    of the filters into its own columns, so an export can drop it by leaving columns out."""
    from serving.settings import query_log_enabled

    _last_log_id.set(None)
    if not query_log_enabled():
        return None
    filters = dict(filters)
    viewer = filters.pop("viewer", None) or {}
    row = conn.execute(
        "INSERT INTO search_log (query, top_k, filters, config, returned, pool, lanes, timings, degenerate, "
        "  kind, caller_agent, caller_department, results, latency_ms) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (query[:2000], top_k, Jsonb(filters), config, returned, pool, Jsonb(lanes),
         Jsonb({k: round(v, 2) for k, v in timings.items()}), degenerate, kind,
         viewer.get("agent"), viewer.get("department"), Jsonb(results) if results is not None else None,
         round(timings["total"], 2) if "total" in timings else None)).fetchone()
    _last_log_id.set(row[0])
    return row[0]


def prune_search_log(conn: psycopg.Connection, days: int) -> int:
    """Delete log rows older than `days` (retention); returns how many went."""
    if days <= 0:
        raise ValueError(f"query-log retention must be at least 1 day, got {days}")
    return conn.execute("DELETE FROM search_log WHERE at < now() - make_interval(days => %s)", (days,)).rowcount


def breaker_status(conn: psycopg.Connection) -> dict[str, Any]:
    """Every component's breaker row, for `library status`-style reports."""
    if not ensure_serving_tables(conn):
        return {}
    rows = conn.execute("SELECT component, consecutive, degenerate_total, last_reason, opened_at, updated_at "
                        "FROM search_breaker ORDER BY component").fetchall()
    return {r[0]: {"consecutive": r[1], "degenerate_total": r[2], "last_reason": r[3],
                   "opened_at": r[4].isoformat() if r[4] else None, "updated_at": r[5].isoformat()}
            for r in rows}
