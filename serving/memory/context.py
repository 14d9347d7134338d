"""Memories read with their context: a record is scored with its thread neighbours.

A conversation turn, a log line or a step of a task is rarely whole alone: "Adoption
agencies" answers the turn before it ("What did you research?"); the turn that names
the event is next to the one that says when. A record that an agent indexed with
`meta.thread` (a session, a conversation, a task) has neighbours: the records of the
same agent and thread written just before and after it. Memory search reads them
together - after the lanes and fusion have ranked the pool, each record gains a share
of its best neighbour's fused score, and a neighbour the lanes did not reach joins the
pool with that share alone (so the answer next to a matching question is found).

Records without a thread rank exactly as before. Neighbours are read under the
viewer's visibility clause, live ones only (not superseded, archived, cold or merged into
a duplicate); when the caller narrows the search with a filter, only records already in
the fused pool take part, so a filter is never widened.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

from serving.search.filters import visibility
from serving.search.types import Viewer

log = logging.getLogger(__name__)

# Share of a neighbour's fused score a record gains; neighbours within WINDOW records, the
# share halved per step beyond the first. Chosen on LoCoMo's first dev conversation (conv-26,
# 150 questions, evidence recall@10 through search_memory; records alone 0.685): share 0.3 /
# 0.5 / 0.8 / 1.0 at window 1 gave 0.745 / 0.756 / 0.734 / 0.727, and multi-hop fell
# (0.43 -> 0.37 at 0.5); window 2 at 0.5 gave 0.767 with multi-hop 0.41. Taking the sum of
# the neighbours' shares instead of the best one (0.734), or only lifting a record to the
# share (max, not add: 0.736), did worse; a boost for records whose meta.speaker the question
# names added nothing (0.767 -> 0.768). The dev-half figures are in docs/evaluation.md.
NEIGHBOUR_SHARE = 0.5
WINDOW = 2

_NEIGHBOURS_SQL = """
WITH hit AS (SELECT m.id, m.agent, m.meta->>'thread' AS thread
               FROM memories m WHERE m.id = ANY(%(ids)s) AND m.meta ? 'thread')
SELECT hit.id, n.id
  FROM hit
  CROSS JOIN LATERAL (
    (SELECT x.id FROM memories x
      WHERE x.agent = hit.agent AND x.meta->>'thread' = hit.thread AND x.id < hit.id AND {live}
      ORDER BY x.id DESC LIMIT %(window)s)
    UNION ALL
    (SELECT x.id FROM memories x
      WHERE x.agent = hit.agent AND x.meta->>'thread' = hit.thread AND x.id > hit.id AND {live}
      ORDER BY x.id LIMIT %(window)s)
  ) n
"""
_LIVE = ("NOT x.superseded AND x.archived_at IS NULL AND x.duplicate_of IS NULL AND x.tier = 'active' "
         "AND x.meta ? 'thread' AND {vis}")


@dataclass
class Scored:
    record_id: int
    score: float            # the fused score from search (0 for a neighbour the lanes did not reach)
    context: float = 0.0    # the share gained from neighbours

    @property
    def total(self) -> float:
        return self.score + self.context


def thread_neighbours(conn: psycopg.Connection, viewer: Viewer, ids: list[int], window: int = WINDOW
                      ) -> dict[int, list[tuple[int, int]]]:
    """record id -> [(neighbour id, distance)] within `window` records of the same agent and
    thread, visible to `viewer` and live."""
    if not ids:
        return {}
    vis = visibility(viewer, "x")
    q = sql.SQL(_NEIGHBOURS_SQL).format(live=sql.SQL(_LIVE).format(vis=vis.clause))
    found: dict[int, list[int]] = {}
    for rid, nid in conn.execute(q, {**vis.params, "ids": ids, "window": window}).fetchall():
        found.setdefault(rid, []).append(nid)
    out: dict[int, list[tuple[int, int]]] = {}
    for rid, nids in found.items():
        before = sorted((n for n in nids if n < rid), reverse=True)
        after = sorted(n for n in nids if n > rid)
        out[rid] = [(n, i) for side in (before, after) for i, n in enumerate(side, start=1)]
    return out


def with_thread_context(conn: psycopg.Connection, viewer: Viewer, ranked: list[tuple[int, float]], *,
                        pool_only: bool = False, share: float = NEIGHBOUR_SHARE, window: int = WINDOW
                        ) -> list[Scored]:
    """`ranked` (record id, fused score), best first -> the same records and any neighbours
    that joined, best first by score + share x the best neighbour's score (halved per step
    of distance beyond the first)."""
    scored = {rid: Scored(rid, score) for rid, score in ranked}
    if share <= 0 or not ranked:
        return list(scored.values())
    base = dict(ranked)
    links = thread_neighbours(conn, viewer, [rid for rid, _ in ranked], window)
    gains: dict[int, float] = {}
    for rid, neighbours in links.items():
        for nid, dist in neighbours:
            if pool_only and nid not in base:
                continue
            gain = share * base[rid] / (2 ** (dist - 1))
            if gain > gains.get(nid, 0.0):
                gains[nid] = gain
    for nid, gain in gains.items():
        scored.setdefault(nid, Scored(nid, 0.0)).context = gain
    return sorted(scored.values(), key=lambda s: (-s.total, s.record_id))
