"""Document names (path stem + title) as stemmed lexemes, cached per process;
the title lane and the inventory both match queries against them.

Known-item lookups ("<title> <author>", "CHAPTER <author>") were most of
agent-library's (github.com/CreateM1nd/agent-library) real queries, and a file name was not searchable at all
until this lane existed. It matches on stemmed lexemes, not raw strings, so a
singular in the query still matches a plural in the name.

Getting it fast took three attempts: stemming in SQL per chunk
ran the stemmer 70,801 times instead of 257 (671 ms); a DISTINCT CTE was worse
(1,736 ms, the planner materialised and re-joined it). What works: Postgres
stems every name once when the cache loads, Python intersects per query. The
cache reloads when `documents` changes (row count, max id, max updated_at -
the pipeline bumps updated_at on every change), checked with one tiny query.

Each name is stemmed with its document's own configuration and with
'english' (a Russian book's file name is usually transliterated Latin; the
russian configuration maps ASCII words to the English stemmer anyway).
'simple' is never used for names: it keeps stopwords, and "the" + "of" would
be two overlapping terms.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

import psycopg

log = logging.getLogger(__name__)

_SEPARATORS = re.compile(r"[\W_]+", re.UNICODE)


def normalise_name(text: str) -> str:
    """Lower case, every run of non-alphanumerics one space: 'Moby-Dick_v2.epub' ~ 'moby dick v2 epub'."""
    return _SEPARATORS.sub(" ", text.casefold()).strip()


def path_stem(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base[1:] else base


@dataclass(frozen=True)
class DocName:
    id: int
    source: str
    path: str
    title: str | None
    format: str | None
    language: str | None
    pages: int | None
    status: str
    error: str | None
    lexemes: dict[str, frozenset[str]]   # configuration -> lexemes of stem + title
    flat: str                            # normalise_name(path + title), for substring matching

    def to_dict(self) -> dict:
        return {"path": self.path, "title": self.title, "source": self.source, "format": self.format,
                "language": self.language, "pages": self.pages, "status": self.status,
                **({"error": self.error} if self.error else {})}


@dataclass(frozen=True)
class NameIndex:
    key: tuple
    docs: tuple[DocName, ...]
    configs: tuple[str, ...]
    # configuration -> lexeme -> positions in `docs`. Measured: intersecting every name
    # with the query in a Python loop cost 15-18 ms per search at 5,183 documents; the
    # postings of a query's few lexemes cost well under 1 ms.
    postings: dict[str, dict[str, tuple[int, ...]]]

    def overlaps(self, query: dict[str, set[str]]) -> dict[int, tuple[int, list[str]]]:
        """position in `docs` -> (distinct shared lexemes, which) for every name sharing any;
        the best configuration counts."""
        return {pos: (n, terms) for pos, (n, terms, _share) in self._overlaps(query).items()}

    def _overlaps(self, query: dict[str, set[str]]) -> dict[int, tuple[int, list[str], float]]:
        """As `overlaps`, plus the share of the query's lexemes (in that configuration)
        that the name holds."""
        shared: dict[int, dict[str, set[str]]] = {}
        for config, lexemes in query.items():
            postings = self.postings.get(config)
            if not postings:
                continue
            for lexeme in lexemes:
                for pos in postings.get(lexeme, ()):
                    shared.setdefault(pos, {}).setdefault(config, set()).add(lexeme)
        out = {}
        for pos, by_config in shared.items():
            config, best = max(by_config.items(), key=lambda kv: (len(kv[1]), kv[0]))
            out[pos] = (len(best), sorted(best), len(best) / max(len(query.get(config, ())), 1))
        return out

    def match(self, query: dict[str, set[str]], min_terms: int,
              min_query_share: float = 0.0) -> list[tuple[DocName, int, list[str]]]:
        """Documents sharing >= min_terms distinct lexemes with the query and holding
        >= min_query_share of the query's lexemes, best first: most shared terms, then
        the larger share of the name covered, then path."""
        out = []
        for pos, (n, terms, share) in self._overlaps(query).items():
            if n >= max(min_terms, 1) and share >= min_query_share:
                doc = self.docs[pos]
                size = max((len(v) for v in doc.lexemes.values()), default=1)
                out.append((doc, n, terms, n / max(size, 1)))
        out.sort(key=lambda t: (-t[1], -t[3], t[0].path))
        return [(doc, n, terms) for doc, n, terms, _ in out]


class NameCache:
    """Per-process cache of NameIndex, one per database."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_db: dict[str, NameIndex] = {}
        self.loads = 0  # how many times names were (re)stemmed; tests assert the cache holds

    def get(self, conn: psycopg.Connection) -> NameIndex:
        key = tuple(conn.execute(
            "SELECT count(*), coalesce(max(id), 0), max(updated_at) FROM documents").fetchone())
        db = conn.info.dsn
        cached = self._by_db.get(db)
        if cached is not None and cached.key == key:
            return cached
        with self._lock:
            index = _load(conn, key)
            self._by_db[db] = index
            self.loads += 1
        log.info("title cache: stemmed %d document names (%s)", len(index.docs), ", ".join(index.configs))
        return index

    def clear(self) -> None:
        with self._lock:
            self._by_db.clear()


def _load(conn: psycopg.Connection, key: tuple) -> NameIndex:
    rows = conn.execute("SELECT id, source, path, title, format, language, pages, status, error, "
                        "ts_config::text FROM documents ORDER BY id").fetchall()
    texts: list[str] = []
    configs: list[str] = []
    owners: list[int] = []
    for i, row in enumerate(rows):
        name_text = " ".join(x for x in (normalise_name(path_stem(row[2])), row[3] or "") if x)
        for config in {row[9], "english"} - {"simple"}:
            texts.append(name_text)
            configs.append(config)
            owners.append(i)
    lexemes: list[dict[str, frozenset[str]]] = [{} for _ in rows]
    if texts:
        stemmed = conn.execute(
            "SELECT t.i, tsvector_to_array(to_tsvector(t.c::regconfig, t.txt)) "
            "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(c, txt, i)", (configs, texts)).fetchall()
        for i, lex in stemmed:
            pos = int(i) - 1
            lexemes[owners[pos]][configs[pos]] = frozenset(lex or ())
    docs = tuple(
        DocName(id=r[0], source=r[1], path=r[2], title=r[3], format=r[4], language=r[5], pages=r[6],
                status=r[7], error=r[8], lexemes=lexemes[i],
                flat=normalise_name(f"{r[2]} {r[3] or ''}"))
        for i, r in enumerate(rows))
    postings: dict[str, dict[str, list[int]]] = {}
    for pos, doc in enumerate(docs):
        for config, lexemes in doc.lexemes.items():
            for lexeme in lexemes:
                postings.setdefault(config, {}).setdefault(lexeme, []).append(pos)
    frozen = {c: {lex: tuple(v) for lex, v in by_lex.items()} for c, by_lex in postings.items()}
    return NameIndex(key, docs, tuple(sorted({c for c in configs})), frozen)


NAMES = NameCache()
