"""Knowledge-graph queries: the read path of the graph (the MCP tools in
serving/graph_tools.py, library_entity / library_related / library_path /
library_subgraph, and `library graph ...`). (~400 lines, one responsibility: the
graph's reads, all over the same live-documents views.)

Names go through the same SQL normalisation as the write path
(kg_normalise_name in schema.sql), so a lookup finds what extraction stored.
Edges are aggregated across files and ranked by how many files assert them:
one book repeating a claim a hundred times is one source. Rows of removed
files are ignored. Direction is reported as stored; co-occurrence rows
(`related_to`, extractor 'cooccurrence') have none and read "undirected".

Every read goes through schema.sql's kg_live_documents / kg_live_entities: a
file marked removed leaves every answer at the moment its passages leave
search, an edited file's graph is hidden (and named pending in `coverage`)
until it is extracted from the new version, and an entity no live file
mentions is not found - a filter on document status alone had left such
entities "found" with `files: []`, counted in stats and matched by name.

agent-library (github.com/CreateM1nd/agent-library) stopped at one hop; paths (<= 3 hops), subgraphs
and aggregates are what its agents asked for next.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import psycopg
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from serving.ontology import ENTITY_TYPES, FORM_OF_ADDRESS, RELATION_TYPES

MAX_HOPS = 3
MAX_LIMIT = 200
FANOUT = 100          # neighbours followed per node in path search, strongest first


def max_edits(name_norm: str) -> int:
    """Edits a name may differ by and still be the same entity: 1 from 8
    characters, 2 from 12, none below 8. One rule for the write path (entity
    resolution in library_pipeline/enrich/kg_store.py) and lookups here:
    at 2 edits for every length, "Hosmer" / "Homer" and "Mary" / "Mark" merged."""
    n = len(name_norm)
    return 2 if n >= 12 else 1 if n >= 8 else 0


class GraphError(ValueError):
    """Input the caller must fix (unknown relation, bad direction, limits)."""


def _limit(value: int, name: str = "limit") -> int:
    if not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise GraphError(f"{name} must be an integer from 1 to {MAX_LIMIT}")
    return value


# A person named commonly («Иван Иваныч») is an entity of one work: its normalised name
# ends in " @<document id>" (library_pipeline/enrich/kg_file_resolution.py), and a lookup
# of the name answers with one candidate per work, each naming its work.
_ENTITY_SQL = """
SELECT e.id, e.name, e.type, e.type_raw,
       coalesce(sum(s.mentions), 0)::int AS mentions, count(s.document_id)::int AS source_count,
       (SELECT d.path FROM documents d WHERE d.id = substring(e.name_norm FROM ' @([0-9]+)$')::bigint) AS work
FROM entities e
LEFT JOIN entity_sources s ON s.entity_id = e.id
     AND s.document_id IN (SELECT id FROM kg_live_documents)
WHERE e.id = ANY(%s)
GROUP BY e.id
"""


def _entities(conn: psycopg.Connection, ids: list[int]) -> dict[int, dict]:
    rows = conn.execute(_ENTITY_SQL, (ids,)).fetchall()
    return {r[0]: {"id": r[0], "name": r[1], "type": r[2], "type_raw": r[3], "mentions": r[4],
                   "source_count": r[5], **({"work": r[6]} if r[6] else {})} for r in rows}


_LENGTH_SQL = "SELECT id, name_norm FROM kg_live_entities WHERE length(name_norm) BETWEEN %s AND %s"
_EXACT_SQL = ("SELECT id, 'exact' FROM kg_live_entities WHERE name_norm = %s UNION ALL "
              "SELECT a.entity_id, 'alias' FROM entity_aliases a JOIN kg_live_entities e ON e.id = a.entity_id "
              "WHERE a.alias_norm = %s LIMIT 1")


# normalised names hold no LIKE wildcards (letters, digits, spaces, + and # only)
_WITHIN_WORKS_SQL = ("SELECT id, 'exact' FROM kg_live_entities WHERE name_norm LIKE %(q)s || ' @%%' UNION "
                     "SELECT a.entity_id, 'alias' FROM entity_aliases a JOIN kg_live_entities e ON e.id = a.entity_id "
                     "WHERE a.alias_norm LIKE %(q)s || ' @%%'")


def resolve(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    """{"status": found | ambiguous | not_found, "entity", "candidates", "matched"}.
    Exact (normalised) name or alias first; then containment and edit distance <= 2,
    which return candidates unless exactly one entity fits."""
    if not isinstance(name, str) or not name.strip():
        raise GraphError("name must be a non-empty string")
    # "Mr. Hyde" is looked up as written first, then without the form of address
    bare = FORM_OF_ADDRESS.sub("", name.strip()[:200], count=1)
    norm, bare_norm = conn.execute("SELECT kg_normalise_name(%s), kg_normalise_name(%s)",
                                   (name[:200], bare)).fetchone()
    row = conn.execute(_EXACT_SQL, (norm, norm)).fetchone()
    if row is None and bare_norm != norm and bare_norm:
        norm = bare_norm
        row = conn.execute(_EXACT_SQL, (norm, norm)).fetchone()
    if row:
        return {"status": "found", "matched": row[1], "entity": _entities(conn, [row[0]])[row[0]], "candidates": []}
    # the name held within works (_ENTITY_SQL): one work's person is found, several are candidates
    within = conn.execute(_WITHIN_WORKS_SQL, {"q": norm}).fetchall()
    if within:
        found = _entities(conn, sorted({r[0] for r in within}))
        candidates = sorted(found.values(), key=lambda e: (-e["mentions"], e["name"], e.get("work") or ""))
        if len(candidates) == 1:
            return {"status": "found", "matched": within[0][1], "entity": candidates[0], "candidates": []}
        return {"status": "ambiguous", "matched": "name within works", "entity": None, "candidates": candidates[:10]}
    # a short name a file shares between several full names ("Stoner": Helen and Julia)
    shared = [r[0] for r in conn.execute(
        "SELECT DISTINCT c.entity_id FROM entity_alias_candidates c JOIN kg_live_documents l ON l.id = c.document_id "
        "JOIN kg_live_entities e ON e.id = c.entity_id WHERE c.alias_norm = %s", (norm,)).fetchall()]
    if shared:
        found = _entities(conn, shared)
        candidates = sorted(found.values(), key=lambda e: (-e["mentions"], e["name"]))
        if len(candidates) == 1:
            return {"status": "found", "matched": "alias", "entity": candidates[0], "candidates": []}
        return {"status": "ambiguous", "matched": "shared name", "entity": None, "candidates": candidates[:10]}
    ids: list[int] = []
    if max_edits(norm):
        # a misspelling of exactly one name resolves to it, like the write path does
        choices = dict(conn.execute(_LENGTH_SQL, (len(norm) - 2, len(norm) + 2)).fetchall())
        close = process.extract(norm, choices, scorer=Levenshtein.distance, score_cutoff=max_edits(norm), limit=2)
        if len(close) == 1:
            entity_id = close[0][2]
            return {"status": "found", "matched": "fuzzy", "entity": _entities(conn, [entity_id])[entity_id],
                    "candidates": []}
    if len(norm) >= 3:
        # normalised names hold only letters, digits, spaces, + and #: no LIKE wildcards.
        # Either the query is part of a name ("holmes" -> "sherlock holmes") or a
        # name of 4+ characters is a whole word of the query.
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM kg_live_entities WHERE name_norm LIKE '%%' || %(q)s || '%%' OR (length(name_norm) >= 4 "
            "AND ' ' || %(q)s || ' ' LIKE '%% ' || name_norm || ' %%') ORDER BY mentions DESC LIMIT 10",
            {"q": norm}).fetchall()]
        choices = dict(conn.execute(_LENGTH_SQL, (len(norm) - 2, len(norm) + 2)).fetchall())
        for _, _, entity_id in process.extract(norm, choices, scorer=Levenshtein.distance, score_cutoff=2, limit=10):
            if entity_id not in ids:
                ids.append(entity_id)
    found = _entities(conn, ids)
    candidates = sorted(found.values(), key=lambda e: (-e["source_count"], -e["mentions"], e["name"]))
    if len(candidates) == 1:
        return {"status": "found", "matched": "partial", "entity": candidates[0], "candidates": []}
    return {"status": "ambiguous" if candidates else "not_found", "matched": None, "entity": None,
            "candidates": candidates[:10]}


_RELATED_SQL = """
SELECT CASE WHEN r.extractor = 'cooccurrence' THEN 'undirected'
            WHEN r.source_id = %(id)s THEN 'out' ELSE 'in' END AS direction,
       r.relation, o.id, o.name, o.type,
       count(DISTINCT r.document_id)::int AS files, sum(r.count)::int AS count,
       array_agg(DISTINCT r.relation_raw) AS raw, min(r.evidence) AS evidence
FROM relations r
JOIN kg_live_documents l ON l.id = r.document_id
JOIN entities o ON o.id = CASE WHEN r.source_id = %(id)s THEN r.target_id ELSE r.source_id END
WHERE ((r.source_id = %(id)s AND (%(out)s OR r.extractor = 'cooccurrence'))
    OR (r.target_id = %(id)s AND (%(in)s OR r.extractor = 'cooccurrence')))
  AND (%(relation)s::text IS NULL OR r.relation = %(relation)s)
GROUP BY 1, 2, 3, 4, 5
ORDER BY files DESC, count DESC, o.name
LIMIT %(limit)s
"""


def _edges(conn: psycopg.Connection, entity_id: int, relation: str | None, direction: str,
           limit: int) -> list[dict]:
    rows = conn.execute(_RELATED_SQL, {"id": entity_id, "relation": relation, "limit": limit,
                                       "out": direction in ("out", "both"), "in": direction in ("in", "both")})
    return [{"direction": r[0], "relation": r[1], "entity": {"id": r[2], "name": r[3], "type": r[4]},
             "files": r[5], "count": r[6], "relation_raw": sorted(r[7]), "evidence": r[8]} for r in rows]


_PENDING_SQL = """
SELECT d.path, CASE WHEN k.document_id IS NULL THEN 'not extracted yet'
                    WHEN k.version <> d.version AND k.content_hash = d.indexed_hash
                         THEN 're-ingested with the same text; its graph answers while it is extracted again'
                    WHEN k.version <> d.version THEN 'changed since its graph was built; that graph is hidden until '
                                                     'the new version is extracted'
                    ELSE 'extraction in progress' END
FROM documents d LEFT JOIN kg_progress k ON k.document_id = d.id
WHERE d.source = 'library' AND d.status = 'ingested'
  AND (k.document_id IS NULL OR k.version <> d.version OR k.completed_at IS NULL)
ORDER BY (k.version <> d.version) IS NOT TRUE, d.path
LIMIT 10
"""


def coverage(conn: psycopg.Connection) -> dict[str, Any]:
    """How much of the library the graph is built from: files whose extraction is
    complete for their current version, of the ingested library files. The pending
    ones are named (at most 10), an edited file first: its previous graph is hidden
    until it is extracted again, so an answer without it must say so."""
    complete, ingested, passages_done, passages_total = conn.execute(
        "SELECT count(*) FILTER (WHERE k.completed_at IS NOT NULL AND k.version = d.version), count(*), "
        "coalesce(sum(k.passages_done) FILTER (WHERE k.version = d.version), 0)::int, "
        "coalesce(sum(k.passages_total) FILTER (WHERE k.version = d.version), 0)::int "
        "FROM documents d LEFT JOIN kg_progress k ON k.document_id = d.id "
        "WHERE d.source = 'library' AND d.status = 'ingested'").fetchone()
    out = {"files_extracted": complete, "files_ingested": ingested, "files_pending": ingested - complete}
    if ingested - complete:
        pending = conn.execute(_PENDING_SQL).fetchall()
        out["pending_files"] = [{"path": p, "why": why} for p, why in pending]
        named = "; ".join(f"{p} ({why})" for p, why in pending)
        more = f" and {ingested - complete - len(pending)} more" if ingested - complete > len(pending) else ""
        out["note"] = (f"the graph is built from {complete} of {ingested} ingested files; {ingested - complete} "
                       f"pending (extraction follows each ingest by itself; {passages_done} of {passages_total} "
                       "passages of started files done): answers cover the files done so far"
                       f"; pending: {named}{more}")
    return out


def _not_found(conn: psycopg.Connection, resolution: dict, name: str) -> dict:
    out = {"found": False, "query": name, "status": resolution["status"], "candidates": resolution["candidates"]}
    cov = coverage(conn)
    if resolution["status"] == "ambiguous":
        out["note"] = "several entities match; call again with one of the candidate names"
    elif cov["files_ingested"] == 0:
        out["note"] = "the library has no ingested files yet, so the graph is empty"
    elif cov["files_pending"]:
        out["note"] = (f"no entity by that name among the {cov['files_extracted']} of {cov['files_ingested']} files "
                       "extracted so far; the others are pending, so try again later or use library_search")
    else:
        out["note"] = "no entity by that name in the graph (every ingested file is extracted)"
    out["coverage"] = cov
    return out


def _aliases(conn: psycopg.Connection, entity_id: int) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT coalesce(alias, alias_norm) FROM entity_aliases WHERE entity_id = %s ORDER BY 1", (entity_id,))]


def entity(conn: psycopg.Connection, name: str, *, limit: int = 10) -> dict[str, Any]:
    """Lookup: type, mentions, files, and the strongest edges both ways."""
    limit = _limit(limit)
    res = resolve(conn, name)
    if res["status"] != "found":
        return _not_found(conn, res, name)
    e = res["entity"]
    files = [r[0] for r in conn.execute(
        "SELECT d.path FROM entity_sources s JOIN documents d ON d.id = s.document_id "
        "JOIN kg_live_documents l ON l.id = d.id WHERE s.entity_id = %s ORDER BY s.mentions DESC, d.path LIMIT 10",
        (e["id"],)).fetchall()]
    return {"found": True, "matched": res["matched"], **e, "aliases": _aliases(conn, e["id"]), "files": files,
            "relations": _edges(conn, e["id"], None, "both", limit), "coverage": coverage(conn)}


def related(conn: psycopg.Connection, name: str, *, relation: str | None = None, direction: str = "both",
            limit: int = 20) -> dict[str, Any]:
    """One hop: neighbours by relation and direction, ranked by files asserting the edge."""
    limit = _limit(limit)
    if relation is not None and relation not in RELATION_TYPES:
        raise GraphError(f"relation must be one of: {', '.join(RELATION_TYPES)}")
    if direction not in ("out", "in", "both"):
        raise GraphError("direction must be 'out', 'in' or 'both'")
    res = resolve(conn, name)
    if res["status"] != "found":
        return _not_found(conn, res, name)
    return {"found": True, "entity": res["entity"], "relation": relation, "direction": direction,
            "related": _edges(conn, res["entity"]["id"], relation, direction, limit), "coverage": coverage(conn)}


_NEIGHBOURS_SQL = """
SELECT node, other, relation, dir, files, cnt FROM (
  SELECT n.node, n.other, n.relation, n.dir, count(DISTINCT n.document_id)::int AS files, sum(n.count)::int AS cnt,
         row_number() OVER (PARTITION BY n.node ORDER BY count(DISTINCT n.document_id) DESC, sum(n.count) DESC,
                            n.other) AS rank
  FROM (SELECT r.source_id AS node, r.target_id AS other, r.relation, r.document_id, r.count,
               CASE WHEN r.extractor = 'cooccurrence' THEN 'undirected' ELSE 'out' END AS dir
        FROM relations r WHERE r.source_id = ANY(%(ids)s)
        UNION ALL
        SELECT r.target_id, r.source_id, r.relation, r.document_id, r.count,
               CASE WHEN r.extractor = 'cooccurrence' THEN 'undirected' ELSE 'in' END
        FROM relations r WHERE r.target_id = ANY(%(ids)s)) n
  JOIN kg_live_documents l ON l.id = n.document_id
  GROUP BY n.node, n.other, n.relation, n.dir) ranked
WHERE rank <= %(fanout)s
"""


def _neighbours(conn: psycopg.Connection, ids: list[int], fanout: int = FANOUT) -> dict[int, dict[int, dict]]:
    """node -> other -> the strongest edge between them (typed relations preferred over co-occurrence)."""
    out: dict[int, dict[int, dict]] = defaultdict(dict)
    for node, other, relation, direction, files, cnt in conn.execute(_NEIGHBOURS_SQL, {"ids": ids, "fanout": fanout}):
        edge = {"relation": relation, "direction": direction, "files": files, "count": cnt}
        best = out[node].get(other)
        key = (relation != "related_to", files, cnt)
        if best is None or key > (best["relation"] != "related_to", best["files"], best["count"]):
            out[node][other] = edge
    return out


def path(conn: psycopg.Connection, source: str, target: str, *, max_hops: int = MAX_HOPS,
         limit: int = 5) -> dict[str, Any]:
    """Shortest paths (<= max_hops, at most 3) between two entities, edges in either direction."""
    if not isinstance(max_hops, int) or not 1 <= max_hops <= MAX_HOPS:
        raise GraphError(f"max_hops must be 1 to {MAX_HOPS}")
    limit = _limit(limit)
    a, b = resolve(conn, source), resolve(conn, target)
    for res, name in ((a, source), (b, target)):
        if res["status"] != "found":
            return {**_not_found(conn, res, name), "which": "source" if res is a else "target"}
    start, goal = a["entity"]["id"], b["entity"]["id"]
    if start == goal:
        return {"found": True, "hops": 0, "source": a["entity"], "target": b["entity"], "paths": []}
    parents: dict[int, list[tuple[int, dict]]] = {start: []}
    frontier, hops = [start], 0
    while frontier and hops < max_hops and goal not in parents:
        hops += 1
        adjacency = _neighbours(conn, frontier)
        layer: dict[int, list[tuple[int, dict]]] = defaultdict(list)
        for node in frontier:
            for other, edge in adjacency.get(node, {}).items():
                if other not in parents:
                    layer[other].append((node, edge))
        parents.update(layer)
        frontier = list(layer)
    if goal not in parents:
        cov = coverage(conn)
        return {"found": False, "source": a["entity"], "target": b["entity"], "hops": None, "paths": [],
                "note": f"no path of {max_hops} hops or fewer in the graph extracted so far"
                        + (f" ({cov['files_pending']} of {cov['files_ingested']} files pending)"
                           if cov["files_pending"] else ""), "coverage": cov}

    def walk(node: int) -> list[list[tuple[int, int, dict]]]:
        if node == start:
            return [[]]
        out = []
        for parent, edge in parents[node]:
            for prefix in walk(parent):
                out.append(prefix + [(parent, node, edge)])
                if len(out) >= limit:
                    return out
        return out

    found = walk(goal)[:limit]
    names = _entities(conn, list({n for p in found for step in p for n in step[:2]}))
    paths = [[{"from": names[s]["name"], "from_type": names[s]["type"], "relation": e["relation"],
               "direction": e["direction"], "to": names[t]["name"], "to_type": names[t]["type"],
               "files": e["files"], "count": e["count"]} for s, t, e in p] for p in found]
    paths.sort(key=lambda p: -min(step["files"] for step in p))
    return {"found": True, "source": a["entity"], "target": b["entity"], "hops": hops, "paths": paths,
            "coverage": coverage(conn)}


def subgraph(conn: psycopg.Connection, name: str, *, depth: int = 1, limit: int = 25) -> dict[str, Any]:
    """The entity, its strongest neighbours (depth 1 or 2), and every edge among them."""
    if depth not in (1, 2):
        raise GraphError("depth must be 1 or 2")
    limit = _limit(limit)
    res = resolve(conn, name)
    if res["status"] != "found":
        return _not_found(conn, res, name)
    center = res["entity"]["id"]
    chosen = [center]
    ring = [center]
    for _ in range(depth):
        adjacency = _neighbours(conn, ring, fanout=limit)
        scored = sorted({(o, e["files"], e["count"]) for n in ring for o, e in adjacency.get(n, {}).items()
                         if o not in chosen}, key=lambda t: (-t[1], -t[2], t[0]))
        ring = []
        for other, _, _ in scored:
            if len(chosen) >= limit + 1:
                break
            if other not in chosen:
                chosen.append(other)
                ring.append(other)
    nodes = _entities(conn, chosen)
    edges = conn.execute(
        "SELECT r.source_id, r.target_id, r.relation, CASE WHEN r.extractor = 'cooccurrence' THEN 'undirected' "
        "ELSE 'directed' END, count(DISTINCT r.document_id)::int, sum(r.count)::int FROM relations r "
        "JOIN kg_live_documents l ON l.id = r.document_id "
        "WHERE r.source_id = ANY(%(ids)s) AND r.target_id = ANY(%(ids)s) GROUP BY 1, 2, 3, 4 "
        "ORDER BY 5 DESC, 6 DESC", {"ids": chosen}).fetchall()
    return {"found": True, "center": nodes[center], "depth": depth,
            "nodes": [nodes[i] for i in chosen if i in nodes],
            "edges": [{"source": nodes[s]["name"], "target": nodes[t]["name"], "relation": rel, "kind": kind,
                       "files": f, "count": c} for s, t, rel, kind, f, c in edges], "coverage": coverage(conn)}


def top_entities(conn: psycopg.Connection, *, type: str | None = None, limit: int = 20) -> list[dict]:
    """Aggregate: the entities most files mention (optionally of one type)."""
    limit = _limit(limit)
    if type is not None and type not in ENTITY_TYPES:
        raise GraphError(f"type must be one of: {', '.join(ENTITY_TYPES)}")
    rows = conn.execute(
        "SELECT e.id, e.name, e.type, count(s.document_id)::int, sum(s.mentions)::int FROM entities e "
        "JOIN entity_sources s ON s.entity_id = e.id JOIN kg_live_documents l ON l.id = s.document_id "
        "WHERE (%(type)s::text IS NULL OR e.type = %(type)s) GROUP BY e.id "
        "ORDER BY 4 DESC, 5 DESC, e.name LIMIT %(limit)s", {"type": type, "limit": limit}).fetchall()
    return [{"id": r[0], "name": r[1], "type": r[2], "source_count": r[3], "mentions": r[4]} for r in rows]


def most_connected(conn: psycopg.Connection, *, limit: int = 20) -> list[dict]:
    """Aggregate: entities with the most distinct neighbours."""
    limit = _limit(limit)
    rows = conn.execute(
        "SELECT e.id, e.name, e.type, count(DISTINCT n.other)::int AS degree FROM ("
        "  SELECT r.source_id AS node, r.target_id AS other, r.document_id FROM relations r"
        "  UNION ALL SELECT r.target_id, r.source_id, r.document_id FROM relations r) n "
        "JOIN kg_live_documents l ON l.id = n.document_id JOIN entities e ON e.id = n.node "
        "GROUP BY e.id ORDER BY degree DESC, e.name LIMIT %s", (limit,)).fetchall()
    return [{"id": r[0], "name": r[1], "type": r[2], "degree": r[3]} for r in rows]


def stats(conn: psycopg.Connection) -> dict[str, Any]:
    """Counts of what the graph answers from (live files' rows only), coverage, and the
    rows of removed files that `library purge` will delete (hidden already)."""
    entities, relations = conn.execute(
        "SELECT (SELECT count(*) FROM kg_live_entities), "
        "(SELECT count(*) FROM relations r JOIN kg_live_documents l ON l.id = r.document_id)").fetchone()
    by_type = dict(conn.execute("SELECT type, count(*) FROM kg_live_entities GROUP BY type ORDER BY 2 DESC"
                                ).fetchall())
    by_relation = dict(conn.execute("SELECT r.relation, count(*) FROM relations r JOIN kg_live_documents l "
                                    "ON l.id = r.document_id GROUP BY r.relation ORDER BY 2 DESC").fetchall())
    removed_files, removed_relations = conn.execute(
        "SELECT count(*), coalesce(sum((SELECT count(*) FROM relations r WHERE r.document_id = d.id)), 0)::int "
        "FROM documents d WHERE d.status = 'removed' AND EXISTS (SELECT 1 FROM kg_progress k "
        "WHERE k.document_id = d.id)").fetchone()
    cov = coverage(conn)
    trees, eligible = conn.execute(
        "SELECT count(b.document_id) FILTER (WHERE b.version = d.version), count(*) FROM documents d "
        "LEFT JOIN raptor_builds b ON b.document_id = d.id WHERE d.source = 'library' AND d.status = 'ingested'"
    ).fetchone()
    return {"entities": entities, "relations": relations, "entity_types": by_type, "relation_types": by_relation,
            **cov, "summary_trees_current": trees, "summary_trees_pending": eligible - trees,
            "removed_files_awaiting_purge": {"files": removed_files, "relations": removed_relations}}
