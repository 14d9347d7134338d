"""Lanes that find documents rather than passages, then hand fusion a passage
to stand for each: the title lane (known-item lookups) and the structure lane
("table of contents").

A document found by name is represented by its passage that the vector or
keyword lane already ranked best (the part of the book that also matches the
query's content); failing that, by its first passage (the title page / start).

Structure lane, and why it exists: agent-library's (github.com/CreateM1nd/agent-library) "table of
contents" query scored ~0.44 cosine against the real TOC chunk, which is
mostly numbers and dotted leaders; full text found it only because that chunk
literally said "Table of Contents". Ours often say just "Contents" (SICP
does), and the AND of "tabl & content" then misses them. The chunker marks
such chunks `kind = 'toc'`, so an explicit request for the TOC is answered
from that column: a small fixed phrase list, not a guess from embeddings.
"""

from __future__ import annotations

import re
import time

import psycopg
from psycopg import sql

from serving.search.filters import Predicate
from serving.search.keyword import query_lexemes
from serving.search.language import script
from serving.search.lanes import LaneHits
from serving.search.sections import heading_fits, numerals, strip_numerals
from serving.search.titles import DocName, NameIndex, Section, with_translit
from serving.search.types import SearchFilters

# Requests for a table of contents, in the languages the corpus is likely to have.
# Bare "contents"/"содержание" are left out on purpose: "DNA content of cells"
# must not turn into a TOC request.
TOC_PHRASES = re.compile(
    r"\b(table\s+of\s+contents?|toc|contents\s+page|оглавлени[еяю]|inhaltsverzeichnis"
    r"|table\s+des\s+mati[eè]res|[íi]ndice\s+general)\b",
    re.IGNORECASE | re.UNICODE,
)


def toc_request(text: str) -> str | None:
    """The rest of the query when it asks for a table of contents, else None."""
    if not TOC_PHRASES.search(text):
        return None
    return TOC_PHRASES.sub(" ", text).strip()


def _doc_allowed(doc_source: str, doc_id: int, filters: SearchFilters) -> bool:
    if filters.sources and doc_source not in filters.sources:
        return False
    if filters.document_ids and doc_id not in filters.document_ids:
        return False
    return True


def _first_passages(conn: psycopg.Connection, doc_ids: list[int], predicate: Predicate) -> dict[int, int]:
    if not doc_ids:
        return {}
    query = sql.SQL(
        "SELECT DISTINCT ON (p.document_id) p.document_id, p.id FROM passages p "
        "WHERE p.document_id = ANY(%(docs)s) AND p.summary_level = 0 AND {pred} "
        "ORDER BY p.document_id, p.ordinal, p.id").format(pred=predicate.clause)
    return {d: pid for d, pid in conn.execute(query, {**predicate.params, "docs": doc_ids})}


def _visible(conn: psycopg.Connection, pids: list[int], predicate: Predicate) -> set[int]:
    if not pids:
        return set()
    query = sql.SQL("SELECT p.id FROM passages p WHERE p.id = ANY(%(pids)s) AND {pred}").format(
        pred=predicate.clause)
    return {r[0] for r in conn.execute(query, {**predicate.params, "pids": pids})}


# A name in the other script is the one named when the multilingual model puts it this
# near the query and this far ahead of the next such name. Measured on ruslit_dev (78
# works, English questions): known-item lookups by English title or transliteration had
# the right name first at cosine 0.56-0.84 with margins of 0.08-0.36 when they were
# found ("The Fiery Angel Bryusov" 0.755 / 0.592); no English content question came
# above 0.27. Lookups without such a margin ("The Lower Depths Gorky": 0.515 against
# the right name's 0.509) are left to the other lanes.
NAME_BRIDGE_MIN = 0.45
NAME_BRIDGE_MARGIN = 0.05


def _bridged(names: NameIndex, model, qvec, query_script: str) -> DocName | None:
    """The one name in another script the query names by meaning, if one stands out."""
    if model is None or qvec is None or query_script not in ("latin", "cyrillic"):
        return None
    ranked = names.across_scripts(model, qvec, query_script)
    if not ranked:
        return None
    top = ranked[0][1]
    runner_up = ranked[1][1] if len(ranked) > 1 else -1.0
    if top >= NAME_BRIDGE_MIN and top - runner_up >= NAME_BRIDGE_MARGIN:
        return names.docs[ranked[0][0]]
    return None


def title_lane(conn: psycopg.Connection, names: NameIndex, query: dict[str, set[str]], predicate: Predicate,
               filters: SearchFilters, other: list[LaneHits], *, depth: int, min_terms: int,
               min_query_share: float = 0.0, text: str = "", bridge=None, bridge_vector=None) -> LaneHits:
    """Documents named by the query, each represented by one passage: the opening of the
    section the query names (a chapter by number, a piece of a collection by its title:
    serving/search/sections.py), else the document's passage the other lanes ranked best,
    else its first passage. `text`: the query as typed (its numbers). `bridge`,
    `bridge_vector`: the multilingual model and its query vector, which name a document
    whose name is in the other script by meaning (`_bridged`)."""
    started = time.perf_counter()

    def allowed(doc: DocName) -> bool:
        return (doc.status != "removed" or filters.include_removed) and _doc_allowed(doc.source, doc.id, filters)

    found: dict[int, tuple[DocName, int, list[str]]] = {}
    for doc, n, terms in names.match(query, min_terms, min_query_share):
        if allowed(doc):
            found.setdefault(doc.id, (doc, n, terms))
    wanted = numerals(text) if text else []
    chosen: dict[int, Section] = {}
    if wanted:
        # «Мать глава XV»: the work is named by the rest of the query
        rest = strip_numerals(text, wanted)
        lexemes = {c: set(v) for c, v in query_lexemes(conn, rest, list(names.configs)).items()}
        for doc, n, terms in names.match(with_translit(lexemes, rest), min_terms, min_query_share):
            if allowed(doc) and n > found.get(doc.id, (None, 0))[1]:
                found[doc.id] = (doc, n + len(wanted), terms)
        for doc_id in list(found):
            fit = next((s for s in names.sections_of(doc_id) if heading_fits(wanted, s.heading)), None)
            if fit is not None:
                chosen[doc_id] = fit
    named = _bridged(names, bridge, bridge_vector, script(text)) if text else None
    if named is not None and allowed(named) and named.id not in found:
        found[named.id] = (named, max(min_terms, 1), ["(by meaning)"])
    for section, n, terms in names.match_sections(query, min_terms, min_query_share)[:depth]:
        doc = names.docs[section.doc]
        if allowed(doc) and doc.id not in chosen and n > found.get(doc.id, (None, 0))[1]:
            chosen[doc.id] = section
            found[doc.id] = (doc, n, terms)
    matches = sorted(found.values(), key=lambda m: (-m[1], m[0].path))[:depth]
    visible = _visible(conn, [chosen[d.id].passage_id for d, _, _ in matches if d.id in chosen], predicate)
    # best passage of each matched document among the other lanes' hits
    best: dict[int, tuple[int, int]] = {}
    for lane in other:
        for rank, (pid, doc_id) in enumerate(zip(lane.ids, lane.doc_ids), start=1):
            if doc_id is not None and (doc_id not in best or rank < best[doc_id][0]):
                best[doc_id] = (rank, pid)
    first = _first_passages(conn, [d.id for d, _, _ in matches if d.id not in best], predicate)
    hits = LaneHits("title")
    for doc, n, _terms in matches:
        section = chosen.get(doc.id)
        if section is not None and section.passage_id in visible:
            pid = section.passage_id
        else:
            pid = best[doc.id][1] if doc.id in best else first.get(doc.id)
        if pid is not None and pid not in hits.ids:
            hits.ids.append(pid)
            hits.scores.append(float(n))
            hits.doc_ids.append(doc.id)
    hits.ms = (time.perf_counter() - started) * 1000
    said = ", ".join(f"{d.path}" + (f" › {chosen[d.id].heading}" if d.id in chosen else "") + f" ({'+'.join(t)})"
                     for d, _, t in matches[:3])
    hits.status = (f"ok: {len(hits)} documents by name" + (f": {said}" if said else "")) if hits.ids else \
        f"empty: no document name shares >= {min_terms} terms with the query"
    return hits


def structure_lane(conn: psycopg.Connection, text: str, names: NameIndex, query: dict[str, set[str]],
                   predicate: Predicate, *, depth: int) -> LaneHits | None:
    """TOC passages when the query asks for a table of contents; None otherwise."""
    rest = toc_request(text)
    if rest is None:
        return None
    started = time.perf_counter()
    rows = conn.execute(sql.SQL(
        "SELECT p.id, p.document_id FROM passages p WHERE p.kind = 'toc' AND p.summary_level = 0 AND {pred} "
        "ORDER BY p.document_id, p.ordinal LIMIT 500").format(pred=predicate.clause), predicate.params).fetchall()
    # documents the rest of the query names ("table of contents of moby dick") come first
    overlap = {names.docs[pos].id: n for pos, (n, _) in names.overlaps(query).items()} if rest else {}
    seen_doc: dict[int | None, int] = {}
    ranked = []
    for pid, doc_id in rows:
        ordinal_in_doc = seen_doc.get(doc_id, 0)
        seen_doc[doc_id] = ordinal_in_doc + 1
        ranked.append((-overlap.get(doc_id, 0), ordinal_in_doc, doc_id or 0, pid))
    ranked.sort()
    hits = LaneHits("structure", [r[3] for r in ranked[:depth]], [float(-r[0]) for r in ranked[:depth]],
                    [r[2] or None for r in ranked[:depth]])
    hits.ms = (time.perf_counter() - started) * 1000
    hits.status = f"ok: {len(hits)} table-of-contents passages" if hits.ids else "empty: no TOC passages"
    return hits
