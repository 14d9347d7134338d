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

from serving.db import database_key
from serving.search.translit import FUNCTION_WORDS, skeleton, words

log = logging.getLogger(__name__)

# the text-search configurations whose lexemes are Cyrillic (schema.sql ts_config_for_language)
CYRILLIC_CONFIGS = ("russian",)
# a key shorter than this matches only a whole word's key, or a short word's key less its
# last Cyrillic letter (я and ю are two characters of a key): the stemmer leaves three
# letters of a short name («фом» of Фома, «кат» of Катя), and a longer cut of a short name
# is any stem at all
MIN_PREFIX = 4
# a Latin word's key may lose at most this many letters to the stemmer's cut ending
MAX_CUT = 3
# at most this many lexemes a word (several stems can share a key)
PER_WORD = 3


# A lexeme stands for a query's name when the library writes it capitalised inside
# sentences - «Рената», «Фома» (df 703 and 2,208 in ruslit_dev: a main character is no
# rarer than a common word), not «старый» ("Star City" shares the key «стар», df 1,020) -
# and one of those capitalised words has the query word's own key: the stemmer gives
# Юлия and Юлай one stem «юл», and "Julia" asked of Pushkin's novel found Юлай.
SAMPLE_PASSAGES = 20
MIN_CAPITALISED = 0.6


@dataclass(frozen=True)
class Lexicon:
    key: tuple
    by_skeleton: dict[str, tuple[tuple[str, str, int], ...]]   # key -> ((config, lexeme, df), ...) df desc
    # (config, lexeme) -> the keys of the capitalised words it stands for, () when the
    # library does not write it as a name
    forms: dict[tuple[str, str], frozenset[str]]

    def name_forms(self, conn: psycopg.Connection, config: str, lexeme: str) -> frozenset[str]:
        """The keys of the words `lexeme` stands for where the library writes it as a name
        (sampled, cached); empty when it is not written as one."""
        known = self.forms.get((config, lexeme))
        if known is None:
            known = self.forms[(config, lexeme)] = _capitalised_forms(conn, config, lexeme)
        return known


_SENTENCE_END = frozenset(".!?…\n\"«»—–-:")


def _capitalised_forms(conn: psycopg.Connection, config: str, lexeme: str) -> frozenset[str]:
    rows = conn.execute(
        "SELECT p.content FROM postings s JOIN passages p ON p.id = s.passage_id "
        "WHERE s.ts_config = %s::regconfig AND s.lexeme = %s ORDER BY s.impact DESC LIMIT %s",
        (config, lexeme, SAMPLE_PASSAGES)).fetchall()
    forms: set[str] = set()
    upper = lower = 0
    for (content,) in rows:
        for match in re.finditer(rf"(?i)(?<![^\W\d_]){re.escape(lexeme)}[^\W\d_]*", content):
            before = content[:match.start()].rstrip()
            if not before or before[-1] in _SENTENCE_END:
                continue   # a sentence's first word says nothing
            if match.group()[0].isupper():
                forms.add(skeleton(match.group()))
                upper += 1
            else:
                lower += 1
    return frozenset(forms) if upper and upper >= MIN_CAPITALISED * (upper + lower) else frozenset()


def name_words(text: str) -> list[str]:
    """The query's words that read as proper names in Latin letters: capitalised, not an
    English function word, three letters or more; an English possessive cut off
    ("Krupov's" -> "Krupov")."""
    out = []
    for word in words(text):
        word = re.sub(r"['’]s$", "", word)
        if word[:1].isupper() and word.isascii() and len(word) >= 3 and word.casefold() not in FUNCTION_WORDS:
            out.append(word)
    return out


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
        db = database_key(conn)
        cached = self._by_db.get(db)
        if cached is not None and cached.key == key:
            return cached
        with self._lock:
            rows = conn.execute(
                "SELECT ts_config::text, lexeme, sum(df)::int FROM lexeme_df WHERE ts_config::text = ANY(%s) "
                "GROUP BY 1, 2", (list(CYRILLIC_CONFIGS),)).fetchall()
            by: dict[str, list[tuple[str, str, int]]] = {}
            for config, lexeme, df in rows:
                if lexeme.isascii():
                    continue   # a Latin word inside Russian text is matched by the query's own words
                k = skeleton(lexeme)
                if len(k) >= 3:
                    by.setdefault(k, []).append((config, lexeme, df))
            lexicon = Lexicon(key, {k: tuple(sorted(v, key=lambda t: -t[2])) for k, v in by.items()}, {})
            self._by_db[db] = lexicon
        log.info("cross-script names: keyed %d Cyrillic lexemes", len(rows))
        return lexicon


LEXICON = LexiconCache()


# A name the library already holds in the query's own script is searched as it is: in a
# library half English, half Russian, an English question's "Warsaw" took the Russian
# articles' «Варшава» along (XQuAD mixed, English questions: nDCG@10 0.9242 against 0.9310)
_HELD_SQL = """
SELECT w.w, EXISTS (
    SELECT 1 FROM (SELECT DISTINCT ts_config FROM lexeme_df_totals WHERE ts_config::text <> ALL(%(cyrillic)s)) c
    JOIN LATERAL (SELECT 1 FROM postings p WHERE p.ts_config = c.ts_config
                  AND p.lexeme = ANY(tsvector_to_array(to_tsvector(c.ts_config, w.w))) LIMIT 1) x ON true)
FROM unnest(%(words)s::text[]) AS w(w)
"""


def _last_letter(key: str) -> int:
    """How many characters of a key the last Cyrillic letter of its word spelled: я and ю are
    two ("Katya" / «Катя»), other letters one."""
    return 2 if key[-2:] in ("ia", "iu") else 1


def other_script_names(conn: psycopg.Connection, text: str, *, skip: frozenset[str] | set[str] = frozenset()
                       ) -> dict[str, set[str]]:
    """config -> the library's Cyrillic lexemes for the Latin-lettered names of `text`
    ({} when it has none, or the library no Cyrillic vocabulary). `skip`: keys of words
    not to look up (the authors of the library's files: an author is seldom named in their
    own text, so "Blok" matched other writers' mentions of him, not his work)."""
    names = [w for w in name_words(text) if skeleton(w) not in skip]
    lexicon = LEXICON.get(conn) if names else None
    if lexicon is None:
        return {}
    names = [w for w, held in conn.execute(_HELD_SQL, {"words": names, "cyrillic": list(CYRILLIC_CONFIGS)})
             if not held]
    out: dict[str, set[str]] = {}
    for word in names:
        key = skeleton(word)
        for length in range(len(key), max(len(key) - MAX_CUT, 0), -1):
            if length < MIN_PREFIX and length < len(key) - _last_letter(key):
                break
            found = [(c, lex) for c, lex, _df in lexicon.by_skeleton.get(key[:length], ())
                     if key in lexicon.name_forms(conn, c, lex)]
            if found:
                for config, lexeme in found[:PER_WORD]:
                    out.setdefault(config, set()).add(lexeme)
                break
    return out
