"""Inventory: is a work in the library at all? Answered from `documents`, never
from search.

Content search cannot prove absence: asked for something absent it returns
its closest guesses, which read exactly like an answer (and agent-library
(github.com/CreateM1nd/agent-library) found passages *quoting* the absent work - "the corpus mentions it" is
not "the corpus contains it"). So `matched = 0` here is the only definitive
negative, and the match rule must not produce false positives:

- case-insensitive substring of the path or title (also after folding every
  run of punctuation to one space, so "moby dick" finds "moby-dick.epub"), or
- every word of the pattern in the name in another script or spelling («Чехов» finds
  "Chekhov - Каштанка.txt", "Gorkiy" finds "Gorky - Мать.txt": the cross-script keys of
  serving/search/translit.py), or
- >= 2 distinct stemmed terms shared with the file name / title. One shared
  word is not enough: "guide" alone would make every "... Guide" file a match
  for "The Hitchhiker's Guide to the Galaxy", and absence unreliable.

Limitation (as in the reference): a work stored under an unrecognisable file
name and without a title reads as absent.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from serving.search.keyword import query_lexemes
from serving.search.query import normalise_query
from serving.search.titles import NAMES, TRANSLIT_ALL, normalise_name
from serving.search.translit import skeletons
from serving.search.types import SearchError

log = logging.getLogger(__name__)

MAX_LIMIT = 1000
MIN_TERMS = 2


def library_files(conn: psycopg.Connection, pattern: str, limit: int = 50) -> dict[str, Any]:
    """{"pattern", "total", "matched", "returned", "truncated", "files"} for files whose
    name or title matches `pattern`. An empty pattern lists the whole library."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SearchError(f"limit must be an integer between 1 and {MAX_LIMIT}")
    limit = min(limit, MAX_LIMIT)
    try:
        text, _ = normalise_query(pattern)
    except SearchError:
        if not isinstance(pattern, str):
            raise
        text = ""
    text = text[:500]
    with conn.transaction():
        names = NAMES.get(conn)
        live = [d for d in names.docs if d.status != "removed"]
        query = {c: set(v) for c, v in query_lexemes(conn, text, list(names.configs)).items()} if text else {}
    keys = skeletons(text) if text else set()
    matches: list[tuple[int, int, str, Any]] = []
    raw, flat = text.casefold(), normalise_name(text)
    shared = {names.docs[pos].id: hit for pos, hit in names.overlaps(query).items()}
    for doc in live:
        if not text:
            matches.append((0, 0, "all", doc))
        elif raw in doc.path.casefold() or raw in (doc.title or "").casefold() or (flat and flat in doc.flat):
            matches.append((0, 0, "substring", doc))
        elif doc.id in shared and shared[doc.id][0] >= MIN_TERMS:
            n, terms = shared[doc.id]
            matches.append((1, -n, "terms: " + ", ".join(terms), doc))
        elif keys and keys <= doc.lexemes.get(TRANSLIT_ALL, frozenset()):
            matches.append((0, 1, "transliterated", doc))
    matches.sort(key=lambda m: (m[0], m[1], m[3].path))
    files = [{**doc.to_dict(), "match": how} for _, _, how, doc in matches[:limit]]
    return {
        "pattern": text,
        "total": len(live),
        "matched": len(matches),
        "returned": len(files),
        "truncated": len(matches) > len(files),
        "files": files,
    }
