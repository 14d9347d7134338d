"""Proper names of a query in the other script: "Who did Chervyakov sneeze on?" asked of a
library whose text spells him «Червяков».

Only the multilingual vector lane could bridge such a question, and among a hundred works
in one language its nearest passages were often another book's (an English question about
a Russian work came back right at rank 1 for 43.5% of ruslit_dev's English questions). The
keyword lane needs the name as the library writes it. Transliterating back is ambiguous
(y is й, ы or и; the stemmer then cuts endings), so the library's own vocabulary decides:
every Cyrillic lexeme the keyword statistics hold is keyed by `translit.skeleton`, and a
capitalised Latin word of the query takes the lexeme whose key is the longest prefix of its
own key (a stem is a prefix of its word: «гаврил» for "Gavrila", «пелаге» for "Pelageya"),
among the lexemes the library writes as names.

The keyed vocabulary is built once per refresh of the statistics (lexeme_df_totals) and
kept per database: 42,257 Russian lexemes of ruslit_dev key in about 0.4 s.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass

import psycopg

from serving.search.translit import FUNCTION_WORDS, skeleton, words

log = logging.getLogger(__name__)

# the text-search configurations whose lexemes are Cyrillic (schema.sql ts_config_for_language)
CYRILLIC_CONFIGS = ("russian",)
# a key shorter than this matches only a whole word's key, unless the word is short: the
# stemmer leaves three letters of a short name («фом» of Фома, «кат» of Катя), and a long
# word's three-letter prefix is any stem at all
MIN_PREFIX = 4
SHORT_WORD = 5
# a Latin word's key may lose at most this many letters to the stemmer's cut ending
MAX_CUT = 3
# at most this many lexemes a word (several stems can share a key)
PER_WORD = 3


# A lexeme stands for a name when the library writes it capitalised inside sentences:
# «Рената», «Фома» (df 703 and 2,208 in ruslit_dev: a main character is no rarer than a
# common word), not «старый» ("Star City" shares the key «стар», df 1,020).
SAMPLE_PASSAGES = 20
MIN_CAPITALISED = 0.6


@dataclass(frozen=True)
class Lexicon:
    key: tuple
    by_skeleton: dict[str, tuple[tuple[str, str, int], ...]]   # key -> ((config, lexeme, df), ...) df desc
    proper: dict[tuple[str, str], bool]                         # (config, lexeme) -> written as a name

    def is_name(self, conn: psycopg.Connection, config: str, lexeme: str) -> bool:
        """Whether the library writes `lexeme` capitalised inside sentences (cached)."""
        known = self.proper.get((config, lexeme))
        if known is None:
            known = self.proper[(config, lexeme)] = _capitalised(conn, config, lexeme)
        return known


_SENTENCE_END = frozenset(".!?…\n\"«»—–-:")


def _capitalised(conn: psycopg.Connection, config: str, lexeme: str) -> bool:
    rows = conn.execute(
        "SELECT p.content FROM postings s JOIN passages p ON p.id = s.passage_id "
        "WHERE s.ts_config = %s::regconfig AND s.lexeme = %s ORDER BY s.impact DESC LIMIT %s",
        (config, lexeme, SAMPLE_PASSAGES)).fetchall()
    upper = lower = 0
    for (content,) in rows:
        for match in re.finditer(rf"(?i)(?<![^\W\d_]){re.escape(lexeme)}[^\W\d_]*", content):
            before = content[:match.start()].rstrip()
            if not before or before[-1] in _SENTENCE_END:
                continue   # a sentence's first word says nothing
            if match.group()[0].isupper():
                upper += 1
            else:
                lower += 1
    return upper > 0 and upper >= MIN_CAPITALISED * (upper + lower)


def name_words(text: str) -> list[str]:
    """The query's words that read as proper names in Latin letters: capitalised, not an
    English function word, three letters or more."""
    return [w for w in words(text) if w[:1].isupper() and w.isascii() and len(w) >= 3
            and w.casefold() not in FUNCTION_WORDS]


class LexiconCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_db: dict[str, Lexicon] = {}

    def get(self, conn: psycopg.Connection) -> Lexicon | None:
        """The keyed Cyrillic vocabulary of the database, or None when it holds none."""
        key = tuple(conn.execute(
            "SELECT count(*), max(refreshed_at) FROM lexeme_df_totals WHERE ts_config::text = ANY(%s)",
            (list(CYRILLIC_CONFIGS),)).fetchone())
        if not key[0]:
            return None
        db = conn.info.dsn
        cached = self._by_db.get(db)
        if cached is not None and cached.key == key:
            return cached
        with self._lock:
            rows = conn.execute(
                "SELECT ts_config::text, lexeme, sum(df)::int FROM lexeme_df WHERE ts_config::text = ANY(%s) "
                "GROUP BY 1, 2", (list(CYRILLIC_CONFIGS),)).fetchall()
            by: dict[str, list[tuple[str, str, int]]] = {}
            for config, lexeme, df in rows:
                k = skeleton(lexeme)
                if len(k) >= 3:
                    by.setdefault(k, []).append((config, lexeme, df))
            lexicon = Lexicon(key, {k: tuple(sorted(v, key=lambda t: -t[2])) for k, v in by.items()}, {})
            self._by_db[db] = lexicon
        log.info("cross-script names: keyed %d Cyrillic lexemes", len(rows))
        return lexicon


LEXICON = LexiconCache()


def other_script_names(conn: psycopg.Connection, text: str, *, skip: frozenset[str] | set[str] = frozenset()
                       ) -> dict[str, set[str]]:
    """config -> the library's Cyrillic lexemes for the Latin-lettered names of `text`
    ({} when it has none, or the library no Cyrillic vocabulary). `skip`: keys of words
    not to look up (the authors of the library's files: an author is seldom named in their
    own text, so "Blok" matched other writers' mentions of him, not his work)."""
    names = [w for w in name_words(text) if skeleton(w) not in skip]
    if not names:
        return {}
    lexicon = LEXICON.get(conn)
    if lexicon is None:
        return {}
    out: dict[str, set[str]] = {}
    for word in names:
        key = skeleton(word)
        for length in range(len(key), max(len(key) - MAX_CUT, 0), -1):
            if length < MIN_PREFIX and length != len(key) and (len(key) > SHORT_WORD or length < 3):
                break
            found = [(c, lex) for c, lex, _df in lexicon.by_skeleton.get(key[:length], ())
                     if lexicon.is_name(conn, c, lex)]
            if found:
                for config, lexeme in found[:PER_WORD]:
                    out.setdefault(config, set()).add(lexeme)
                break
    return out
