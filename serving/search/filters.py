"""SQL predicates for SearchFilters, shared by every lane.

Composed with psycopg.sql and bound parameters only. The predicate never
mentions `summary_level` or `embed_model`: the vector lanes must write those
as literals matching their partial index, so they add them themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import psycopg
from psycopg import sql

from serving.search.titles import NAMES, author_matches
from serving.search.types import SCOPES, SOURCES, SearchError, SearchFilters, Viewer


@dataclass(frozen=True)
class Predicate:
    clause: sql.Composable
    params: dict[str, Any]


def resolve_paths(conn: psycopg.Connection, filters: SearchFilters) -> SearchFilters:
    """Turn `paths` into document ids (union with any ids given), then `authors` into the
    documents of those authors (within those ids, when any). An unknown path, or an author
    no document has, is an error: an agent filtering on a typo must not get "no results"
    back."""
    if filters.paths:
        rows = conn.execute("SELECT id, path FROM documents WHERE path = ANY(%s)", (list(filters.paths),)).fetchall()
        found = {path for _, path in rows}
        missing = [p for p in filters.paths if p not in found]
        if missing:
            raise SearchError(f"no document with path {missing[0]!r}; library_files(pattern) lists the exact paths")
        ids = tuple(sorted({*(filters.document_ids or ()), *(row[0] for row in rows)}))
        filters = replace(filters, paths=None, document_ids=ids)
    if filters.authors:
        docs = NAMES.get(conn).docs
        by_author: set[int] = set()
        for wanted in filters.authors:
            mine = {d.id for d in docs if author_matches(wanted, d.author)}
            if not mine:
                raise SearchError(f"no document by an author named {wanted!r}; library_files(pattern) shows "
                                  "each file's author")
            by_author |= mine
        if filters.document_ids:
            by_author &= set(filters.document_ids)
        # an author none of whose documents is among the given ones: nothing may match (-1 is no id)
        filters = replace(filters, authors=None, document_ids=tuple(sorted(by_author)) or (-1,))
    return filters


def passage_predicate(filters: SearchFilters, alias: str = "p") -> Predicate:
    """WHERE clause (without the WHERE) selecting the passages `filters` allow."""
    col = lambda name: sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(name))  # noqa: E731
    parts: list[sql.Composable] = []
    params: dict[str, Any] = {}
    for flag, include in (("removed", filters.include_removed), ("superseded", filters.include_superseded),
                          ("archived", filters.include_archived)):
        if not include:
            parts.append(sql.SQL("NOT {}").format(col(flag)))
    for name, column in (("sources", "source"), ("scopes", "scope"), ("kinds", "kind")):
        values = getattr(filters, name)
        if values:
            parts.append(sql.SQL("{} = ANY({})").format(col(column), sql.Placeholder(f"f_{name}")))
            params[f"f_{name}"] = list(values)
    if not filters.kinds:
        # licence / publisher text (Project Gutenberg's header and licence) is found
        # only when asked for by kind: it would otherwise answer every query about
        # copying, copyright or distribution
        parts.append(sql.SQL("{} <> 'boilerplate'").format(col("kind")))
    if filters.document_ids:
        parts.append(sql.SQL("{} = ANY({})").format(col("document_id"), sql.Placeholder("f_document_ids")))
        params["f_document_ids"] = list(filters.document_ids)
    if not filters.include_cold:
        parts.append(sql.SQL("NOT {}").format(col("cold")))
    if filters.agents:
        parts.append(sql.SQL("{} = ANY({})").format(col("agent"), sql.Placeholder("f_agents")))
        params["f_agents"] = list(filters.agents)
    if filters.memory_types or filters.min_relevance is not None:
        inner = [sql.SQL("m.id = {}").format(col("memory_id"))]
        if filters.memory_types:
            inner.append(sql.SQL("m.type = ANY({})").format(sql.Placeholder("f_memory_types")))
            params["f_memory_types"] = list(filters.memory_types)
        if filters.min_relevance is not None:
            inner.append(sql.SQL("m.relevance >= {}").format(sql.Placeholder("f_min_relevance")))
            params["f_min_relevance"] = float(filters.min_relevance)
        parts.append(sql.SQL("EXISTS (SELECT 1 FROM memories m WHERE {})").format(sql.SQL(" AND ").join(inner)))
    if filters.viewer is not None:
        vis = visibility(filters.viewer, alias)
        parts.append(vis.clause)
        params.update(vis.params)
    clause = sql.SQL(" AND ").join(parts) if parts else sql.SQL("true")
    return Predicate(clause, params)


@dataclass(frozen=True)
class Segments:
    """The parts of the postings (schema.sql postings_segment) a search may find rows in:
    every combination of these sources, scopes and hidden flags. A row of a segment with
    hidden false and a scope in `proven_scopes` passes the search's predicate as it is;
    any other must be checked against it."""
    sources: list[str]
    scopes: list[str]
    hidden: list[bool]
    proven_scopes: list[str]


def posting_segments(filters: SearchFilters) -> Segments:
    """Which segments of the postings can hold rows `filters` allow (passage_predicate's
    rules read the other way round)."""
    sources = [s for s in SOURCES if not filters.sources or s in filters.sources]
    scopes = [s for s in SCOPES if not filters.scopes or s in filters.scopes]
    reads_hidden = (filters.include_removed or filters.include_superseded or filters.include_archived
                    or filters.include_cold or bool(filters.kinds and "boilerplate" in filters.kinds))
    # what a segment cannot tell: the passage's kind, document, author, memory or owner
    rest = bool(filters.kinds or filters.document_ids or filters.agents or filters.memory_types
                or filters.min_relevance is not None)
    if rest:
        proven: list[str] = []
    elif filters.viewer is not None:
        proven = [s for s in scopes if s == "global"]   # self / department rows: whose they are
    else:
        proven = scopes
    return Segments(sources, scopes, [False, True] if reads_hidden else [False], proven)


def visibility(viewer: Viewer, alias: str = "p") -> Predicate:
    """The rows `viewer` may know exist: every `global` row, `self` rows it wrote,
    `department` rows of its department. Works for `passages` and `memories` alike
    (both carry scope / agent / department). A NULL agent or department matches
    nothing, so an anonymous viewer sees `global` only."""
    col = lambda name: sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(name))  # noqa: E731
    clause = sql.SQL("({scope} = 'global' OR ({scope} = 'self' AND {agent} = {va}) "
                     "OR ({scope} = 'department' AND {dept} = {vd}))").format(
        scope=col("scope"), agent=col("agent"), dept=col("department"),
        va=sql.Placeholder("v_agent"), vd=sql.Placeholder("v_department"))
    return Predicate(clause, {"v_agent": viewer.agent, "v_department": viewer.department})
