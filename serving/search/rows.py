"""The passage rows a search returns: loading them by id, and shaping them into SearchResults."""

from __future__ import annotations

import psycopg
from psycopg import sql

from serving.search.fusion import Fused
from serving.search.language import script
from serving.search.titles import author_from_filename
from serving.search.types import SearchResult

_HYDRATE = sql.SQL(
    "SELECT p.id, p.document_id, d.path, d.title, p.source, p.kind, p.summary_level, p.page_start, p.page_end, "
    "p.heading, p.content, d.author FROM passages p LEFT JOIN documents d ON d.id = p.document_id "
    "WHERE p.id = ANY(%s)")

# positions in a hydrated row that the reranker reads
TITLE, HEADING, CONTENT = 3, 9, 10


def location(page_start: int | None, page_end: int | None, heading: str | None, summary_level: int) -> str:
    parts = []
    if page_start is not None:
        parts.append(f"p. {page_start}" if page_end in (None, page_start) else f"pp. {page_start}-{page_end}")
    if heading:
        parts.append(heading.strip())
    if summary_level > 0:
        parts.append(f"summary, level {summary_level}")
    return " · ".join(parts)


def hydrate(conn: psycopg.Connection, ids: list[int]) -> dict[int, tuple]:
    """passage id -> its row (the columns of _HYDRATE), for the ids that exist."""
    if not ids:
        return {}
    return {row[0]: row for row in conn.execute(_HYDRATE, (ids,))}


def to_result(row: tuple, score: float, lanes: dict[str, int], fused: Fused | None = None) -> SearchResult:
    pid, doc_id, path, title, source, kind, level, p1, p2, heading, content, author = row
    if author is None and source == "library" and path:
        author = author_from_filename(path)
    return SearchResult(passage_id=pid, document_id=doc_id, path=path, title=title, source=source, author=author,
                        location=location(p1, p2, heading, level), kind=kind, score=score, lanes=lanes,
                        text=content, summary_level=level, page_start=p1, page_end=p2, heading=heading,
                        fused_score=fused.score if fused else 0.0, lane_scores=dict(fused.parts) if fused else {})


def empty_pool_reason(conn: psycopg.Connection, model: str, predicate=None) -> str | None:
    """Why an unfiltered search found nothing; None when the library is simply empty.
    `predicate` (the viewer's visibility) keeps rows the caller may not see out of the answer."""
    pred = predicate.clause if predicate is not None else sql.SQL("true")
    params = {**(predicate.params if predicate is not None else {}), "model": model}
    row = conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM passages p WHERE p.embed_model = %(model)s AND {pred}), "
                               "EXISTS (SELECT 1 FROM passages p WHERE {pred})").format(pred=pred), params).fetchone()
    if not row[1]:
        return None
    if not row[0]:
        return f"empty pool: no passage is embedded with the query model {model!r}"
    return "empty pool: passages exist for this model but no lane returned any"


def passage_scripts(conn: psycopg.Connection, ids: list[int]) -> dict[int, str]:
    """passage id -> the script of its text (serving.search.language.script)."""
    if not ids:
        return {}
    return {pid: script(head) for pid, head in conn.execute(
        "SELECT id, left(content, 300) FROM passages WHERE id = ANY(%s)", (ids,))}
