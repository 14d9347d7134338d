"""Input hygiene: what an agent may send, and what it gets back when it is wrong.

Every lane receives text that has been through `normalise_query`; SQL never
sees user text except as a bound parameter, and to_tsquery never sees it at
all (the keyword lane builds its tsquery from lexemes Postgres produced).
"""

from __future__ import annotations

import re
import unicodedata

from serving.search.types import MAX_QUERY_CHARS, MAX_TOP_K, SearchError

_WS = re.compile(r"\s+")


def normalise_query(query: object) -> tuple[str, list[str]]:
    """Clean `query` for search. Returns (text, warnings); raises SearchError when
    nothing searchable is left."""
    if not isinstance(query, str):
        raise SearchError(f"query must be a string, got {type(query).__name__}")
    warnings: list[str] = []
    # lone surrogates (broken emoji from some JSON encoders) cannot be encoded for Postgres
    text = query.encode("utf-8", "replace").decode("utf-8")
    # NUL is not allowed in Postgres text; other control characters only confuse parsers
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in text)
    text = _WS.sub(" ", text).strip()
    if not text:
        raise SearchError("query is empty: send the words you are looking for")
    if len(text) > MAX_QUERY_CHARS:
        cut = text.rfind(" ", 0, MAX_QUERY_CHARS)
        text = text[: cut if cut > MAX_QUERY_CHARS // 2 else MAX_QUERY_CHARS]
        warnings.append(f"query was {len(query):,} characters; only the first {len(text):,} were used "
                        f"(the embedder reads ~1,000 characters, the keyword lane at most 6 terms)")
    return text, warnings


def validate_top_k(top_k: object) -> tuple[int, list[str]]:
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        try:
            top_k = int(str(top_k).strip())
        except ValueError:
            raise SearchError(f"top_k must be an integer between 1 and {MAX_TOP_K}") from None
    if top_k < 1:
        raise SearchError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
    if top_k > MAX_TOP_K:
        return MAX_TOP_K, [f"top_k {top_k} is above the maximum; returning at most {MAX_TOP_K}"]
    return top_k, []
