"""The Librarian's actions on agent memory: index, search, get, forget. (~400 lines, one
responsibility: the four actions share the visibility rules and record shape below.)

Serving writes only what agents write (the pipeline derives the rest): a memory is stored, chunked,
embedded and committed in one transaction, so it is searchable the moment
`index_memory` returns. Everything derived later (near-duplicates, decay,
promotion, retention) is the pipeline's (library_pipeline/memory, run by
library_pipeline/defs/memory).

Identity is a `Viewer` the transport resolved (HTTP token / stdio env / CLI);
no function here takes an agent name from the request body. Every read has
the viewer's visibility in its SQL WHERE clause (serving.search.filters.visibility),
so a record another agent may not see is indistinguishable from one that does
not exist: same empty result, same counts, same "not found" message.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from serving.embedding import Embedder, embed_text_for_passage
from serving.memory.chunk import split_memory
from serving.memory.context import (NEIGHBOUR_SHARE, line_speakers, lines_weight, named_speaker, turn_weight,
                                    typical_length, with_thread_context, words)
from serving.passage_writer import PassageRow, PassageWriter, ts_config_for_language
from serving.search.filters import visibility
from serving.memory.validation import (
    MAX_CONTENT_CHARS,
    MemoryInputError,
    MemoryNotFound,
    parse_memory_filter,
    require_identity,
    validate_artifact_id,
    validate_content,
    validate_meta,
    validate_scope,
)
from serving.search.types import MAX_TOP_K, SearchConfig, SearchError, SearchFilters, Viewer
from serving.threads import wide_threads

log = logging.getLogger(__name__)

__all__ = ["MAX_CHUNKS", "MAX_CONTENT_CHARS", "MEMORY_SEARCH_CONFIG", "MemoryInputError", "MemoryNotFound",
           "forget_memory", "get_memory", "index_memory", "parse_memory_filter", "search_memory"]

MAX_CHUNKS = 400
# The calibrated fusion, as for documents, though its models were fitted on documents: on
# LoCoMo's dev half (786 questions, evidence recall@10 through search_memory, thread context
# at share 0.5 / window 2) convex 0.7450, calibrated 0.7598 (better on 3 of the 5
# conversations, within 0.013 on the other two); the thread share and window were re-checked
# under it (0.3 / 0.5 / 0.7 / 1.0 x window 1 / 2 / 3: 0.7357-0.7636, windows 2-3 at 0.3-0.7
# all within 0.004 of each other), so they stay.
MEMORY_SEARCH_CONFIG = SearchConfig(title=False, structure=False, summaries=False, label="memory")


def memory_language(text: str) -> str:
    """A memory's language for stemming: Russian when most letters of its first 5,000
    characters are Cyrillic, else English (agents write reports in one of the two; the
    configuration for it comes from the one map, ts_config_for_language)."""
    letters = re.findall(r"[^\W\d_]", text[:5000])
    cyr = sum(1 for ch in letters if "\u0400" <= ch <= "\u04ff")
    return "ru" if letters and cyr / len(letters) > 0.5 else "en"


def _owner_key(scope: str, viewer: Viewer) -> sql.Composable:
    """Rows in the same dedup space: all of global, one department, one agent's self."""
    if scope == "global":
        return sql.SQL("true")
    if scope == "department":
        return sql.SQL("department = %(department)s")
    return sql.SQL("agent = %(agent)s")


# -- records ----------------------------------------------------------------------

_RECORD_COLS = ("id", "artifact_id", "version", "agent", "department", "scope", "type", "meta", "relevance",
                "access_count", "accessed_at", "archived_at", "duplicate_of", "promoted_at", "promoted_reason",
                "tier", "superseded", "created_at", "chunks")
_RECORD_SQL = sql.SQL(", ").join(sql.SQL("m.{}").format(sql.Identifier(c)) for c in _RECORD_COLS)


def _iso(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


def _record(row: tuple) -> dict[str, Any]:
    rec = dict(zip(_RECORD_COLS, row))
    rec["relevance"] = float(rec["relevance"])
    for key in ("accessed_at", "archived_at", "promoted_at", "created_at"):
        rec[key] = _iso(rec[key])
    rec["archived"] = rec["archived_at"] is not None
    return rec


def _public_meta(rec: dict[str, Any]) -> dict[str, Any]:
    meta = dict(rec["meta"] or {})
    meta.update({"agent": rec["agent"], "scope": rec["scope"], "type": rec["type"],
                 "artifact_id": rec["artifact_id"], "version": rec["version"],
                 "relevance": rec["relevance"], "tier": rec["tier"], "archived": rec["archived"]})
    meta.setdefault("date", (rec["created_at"] or "")[:10] or None)
    meta.setdefault("task_id", None)
    if rec["superseded"]:
        meta["superseded"] = True
    if rec["duplicate_of"]:
        meta["duplicate_of"] = rec["duplicate_of"]
    if rec["promoted_at"]:
        meta["promoted"] = {"at": rec["promoted_at"], "reason": rec["promoted_reason"]}
    return meta


# -- index ------------------------------------------------------------------------

FIRST_LINE_CHARS = 200


def passage_headings(mtype: str | None, text: str, by_lines: bool) -> str | None:
    """The heading of a memory's passages (embedded before each and indexed with it, as a
    document's title is): the memory's type; for a memory cut between its lines
    (serving/memory/chunk.py), its first line too (at most FIRST_LINE_CHARS) - a session
    note's "conv, session 3, 8 May 2023": a line alone no longer says when or where it was
    said. Measured on LoCoMo's dev half (session notes, R@5): lines alone 0.8562, lines with
    the first line 0.8711; the first line on window passages instead 0.8656."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:FIRST_LINE_CHARS]
    if not by_lines or not first:
        return mtype
    return f"{mtype} — {first}" if mtype else first


@dataclass
class IndexResult:
    status: str            # created | new_version | duplicate | unchanged
    record: dict[str, Any]
    chunks: int
    ms: float
    superseded: int | None = None
    timings: dict[str, float] | None = None   # chunk / embed / write, milliseconds

    def to_dict(self) -> dict[str, Any]:
        out = {"status": self.status, "id": self.record["id"], "artifact_id": self.record["artifact_id"],
               "version": self.record["version"], "scope": self.record["scope"], "chunks": self.chunks,
               "meta": _public_meta(self.record), "ms": round(self.ms, 1)}
        if self.superseded:
            out["superseded_id"] = self.superseded
        if self.timings:
            out["timings_ms"] = {k: round(v, 1) for k, v in self.timings.items()}
        return out


def _find_duplicate(conn: psycopg.Connection, scope: str, viewer: Viewer, content: str) -> tuple | None:
    q = sql.SQL("SELECT {cols} FROM memories m WHERE m.scope = %(scope)s AND {owner} "
                "AND m.content_hash = memory_content_hash(%(content)s) AND NOT m.superseded "
                "AND m.duplicate_of IS NULL ORDER BY m.id LIMIT 1").format(
        cols=_RECORD_SQL, owner=_owner_key(scope, viewer))
    return conn.execute(q, {"scope": scope, "agent": viewer.agent, "department": viewer.department,
                            "content": content}).fetchone()


_MERGE_SQL = sql.SQL("UPDATE memories m SET meta = %(meta)s || m.meta WHERE m.id = %(id)s RETURNING {cols}")


def index_memory(conn: psycopg.Connection, embedder: Embedder, viewer: Viewer | None, *, artifact_id: Any,
                 content: Any, scope: Any = "self", meta: Any = None) -> IndexResult:
    """Store (or version, or dedup) one artifact. Validates everything before writing;
    the write is one transaction, so a failure leaves nothing behind."""
    started = time.perf_counter()
    scope = validate_scope(scope)
    viewer = require_identity(viewer, scope=scope)
    aid = validate_artifact_id(artifact_id)
    text = validate_content(content)
    meta = validate_meta(meta)
    mtype = meta.get("type")
    params = {"agent": viewer.agent, "department": viewer.department, "scope": scope, "aid": aid}

    def merged(row: tuple, status: str) -> IndexResult:
        extra = dict(meta)
        if row[3] != viewer.agent or row[1] != aid:
            seen = list((row[7] or {}).get("also_indexed_as") or [])
            entry = {"agent": viewer.agent, "artifact_id": aid}
            if entry not in seen:
                seen.append(entry)
            extra = {**extra, "also_indexed_as": seen}
            row = conn.execute(sql.SQL("UPDATE memories m SET meta = m.meta || %(extra)s WHERE m.id = %(id)s "
                                       "RETURNING {cols}").format(cols=_RECORD_SQL),
                               {"extra": Jsonb({"also_indexed_as": seen}), "id": row[0]}).fetchone()
            extra.pop("also_indexed_as")
        row = conn.execute(_MERGE_SQL.format(cols=_RECORD_SQL), {"meta": Jsonb(extra), "id": row[0]}).fetchone()
        return IndexResult(status, _record(row), row[-1], (time.perf_counter() - started) * 1000)

    # cheap checks first: an exact duplicate costs no embedding
    with conn.transaction():
        dup = _find_duplicate(conn, scope, viewer, text)
    chunks: list[str] = []
    by_lines = False
    vectors = None
    timings: dict[str, float] = {}
    writer = PassageWriter(embedder, readers_only=False)

    def embed(chunks: list[str]):
        writer.ensure_indexes(conn)
        with wide_threads(len(chunks)), conn.transaction():
            heading = passage_headings(mtype, text, by_lines)
            return writer.prepare(conn, [embed_text_for_passage(heading, None, c) for c in chunks])

    if dup is None:
        t = time.perf_counter()
        chunks, by_lines = split_memory(text, embedder, max_chunks=MAX_CHUNKS)
        if len(chunks) > MAX_CHUNKS:
            raise MemoryInputError(f"content makes {len(chunks)} passages; the limit is {MAX_CHUNKS}")
        timings["chunk"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        vectors = embed(chunks)
        timings["embed"] = (time.perf_counter() - t) * 1000
    write_started = time.perf_counter()

    with conn.transaction():
        # one writer per dedup space and content: the check below and the insert are atomic
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                     (f"memory:{scope}:{viewer.department if scope == 'department' else ''}:"
                      f"{viewer.agent if scope == 'self' else ''}",))
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"artifact:{viewer.agent}:{aid}",))
        dup = _find_duplicate(conn, scope, viewer, text)
        if dup is not None:
            return merged(dup, "unchanged" if (dup[3] == viewer.agent and dup[1] == aid) else "duplicate")
        if vectors is None:  # the duplicate vanished between the two checks (forgotten): embed now
            chunks, by_lines = split_memory(text, embedder, max_chunks=MAX_CHUNKS)
            vectors = writer.prepare(conn, [embed_text_for_passage(passage_headings(mtype, text, by_lines), None, c)
                                            for c in chunks])
        prev = conn.execute("SELECT id, version FROM memories WHERE agent = %(agent)s AND artifact_id = %(aid)s "
                            "ORDER BY version DESC LIMIT 1", params).fetchone()
        version = (prev[1] + 1) if prev else 1
        superseded = None
        if prev is not None:
            ids = [r[0] for r in conn.execute(
                "UPDATE memories SET superseded = true, superseded_at = now() WHERE agent = %(agent)s "
                "AND artifact_id = %(aid)s AND NOT superseded RETURNING id", params).fetchall()]
            if ids:
                conn.execute("UPDATE passages SET superseded = true WHERE memory_id = ANY(%s)", (ids,))
                superseded = ids[-1]
        row = conn.execute(sql.SQL(
            "INSERT INTO memories (artifact_id, version, agent, department, scope, type, meta, content, "
            "content_hash, chunks) VALUES (%(aid)s, %(version)s, %(agent)s, %(department)s, %(scope)s, %(type)s, "
            "%(meta)s, %(content)s, memory_content_hash(%(content)s), %(chunks)s) RETURNING {cols}").format(
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in _RECORD_COLS)),
            {**params, "version": version, "type": mtype, "meta": Jsonb(meta), "content": text,
             "chunks": len(chunks)}).fetchone()
        rec = _record(row)
        tsc = ts_config_for_language(conn, memory_language(text))
        heading = passage_headings(mtype, text, by_lines)
        writer.insert(conn, [
            PassageRow(content=c, embed_text=embed_text_for_passage(heading, None, c), source="memory", kind="memory",
                       ordinal=i, heading=heading, ts_config=tsc, scope=scope, agent=viewer.agent,
                       department=viewer.department, memory_id=rec["id"]) for i, c in enumerate(chunks)], vectors)
    timings["write"] = (time.perf_counter() - write_started) * 1000
    return IndexResult("new_version" if prev else "created", rec, len(chunks),
                       (time.perf_counter() - started) * 1000, superseded, timings)


# -- search -----------------------------------------------------------------------

def _log_access(conn: psycopg.Connection, viewer: Viewer, ids: list[int], action: str, query: str | None) -> None:
    if not ids:
        return
    conn.execute("UPDATE memories SET access_count = access_count + 1, accessed_at = now(), decay_steps = 0 "
                 "WHERE id = ANY(%s)", (ids,))
    conn.execute("INSERT INTO memory_access_log (memory_id, agent, department, action, query) "
                 "SELECT unnest(%s::bigint[]), %s, %s, %s, %s", (ids, viewer.agent, viewer.department, action,
                                                                  query[:2000] if query else None))


def search_memory(conn: psycopg.Connection, embedder: Embedder, viewer: Viewer | None, query: Any, *,
                  top_k: Any = 5, filter: Any = None, config: SearchConfig | None = None,
                  thread_share: float | None = None) -> dict[str, Any]:
    """{results[{id, content, score, meta}], total_found, returned} through serving.search.search.

    total_found counts the distinct records among the fused candidate pool (the lanes'
    depth, at most 100 passages) that the caller may see - never hidden ones, since
    the visibility clause is inside every lane's SQL - and the thread neighbours that
    joined it (serving/memory/context.py; `thread_share` overrides NEIGHBOUR_SHARE,
    0 = records read alone, for the evaluation). Read in context, a conversation turn is
    also weighed by who spoke and whether it asks (context.turn_weight); a note cut between
    its lines is scored from its passages, each weighed by its lines the same way
    (context.lines_weight), before record_score."""
    from serving.search.engine import search

    viewer = require_identity(viewer)
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise MemoryInputError("top_k must be an integer between 1 and 100")
    if not 1 <= top_k <= MAX_TOP_K:
        raise MemoryInputError(f"top_k must be between 1 and {MAX_TOP_K}")
    if not isinstance(query, str):
        raise MemoryInputError("query must be a string")
    filters, _library = parse_memory_filter(filter)
    filters = SearchFilters(**{**filters.__dict__, "viewer": viewer})
    try:
        resp = search(conn, embedder, query, top_k=MAX_TOP_K, filters=filters,
                      config=config or MEMORY_SEARCH_CONFIG)
    except MemoryError:
        raise
    except SearchError as exc:
        raise MemoryInputError(str(exc)) from None
    pids = [r.passage_id for r in resp.results]
    vis = visibility(viewer, "m")
    with conn.transaction():
        rows = conn.execute(sql.SQL("SELECT p.id, {cols} FROM passages p JOIN memories m ON m.id = p.memory_id "
                                    "WHERE p.id = ANY(%(ids)s) AND {vis}").format(cols=_RECORD_SQL, vis=vis.clause),
                            {**vis.params, "ids": pids}).fetchall()
        by_pid = {r[0]: _record(r[1:]) for r in rows}
        results: list[dict[str, Any]] = []
        seen: set = set()
        passage_scores: dict[int, list[tuple[str, float]]] = {}
        chunks: dict[int, int] = {}
        for r in resp.results:
            if r.source == "memory":
                rec = by_pid.get(r.passage_id)
                if rec is None:
                    continue
                if r.heading != rec["type"]:   # cut between lines (passage_headings): disjoint passages
                    passage_scores.setdefault(rec["id"], []).append((r.text, r.score))
                if rec["id"] in seen:
                    continue
                seen.add(rec["id"])
                chunks[rec["id"]] = rec["chunks"]
                results.append({"id": rec["id"], "content": r.text, "score": r.score,
                                "source": "memory", "lanes": dict(r.lanes), "meta": _public_meta(rec)})
            else:
                key = ("doc", r.document_id, r.passage_id)
                seen.add(key)
                results.append({"id": f"passage:{r.passage_id}", "content": r.text, "score": r.score,
                                "source": r.source, "lanes": dict(r.lanes),
                                "meta": {"path": r.path, "title": r.title, "location": r.location}})
        # a note's lines weighed by who speaks and whether they ask (context.lines_weight)
        named = named_speaker(resp.query, line_speakers([t for ps in passage_scores.values() for t, _ in ps]))
        for r in results:
            if r["source"] == "memory" and r["id"] in passage_scores:
                r["score"] = record_score([s * lines_weight(t, named) for t, s in passage_scores[r["id"]]])
        results.sort(key=lambda r: -r["score"])
        results = _read_in_context(conn, viewer, results, pool_only=bool(filter),
                                   share=NEIGHBOUR_SHARE if thread_share is None else thread_share,
                                   query=resp.query, chunks=chunks)
        for r in results:
            r["score"] = round(r["score"], 6)
        total = len(results)
        returned = results[:top_k]
        _log_access(conn, viewer, [r["id"] for r in returned if r["source"] == "memory"], "search", resp.query)
    return {"results": returned, "total_found": total, "returned": len(returned), "query": resp.query,
            "score_kind": resp.score_kind, "warnings": list(resp.warnings)}


# A record cut between its lines (a session saved as one note) is scored by its passages in
# the fused pool, best first: the best one's, plus half the second's, plus a quarter the
# third's - a note that answers in several places is likelier the one asked about than one
# that matches once. On LoCoMo's dev half (136 session notes cut between lines, 786
# questions, R@5 over sessions replayed over the captured fused pools): the best passage
# alone 0.8722; weights (1, 0.5) 0.8766, (1, 0.5, 0.25) 0.8793, (1, 0.5, 0.25, 0.125)
# 0.8809, (1, 1) 0.8774, (1, 1, 1) 0.8789, every passage at 0.5^i 0.8771, 0.7^i 0.8717;
# measured end to end: 0.8711 -> 0.8792. Records cut into overlapping windows (prose)
# keep their best passage: two windows of one paragraph share text, and summing them put
# a two-window paragraph above the one-window answer in the precision set (m75). A record of
# one passage (a turn, a short note) scores exactly as before.
PASSAGE_WEIGHTS = (1.0, 0.5, 0.25)


def record_score(scores: list[float]) -> float:
    """A memory record's score from its passages' fused scores (PASSAGE_WEIGHTS)."""
    return sum(w * s for w, s in zip(PASSAGE_WEIGHTS, sorted(scores, reverse=True)))


def _read_in_context(conn: psycopg.Connection, viewer: Viewer, results: list[dict[str, Any]], *,
                     pool_only: bool, share: float, query: str = "",
                     chunks: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """The records re-ranked with their thread neighbours (serving/memory/context.py); a
    neighbour the lanes did not reach joins with its first passage as content. Then each
    threaded record's score takes its turn_weight (who spoke, whether it asks, how much it
    says against the pool's typical turn; `query` names the speaker, `chunks` says which
    contents are whole records). Library passages
    (include_library) keep their fused score."""
    chunks = dict(chunks or {})
    ranked = [(r["id"], r["score"]) for r in results if r["source"] == "memory"]
    if share <= 0 or not ranked:
        return results
    scored = with_thread_context(conn, viewer, ranked, pool_only=pool_only, share=share)
    by_id = {r["id"]: r for r in results if r["source"] == "memory"}
    joined = [s.record_id for s in scored if s.record_id not in by_id]
    if joined:
        vis = visibility(viewer, "m")
        rows = conn.execute(sql.SQL(
            "SELECT {cols}, (SELECT p.content FROM passages p WHERE p.memory_id = m.id AND NOT p.superseded "
            "ORDER BY p.ordinal LIMIT 1) FROM memories m WHERE m.id = ANY(%(ids)s) AND {vis}").format(
            cols=_RECORD_SQL, vis=vis.clause), {**vis.params, "ids": joined}).fetchall()
        for row in rows:
            rec = _record(row[:-1])
            chunks[rec["id"]] = rec["chunks"]
            if row[-1] is not None:
                by_id[rec["id"]] = {"id": rec["id"], "content": row[-1], "score": 0.0, "source": "memory",
                                    "lanes": {}, "meta": _public_meta(rec)}
    memories = []
    for s in scored:
        if s.record_id in by_id:
            memories.append({**by_id[s.record_id], "score": s.total})
    named = named_speaker(query, {m["meta"]["speaker"] for m in memories if "thread" in m["meta"]
                                  and isinstance(m["meta"].get("speaker"), str)})
    sizes = {m["id"]: words(m["content"]) for m in memories if "thread" in m["meta"] and chunks.get(m["id"]) == 1}
    typical = typical_length(list(sizes.values()))
    for m in memories:
        m["score"] *= turn_weight(m["content"], m["meta"], named, whole=chunks.get(m["id"]) == 1, typical=typical,
                                  size=sizes.get(m["id"]))
    others = [r for r in results if r["source"] != "memory"]
    return sorted(memories + others, key=lambda r: -r["score"])


# -- get / forget ---------------------------------------------------------------------

def _not_found(ref: Any) -> MemoryNotFound:
    return MemoryNotFound(f"no memory {ref!r} is visible to you (it does not exist, or its scope hides it)")


def _resolve(conn: psycopg.Connection, viewer: Viewer, ref: Any) -> tuple | None:
    vis = visibility(viewer, "m")
    if isinstance(ref, bool):
        raise MemoryInputError("id must be a memory id (integer) or an artifact id (string)")
    if isinstance(ref, int) or (isinstance(ref, str) and ref.strip().isdigit() and len(ref.strip()) < 19):
        q = sql.SQL("SELECT {cols}, m.content FROM memories m WHERE m.id = %(id)s AND {vis}").format(
            cols=_RECORD_SQL, vis=vis.clause)
        row = conn.execute(q, {**vis.params, "id": int(ref)}).fetchone()
        if row is not None or isinstance(ref, int):
            return row
    aid = validate_artifact_id(ref)
    q = sql.SQL("SELECT {cols}, m.content FROM memories m WHERE m.artifact_id = %(aid)s AND {vis} "
                "ORDER BY (m.agent = %(v_agent)s) DESC, m.superseded, m.version DESC, m.id DESC LIMIT 1").format(
        cols=_RECORD_SQL, vis=vis.clause)
    return conn.execute(q, {**vis.params, "aid": aid}).fetchone()


def _resolve_visible(conn: psycopg.Connection, viewer: Viewer, ref: Any) -> tuple[dict[str, Any], str]:
    """The record `ref` names and its full content; not found when the viewer may not see it."""
    row = _resolve(conn, viewer, ref)
    if row is None:
        raise _not_found(ref)
    return _record(row[:-1]), row[-1]


def get_memory(conn: psycopg.Connection, viewer: Viewer | None, ref: Any) -> dict[str, Any]:
    """One record (full content) by memory id or artifact id, with its visible versions."""
    viewer = require_identity(viewer)
    with conn.transaction():
        rec, content = _resolve_visible(conn, viewer, ref)
        vis = visibility(viewer, "m")
        versions = conn.execute(sql.SQL(
            "SELECT m.id, m.version, m.superseded, m.created_at FROM memories m WHERE m.agent = %(agent)s "
            "AND m.artifact_id = %(aid)s AND {vis} ORDER BY m.version").format(vis=vis.clause),
            {**vis.params, "agent": rec["agent"], "aid": rec["artifact_id"]}).fetchall()
        _log_access(conn, viewer, [rec["id"]], "get", None)
    return {"id": rec["id"], "content": content, "meta": _public_meta(rec),
            "access_count": rec["access_count"] + 1, "accessed_at": rec["accessed_at"],
            "versions": [{"id": v[0], "version": v[1], "superseded": v[2], "created_at": _iso(v[3])}
                         for v in versions]}


def forget_memory(conn: psycopg.Connection, viewer: Viewer | None, ref: Any, *, dry_run: bool = False) -> dict:
    """Delete an artifact (every version, its passages and access log) - only the author may.
    Returns exactly what was (or, with dry_run, would be) removed."""
    viewer = require_identity(viewer)
    with conn.transaction():
        rec, _ = _resolve_visible(conn, viewer, ref)
        if rec["agent"] != viewer.agent:
            raise MemoryInputError(f"memory {ref!r} was written by another agent; only its author may forget it")
        rows = conn.execute(
            "SELECT m.id, m.version, m.scope, m.superseded, "
            "(SELECT count(*) FROM passages p WHERE p.memory_id = m.id), "
            "(SELECT count(*) FROM memory_access_log l WHERE l.memory_id = m.id) "
            "FROM memories m WHERE m.agent = %s AND m.artifact_id = %s ORDER BY m.version FOR UPDATE",
            (viewer.agent, rec["artifact_id"])).fetchall()
        ids = [r[0] for r in rows]
        removed = {"artifact_id": rec["artifact_id"], "agent": viewer.agent, "dry_run": dry_run,
                   "versions": [{"id": r[0], "version": r[1], "scope": r[2], "superseded": r[3], "passages": r[4],
                                 "access_log_rows": r[5]} for r in rows],
                   "memories": len(ids), "passages": sum(r[4] for r in rows),
                   "access_log_rows": sum(r[5] for r in rows)}
        if not dry_run:
            released = conn.execute("UPDATE memories SET duplicate_of = NULL WHERE duplicate_of = ANY(%s) "
                                    "RETURNING id", (ids,)).fetchall()
            if released:
                conn.execute("UPDATE passages SET superseded = false WHERE memory_id = ANY(%s) AND memory_id IN "
                             "(SELECT id FROM memories WHERE NOT superseded)", ([r[0] for r in released],))
            conn.execute("DELETE FROM memories WHERE id = ANY(%s)", (ids,))
            removed["released_duplicates"] = [r[0] for r in released]
    return removed
