"""Memory curation as plain functions over a connection (the Dagster assets in
library_pipeline.defs.memory.assets are thin shells): near-duplicates, decay,
promotion, retention, and the "no exact duplicates in global" invariant.

Every function takes `now` (the clock resource's time) instead of reading the
wall clock, so tests move time forward. Nothing here deletes a row: merges mark
`duplicate_of`, decay archives, retention moves to the cold tier. The passages
of a memory carry denormalised flags (scope, archived, superseded, cold) that
search filters on; each change below updates both tables in one transaction.
"""

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    changed: int = 0
    examined: int = 0
    details: Dict[str, float] = field(default_factory=dict)
    ids: List[int] = field(default_factory=list)


def _merge_into(conn: psycopg.Connection, dup_id: int, canonical_id: int, reason: str) -> None:
    """dup -> canonical: keep both rows, hide dup's passages, fold dup's meta and access count in."""
    conn.execute(
        "UPDATE memories c SET meta = d.meta || c.meta || jsonb_build_object('merged_duplicates', "
        "  coalesce(c.meta->'merged_duplicates', '[]'::jsonb) || jsonb_build_array(jsonb_build_object("
        "    'id', d.id, 'agent', d.agent, 'artifact_id', d.artifact_id, 'reason', %s::text))), "
        "  access_count = c.access_count + d.access_count, "
        "  accessed_at = greatest(c.accessed_at, d.accessed_at) "
        "FROM memories d WHERE c.id = %s AND d.id = %s", (reason, canonical_id, dup_id))
    conn.execute("UPDATE memories SET duplicate_of = %s WHERE id = %s", (canonical_id, dup_id))
    conn.execute("UPDATE passages SET superseded = true WHERE memory_id = %s", (dup_id,))


# -- near duplicates ---------------------------------------------------------------

CURSOR_KEY = "memory_near_dup_cursor"


def near_duplicates(conn: psycopg.Connection, threshold: float = 0.95, *, full_rescan: bool = False,
                    ef_search: int = 200) -> Outcome:
    """Each memory not yet examined (id above the stored cursor) is compared with OLDER
    live memories in the same dedup space (global / one department / one agent's self)
    by the cosine of their first passages; at >= threshold it becomes a duplicate of
    the nearest. The older record is canonical, so the answer does not depend on order."""
    out = Outcome()
    setting = conn.execute("SELECT value FROM settings WHERE key = 'embed_model'").fetchone()
    if setting is None:
        return out
    model, dims = setting[0]["name"], int(setting[0]["dims"])
    cursor = 0
    if not full_rescan:
        row = conn.execute("SELECT value FROM settings WHERE key = %s", (CURSOR_KEY,)).fetchone()
        cursor = int(row[0]) if row else 0
    todo = conn.execute(
        "SELECT m.id, m.scope, m.agent, m.department, p.embedding FROM memories m "
        "JOIN passages p ON p.memory_id = m.id AND p.ordinal = 0 AND p.embed_model = %s "
        "WHERE m.id > %s AND NOT m.superseded AND m.duplicate_of IS NULL ORDER BY m.id",
        (model, cursor)).fetchall()
    cast = sql.SQL("halfvec({})").format(sql.SQL(str(dims)))
    nearest = sql.SQL(
        "SELECT p.memory_id, 1 - (p.embedding::{cast} <=> %(q)s::{cast}) FROM passages p "
        "JOIN memories m ON m.id = p.memory_id "
        "WHERE p.embed_model = {model} AND p.summary_level = 0 AND p.source = 'memory' AND p.ordinal = 0 "
        "AND p.memory_id < %(id)s AND NOT p.superseded AND m.scope = %(scope)s "
        "AND (%(scope)s = 'global' OR (%(scope)s = 'department' AND m.department = %(dept)s) "
        "     OR (%(scope)s = 'self' AND m.agent = %(agent)s)) "
        "AND NOT m.superseded AND m.duplicate_of IS NULL "
        "ORDER BY p.embedding::{cast} <=> %(q)s::{cast} LIMIT 1").format(cast=cast, model=sql.Literal(model))
    with conn.transaction():
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                     "set_config('hnsw.ef_search', %s, true)", (str(ef_search),))
        merged_now: set = set()
        for mid, scope, agent, dept, emb in todo:
            out.examined += 1
            row = conn.execute(nearest, {"q": emb, "id": mid, "scope": scope, "dept": dept,
                                         "agent": agent}).fetchone()
            if row is None or row[0] in merged_now or float(row[1]) < threshold:
                continue
            _merge_into(conn, mid, row[0], f"near duplicate (cosine {float(row[1]):.3f} >= {threshold})")
            merged_now.add(mid)
            out.changed += 1
            out.ids.append(mid)
        last = max([cursor] + [r[0] for r in todo])
        conn.execute("INSERT INTO settings (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                     "SET value = EXCLUDED.value", (CURSOR_KEY, Jsonb(last)))
    return out


# -- decay ------------------------------------------------------------------------------

def decay(conn: psycopg.Connection, now: dt.datetime, *, period_days: float = 30, step: float = 0.1,
          archive_below: float = 0.1) -> Outcome:
    """Relevance -= step for every full period without access (counted from the last access,
    or creation); relevance < archive_below -> archived (hidden by default, never deleted)."""
    out = Outcome()
    with conn.transaction():
        rows = conn.execute(
            "WITH d AS (SELECT id, floor(extract(epoch FROM (%(now)s - coalesce(accessed_at, created_at))) "
            "                 / (%(period)s * 86400.0))::int AS periods FROM memories "
            "           WHERE archived_at IS NULL AND NOT superseded) "
            "UPDATE memories m SET relevance = greatest(0, m.relevance - %(step)s::numeric * (d.periods - m.decay_steps)), "
            "       decay_steps = d.periods "
            "FROM d WHERE d.id = m.id AND d.periods > m.decay_steps RETURNING m.id",
            {"now": now, "period": float(period_days), "step": str(step)}).fetchall()
        out.details["decayed"] = len(rows)
        archived = [r[0] for r in conn.execute(
            "UPDATE memories SET archived_at = %s WHERE archived_at IS NULL AND NOT superseded "
            "AND relevance < %s::numeric RETURNING id", (now, str(archive_below))).fetchall()]
        if archived:
            conn.execute("UPDATE passages SET archived = true WHERE memory_id = ANY(%s)", (archived,))
        out.details["archived"] = len(archived)
        out.examined = conn.execute("SELECT count(*) FROM memories WHERE archived_at IS NULL").fetchone()[0]
    out.changed = len(rows)
    out.ids = archived
    return out


# -- promotion --------------------------------------------------------------------------

def promotion(conn: psycopg.Connection, now: dt.datetime, *, min_accesses: int = 5, min_agents: int = 3,
              window_days: float = 30) -> Outcome:
    """Records read at least `min_accesses` times by at least `min_agents` distinct agents
    within the window -> scope global, with the reason. A record whose text is already
    in global is merged into that one instead (0 exact duplicates in global)."""
    out = Outcome()
    with conn.transaction():
        rows = conn.execute(
            "SELECT l.memory_id, count(*), count(DISTINCT l.agent), m.content_hash FROM memory_access_log l "
            "JOIN memories m ON m.id = l.memory_id "
            "WHERE l.at >= %(since)s AND l.at <= %(now)s AND m.scope <> 'global' AND NOT m.superseded "
            "AND m.archived_at IS NULL AND m.duplicate_of IS NULL "
            "GROUP BY l.memory_id, m.content_hash HAVING count(*) >= %(n)s AND count(DISTINCT l.agent) >= %(a)s "
            "ORDER BY l.memory_id",
            {"since": now - dt.timedelta(days=window_days), "now": now, "n": min_accesses,
             "a": min_agents}).fetchall()
        out.examined = len(rows)
        for mid, n, agents, chash in rows:
            reason = f"read {n} times by {agents} distinct agents in {window_days:g} days"
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('memory:global::'))")
            existing = conn.execute(
                "SELECT id FROM memories WHERE scope = 'global' AND content_hash = %s AND NOT superseded "
                "AND duplicate_of IS NULL ORDER BY id LIMIT 1", (chash,)).fetchone()
            if existing:
                _merge_into(conn, mid, existing[0], "promotion: " + reason + "; text already in global")
                out.details["merged"] = out.details.get("merged", 0) + 1
            else:
                conn.execute("UPDATE memories SET scope = 'global', promoted_at = %s, promoted_reason = %s "
                             "WHERE id = %s", (now, reason, mid))
                conn.execute("UPDATE passages SET scope = 'global' WHERE memory_id = %s", (mid,))
                out.details["promoted"] = out.details.get("promoted", 0) + 1
            out.changed += 1
            out.ids.append(mid)
    return out


# -- retention --------------------------------------------------------------------------

def retention(conn: psycopg.Connection, now: dt.datetime, *, self_days: float = 90,
              department_days: float = 365) -> Outcome:
    """Inactive `self` records (no access for self_days) and `department` records
    (department_days) -> cold tier: excluded by default, returned on request.
    `global` records never expire."""
    out = Outcome()
    with conn.transaction():
        rows = conn.execute(
            "UPDATE memories SET tier = 'cold', cold_at = %(now)s WHERE tier = 'active' AND ("
            " (scope = 'self' AND coalesce(accessed_at, created_at) < %(self_cut)s) OR "
            " (scope = 'department' AND coalesce(accessed_at, created_at) < %(dept_cut)s)) RETURNING id, scope",
            {"now": now, "self_cut": now - dt.timedelta(days=self_days),
             "dept_cut": now - dt.timedelta(days=department_days)}).fetchall()
        ids = [r[0] for r in rows]
        if ids:
            conn.execute("UPDATE passages SET cold = true WHERE memory_id = ANY(%s)", (ids,))
        out.examined = conn.execute("SELECT count(*) FROM memories WHERE tier = 'active'").fetchone()[0] + len(ids)
    out.changed = len(ids)
    out.ids = ids
    out.details = {"self": sum(r[1] == "self" for r in rows), "department": sum(r[1] == "department" for r in rows)}
    return out


# -- invariant ----------------------------------------------------------------------------

def exact_duplicates_in_global(conn: psycopg.Connection) -> List[List[int]]:
    """Groups of live global records with the same normalised text (recomputed from the
    content, not trusted from content_hash). The invariant is that this is empty."""
    rows = conn.execute(
        "SELECT array_agg(id ORDER BY id) FROM memories WHERE scope = 'global' AND NOT superseded "
        "AND duplicate_of IS NULL GROUP BY memory_content_hash(content) HAVING count(*) > 1 "
        "ORDER BY min(id)").fetchall()
    return [list(r[0]) for r in rows]


def memory_counts(conn: psycopg.Connection) -> Dict[str, int]:
    row = conn.execute(
        "SELECT count(*), count(*) FILTER (WHERE scope = 'global'), count(*) FILTER (WHERE archived_at IS NOT NULL), "
        "count(*) FILTER (WHERE tier = 'cold'), count(*) FILTER (WHERE duplicate_of IS NOT NULL), "
        "count(*) FILTER (WHERE superseded) FROM memories").fetchone()
    return dict(zip(("memories", "global", "archived", "cold", "duplicates", "superseded"), map(int, row)))


def default_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def parse_now(value: Optional[str]) -> Optional[dt.datetime]:
    if not value:
        return None
    t = dt.datetime.fromisoformat(value)
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
