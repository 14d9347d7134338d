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

import functools
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain

import numpy as np
import psycopg

from serving.db import database_key
from serving.search.language import word_scripts
from serving.search.translit import skeletons

log = logging.getLogger(__name__)

_SEPARATORS = re.compile(r"[\W_]+", re.UNICODE)
# names in another script than the query's encoded on a search's first need at most: the
# multilingual model encodes some 300-500 short names a second here, so the first such
# search of a process waits up to a few seconds; past this many the bridge stands aside
MAX_NAME_VECTORS = 2000
# a name of at most this many lexemes (author and a one- or two-word title) matches a
# one-word query on its own
SHORT_NAME = 3


def normalise_name(text: str) -> str:
    """Lower case, ё as е, every run of non-alphanumerics one space: 'Moby-Dick_v2.epub' ~
    'moby dick v2 epub', «Повреждённый» ~ «поврежденный» (most Russian text is typed without ё)."""
    return _SEPARATORS.sub(" ", text.casefold().replace("ё", "е")).strip()


# The name index's cross-script keys (serving/search/translit.py) travel as one more
# "configuration" beside the text-search ones: «Горький Челкаш», "Chelkash Gorky" and
# "Gorky - Челкаш.txt" share {gorki, CelkaS}. TRANSLIT holds the keys of names with a word
# in a script other than Latin, TRANSLIT_ALL every name's: a query in Latin letters alone
# is compared by key with the first only. Compared with all-Latin names too, unstemmed keys
# of English words outvoted the stemmed English configuration on SciFact's paper titles
# (nDCG@10 0.7291 against 0.7316 without them, the same load).
TRANSLIT = "translit"
TRANSLIT_ALL = "translit_all"
KEY_CONFIGS = (TRANSLIT, TRANSLIT_ALL)


def with_translit(query: dict[str, set[str]], text: str) -> dict[str, set[str]]:
    """A query's lexemes per configuration plus its words' cross-script keys."""
    latin_only = word_scripts(text) <= {"latin"}
    return {**query, (TRANSLIT if latin_only else TRANSLIT_ALL): skeletons(text)}


def _keys(text: str) -> dict[str, frozenset[str]]:
    """A name's or heading's keys under TRANSLIT_ALL, and TRANSLIT when it has a word in a
    script other than Latin."""
    keys = frozenset(skeletons(text))
    return {TRANSLIT_ALL: keys, **({TRANSLIT: keys} if word_scripts(text) - {"latin"} else {})}


def author_from_filename(path: str | os.PathLike) -> str | None:
    """The author of a file named `Author - Title.ext` (the way libraries of books are
    commonly named), or None: the part before the first " - ", when it is one to four
    words with letters and a title follows. Extraction stores it when the file's metadata
    names no author; readers fall back on it for rows extracted before authors were kept."""
    stem = path_stem(os.fspath(path))
    if " - " not in stem:
        return None
    author, title = (part.strip() for part in stem.split(" - ", 1))
    if not title or not 1 <= len(author.split()) <= 4 or not any(ch.isalpha() for ch in author):
        return None
    return author


def author_matches(wanted: str, author: str | None) -> bool:
    """`wanted` names `author`: every word of it is a word of the author's name in either
    script or spelling («Чехов», "Chekhov", "A. P. Chekhov"), or it is part of the name."""
    if not author or not wanted.strip():
        return False
    keys = skeletons(wanted, min_length=2)
    if keys and keys <= skeletons(author, min_length=2):
        return True
    flat = normalise_name(wanted)
    return bool(flat) and flat in normalise_name(author)


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
    # the scripts of the file name's words ("Gorky - Мать": latin and cyrillic)
    scripts: frozenset[str] = frozenset()
    author: str | None = None

    def to_dict(self) -> dict:
        return {"path": self.path, "title": self.title, "author": self.author, "source": self.source,
                "format": self.format,
                "language": self.language, "pages": self.pages, "status": self.status,
                **({"error": self.error} if self.error else {})}


@dataclass(frozen=True)
class Section:
    """A heading of a document and the first passage under it."""

    doc: int                              # position of its document in NameIndex.docs
    heading: str
    passage_id: int
    ordinal: int
    lexemes: dict[str, frozenset[str]]    # configuration -> lexemes of the heading


@dataclass(frozen=True)
class NameIndex:
    key: tuple
    docs: tuple[DocName, ...]
    configs: tuple[str, ...]
    # configuration -> lexeme -> positions in `docs`. Measured: intersecting every name
    # with the query in a Python loop cost 15-18 ms per search at 5,183 documents; the
    # postings of a query's few lexemes cost well under 1 ms.
    postings: dict[str, dict[str, tuple[int, ...]]]
    sections: tuple[Section, ...] = ()
    # configuration -> lexeme -> positions in `sections`
    section_postings: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    # document id -> positions in `sections`, in reading order
    doc_sections: dict[int, tuple[int, ...]] = field(default_factory=dict)
    # (model name, position in `docs`) -> the name's vector, encoded when first asked for
    name_vectors: dict[tuple[str, int], np.ndarray] = field(default_factory=dict, compare=False)
    # query script -> positions in `docs` of the names with a word in another script: every
    # search asks, and the answer changes only with the names (a new index)
    other_script: dict[str, list[int]] = field(default_factory=dict, compare=False)

    def across_scripts(self, model, qvec: np.ndarray, query_script: str,
                       limit: int = MAX_NAME_VECTORS) -> list[tuple[int, float]]:
        """(position in `docs`, cosine) of the names with words in another script than the
        query's, nearest first, under the multilingual `model` ("The Fiery Angel Bryusov"
        and «Bryusov - Огненный ангел»); [] past `limit` such names (encoding them would
        stall the search)."""
        if query_script not in self.other_script:
            self.other_script[query_script] = [pos for pos, doc in enumerate(self.docs) if doc.scripts - {query_script}]
        positions = self.other_script[query_script]
        if not positions or len(positions) > limit:
            return []
        todo = [pos for pos in positions if (model.name, pos) not in self.name_vectors]
        if todo:
            vectors = model.encode_passages([path_stem(self.docs[pos].path) for pos in todo])
            self.name_vectors.update(((model.name, pos), np.asarray(v, dtype=np.float32)) for pos, v in zip(todo, vectors))
        matrix = np.stack([self.name_vectors[(model.name, pos)] for pos in positions])
        sims = matrix @ (qvec / (np.linalg.norm(qvec) or 1.0))
        order = np.argsort(-sims)
        return [(positions[i], float(sims[i])) for i in order]

    @functools.cached_property
    def name_keys(self) -> frozenset[str]:
        """The cross-script keys of the words of two document names or more: the authors
        of a library (a title's words are one name's)."""
        counts = Counter(k for doc in self.docs for k in doc.lexemes.get(TRANSLIT_ALL, ()))
        return frozenset(k for k, n in counts.items() if n >= 2)

    def sections_of(self, doc_id: int) -> list[Section]:
        return [self.sections[i] for i in self.doc_sections.get(doc_id, ())]

    def match_sections(self, query: dict[str, set[str]], min_terms: int, min_query_share: float = 0.0
                       ) -> list[tuple[Section, int, list[str]]]:
        """Sections named by the query - a story of a collection by its own title, alone or
        with its work's name or author («Vixerunt», «Герцен Перед грозой»): the heading
        shares a term with the query, and heading and document name together pass the rule
        of `match` (terms, share of the query; one word for a short heading). Best first."""
        hit: dict[int, set[str]] = {}
        for config, lexemes in query.items():
            postings = self.section_postings.get(config)
            if postings:
                for lexeme in lexemes:
                    for pos in postings.get(lexeme, ()):
                        hit.setdefault(pos, set()).add(config)
        out = []
        for pos, configs in hit.items():
            section = self.sections[pos]
            doc = self.docs[section.doc]
            best = max(((len(terms), len(terms) / max(len(query.get(c, ())), 1), c not in KEY_CONFIGS, sorted(terms))
                        for c in configs
                        for terms in [(section.lexemes.get(c, frozenset()) | doc.lexemes.get(c, frozenset()))
                                      & query.get(c, set())]), default=None)
            if best is None:
                continue
            n, share, _, terms = best
            size = max((len(v) for v in section.lexemes.values()), default=1)
            single = n == 1 and share >= 1.0 and size <= SHORT_NAME
            if (n >= max(min_terms, 1) or single) and share >= min_query_share:
                out.append((section, n, terms, share))
        out.sort(key=lambda t: (-t[1], -t[3], t[0].ordinal))
        return [(section, n, terms) for section, n, terms, _ in out]

    def overlaps(self, query: dict[str, set[str]]) -> dict[int, tuple[int, list[str]]]:
        """position in `docs` -> (distinct shared lexemes, which) for every name sharing any;
        the best configuration counts."""
        return {pos: (n, terms) for pos, (n, terms, _share) in self._overlaps(query).items()}

    def _shared_counts(self, query: dict[str, set[str]]) -> Iterator[tuple[int, Counter]]:
        """Per configuration: (its query lexemes, position in `docs` -> how many its name holds)."""
        for config, lexemes in query.items():
            postings = self.postings.get(config)
            if postings and lexemes:
                yield len(lexemes), Counter(chain.from_iterable(postings.get(lexeme, ()) for lexeme in lexemes))

    def _overlaps(self, query: dict[str, set[str]], positions: Iterable[int] | None = None
                  ) -> dict[int, tuple[int, list[str], float]]:
        """As `overlaps`, plus the share of the query's lexemes (in that configuration)
        that the name holds; of `positions` only when given (names sharing none are left
        out all the same)."""
        if positions is None:
            positions = {pos for _size, counts in self._shared_counts(query) for pos in counts}
        out = {}
        for pos in positions:
            lexemes = self.docs[pos].lexemes
            by_config = [(config, shared) for config, wanted in query.items()
                         if (shared := lexemes.get(config, frozenset()) & wanted)]
            if not by_config:
                continue
            # most shared terms, then the larger share of the query; a text-search
            # configuration before the cross-script keys on a tie
            n, share, _, best = max((len(terms), len(terms) / max(len(query.get(config, ())), 1),
                                     config not in KEY_CONFIGS, set(terms)) for config, terms in by_config)
            out[pos] = (n, sorted(best), share)
        return out

    def match(self, query: dict[str, set[str]], min_terms: int,
              min_query_share: float = 0.0) -> list[tuple[DocName, int, list[str]]]:
        """Documents sharing >= min_terms distinct lexemes with the query and holding
        >= min_query_share of the query's lexemes, best first: most shared terms, then
        the larger share of the name covered, then path. A query of one word matches a
        short name holding it («Мать» -> "Gorky - Мать.txt"): most titles of a library of
        fiction are one or two words, and they were unreachable by name."""
        # only names one configuration could pass the rule with are looked at closely: a long
        # query shares a word with ~1,000 of 5,183 SciFact titles (3.2 ms a search, now 0.2)
        need = max(min_terms, 1)
        candidates = {pos for size, counts in self._shared_counts(query) for pos, c in counts.items()
                      if size == 1 or (c >= need and c / size >= min_query_share)}
        out = []
        for pos, (n, terms, share) in self._overlaps(query, sorted(candidates)).items():
            doc = self.docs[pos]
            size = max((len(v) for v in doc.lexemes.values()), default=1)
            single = n == 1 and share >= 1.0 and size <= SHORT_NAME
            if (n >= max(min_terms, 1) or single) and share >= min_query_share:
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
        cached = self._by_db.get(db := database_key(conn))
        if cached is not None and cached.key == key:
            return cached
        with self._lock:
            index = _load(conn, key)
            self._by_db[db] = index
            self.loads += 1
        log.info("title cache: stemmed %d document names and %d headings (%s)", len(index.docs),
                 len(index.sections), ", ".join(index.configs))
        return index

    def clear(self) -> None:
        with self._lock:
            self._by_db.clear()


# The first passage under each heading. A library of EPUBs has a few hundred headings a
# book; past this many the sections are left out (chapter lookups then find the work only).
MAX_SECTIONS = 200_000
SECTIONS_SQL = """
SELECT DISTINCT ON (p.document_id, p.heading) p.document_id, p.heading, p.id, p.ordinal
FROM passages p
WHERE p.summary_level = 0 AND p.heading IS NOT NULL AND NOT p.removed AND NOT p.superseded
  AND p.source IN ('library', 'vault')
ORDER BY p.document_id, p.heading, p.ordinal
LIMIT %s
"""


def _stem(conn: psycopg.Connection, texts: list[str], configs: list[str]) -> list[frozenset[str]]:
    """The lexemes of each text under its configuration, in one round trip."""
    if not texts:
        return []
    out: list[frozenset[str]] = [frozenset()] * len(texts)
    for i, lex in conn.execute(
            "SELECT t.i, tsvector_to_array(to_tsvector(t.c::regconfig, t.txt)) "
            "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(c, txt, i)", (configs, texts)).fetchall():
        out[int(i) - 1] = frozenset(lex or ())
    return out


def _postings(entries: list[dict[str, frozenset[str]]]) -> dict[str, dict[str, tuple[int, ...]]]:
    postings: dict[str, dict[str, list[int]]] = {}
    for pos, by_config in enumerate(entries):
        for config, lexemes in by_config.items():
            for lexeme in lexemes:
                postings.setdefault(config, {}).setdefault(lexeme, []).append(pos)
    return {c: {lex: tuple(v) for lex, v in by_lex.items()} for c, by_lex in postings.items()}


def _load_sections(conn: psycopg.Connection, docs: tuple[DocName, ...], doc_configs: list[str]):
    rows = conn.execute(SECTIONS_SQL, (MAX_SECTIONS + 1,)).fetchall()
    if len(rows) > MAX_SECTIONS:
        log.warning("title cache: over %d headings; chapter and inner-title lookups are off", MAX_SECTIONS)
        return (), {}, {}
    position = {doc.id: pos for pos, doc in enumerate(docs)}
    rows = [r for r in rows if r[0] in position]
    texts, configs, owners = [], [], []
    for i, (doc_id, heading, _pid, _ordinal) in enumerate(rows):
        for config in {doc_configs[position[doc_id]], "english"} - {"simple"}:
            texts.append(heading)
            configs.append(config)
            owners.append(i)
    lexemes: list[dict[str, frozenset[str]]] = [_keys(r[1]) for r in rows]
    for owner, config, lex in zip(owners, configs, _stem(conn, texts, configs)):
        lexemes[owner][config] = lex
    sections = tuple(Section(position[r[0]], r[1], r[2], r[3], lexemes[i]) for i, r in enumerate(rows))
    by_doc: dict[int, list[int]] = {}
    for pos in sorted(range(len(sections)), key=lambda p: (sections[p].doc, sections[p].ordinal)):
        by_doc.setdefault(docs[sections[pos].doc].id, []).append(pos)
    return sections, _postings([sec.lexemes for sec in sections]), {d: tuple(v) for d, v in by_doc.items()}


def _load(conn: psycopg.Connection, key: tuple) -> NameIndex:
    rows = conn.execute("SELECT id, source, path, title, format, language, pages, status, error, "
                        "ts_config::text, author FROM documents ORDER BY id").fetchall()
    texts: list[str] = []
    configs: list[str] = []
    owners: list[int] = []
    for i, row in enumerate(rows):
        # the author the metadata gave is part of the name ("Conan Doyle" finds "Doyle - ...epub")
        name_text = " ".join(x for x in (normalise_name(path_stem(row[2])), row[3] or "", row[10] or "") if x)
        for config in {row[9], "english"} - {"simple"}:
            texts.append(name_text)
            configs.append(config)
            owners.append(i)
    lexemes: list[dict[str, frozenset[str]]] = [
        _keys(f"{path_stem(r[2])} {r[3] or ''} {r[10] or ''}") for r in rows]
    for owner, config, lex in zip(owners, configs, _stem(conn, texts, configs)):
        lexemes[owner][config] = lex
    docs = tuple(
        DocName(id=r[0], source=r[1], path=r[2], title=r[3], format=r[4], language=r[5], pages=r[6],
                status=r[7], error=r[8], lexemes=lexemes[i],
                flat=normalise_name(f"{r[2]} {r[3] or ''} {r[10] or ''}"), scripts=frozenset(word_scripts(path_stem(r[2]))),
                author=r[10] or (author_from_filename(r[2]) if r[1] == "library" else None))
        for i, r in enumerate(rows))
    sections, section_postings, doc_sections = _load_sections(conn, docs, [r[9] for r in rows])
    return NameIndex(key, docs, tuple(sorted({c for c in configs})), _postings([d.lexemes for d in docs]),
                     sections, section_postings, doc_sections)


NAMES = NameCache()
