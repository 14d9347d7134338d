"""Chapters and inner works by name: "Тарас Бульба глава IX", «Мать глава XV», "Chapter
12 of Moby Dick", «На дне акт третий», a story of a collection by its own title.

Passages carry the heading they sit under (an EPUB's or PDF's outline entry; for plain
text, the text's own headings: library_pipeline/ingest/extract/text.py). The title lane
(doclanes.py) finds the work by its name; this module says which of its sections the
query asks for, so the lane hands fusion that section's opening passage instead of
whichever passage of the work the content lanes liked best.

Numbers are compared as values: IX, 9, «девятая», "ninth" are one chapter, and the word
before a number says what it counts (a «книга третья» is not chapter III).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# what a number counts, by the word before it
# (the Russian words also as typed in Latin letters: "glava IX")
_KINDS = {
    "chapter": r"глав\w*|chapter|chap\.?|ch\.|glav\w*",
    "part": r"част\w*|part|chast\w*",
    "book": r"книг\w*|book|том\w*|volume|vol\.?|knig\w*",
    "act": r"акт\w*|действи\w*|act|akt\w*|deistvi\w*|deystvi\w*",
    "scene": r"явлени\w*|картин\w*|сцен\w*|scene|yavleni\w*",
    "song": r"песн\w*|canto",
}
_KIND_WORD = re.compile(r"^(?:%s)$" % "|".join(f"(?P<{k}>{v})" for k, v in _KINDS.items()), re.IGNORECASE)

_ROMAN = re.compile(r"^M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})$")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}

# ordinal and cardinal words, by stem; longer stems first (пятнадцат before пят)
_WORD_NUMBERS = sorted({
    "перв": 1, "втор": 2, "трет": 3, "четверт": 4, "четвёрт": 4, "пят": 5, "шест": 6, "седьм": 7, "восьм": 8,
    "девят": 9, "десят": 10, "одиннадцат": 11, "двенадцат": 12, "тринадцат": 13, "четырнадцат": 14,
    "пятнадцат": 15, "шестнадцат": 16, "семнадцат": 17, "восемнадцат": 18, "девятнадцат": 19, "двадцат": 20,
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "one": 1, "two": 2, "three": 3, "four": 4,
    "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}.items(), key=lambda kv: -len(kv[0]))
_EXACT_ENGLISH = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}

_TOKEN = re.compile(r"[^\W_]+\.?", re.UNICODE)
MAX_CHAPTER = 300   # a larger number is a year or a page, not a chapter


@dataclass(frozen=True)
class Numeral:
    kind: str | None      # "chapter", "part", "book", "act", "scene", "song"; None: a bare number
    value: int
    words: tuple[str, ...]  # the query words it was read from (the kind word and the number)


def roman_value(token: str) -> int | None:
    """The value of an upper-case Roman numeral, or None."""
    if not token or not _ROMAN.match(token):
        return None
    total = 0
    for a, b in zip(token, token[1:] + " "):
        v = _ROMAN_VALUES[a]
        total += -v if b != " " and _ROMAN_VALUES[b] > v else v
    return total or None


def _word_value(token: str) -> int | None:
    low = token.casefold().rstrip(".")
    if low.isdigit():
        value = int(low)
        return value if 0 < value <= MAX_CHAPTER else None
    if low in _EXACT_ENGLISH:
        return dict(_WORD_NUMBERS)[low]
    for stem, value in _WORD_NUMBERS:
        if low.startswith(stem) and stem not in _EXACT_ENGLISH and len(low) - len(stem) <= 4:
            return value
    return None


def _kind(token: str) -> str | None:
    match = _KIND_WORD.match(token.rstrip(".") if not token.endswith("ch.") else token)
    if match is None:
        return None
    return next(k for k, v in match.groupdict().items() if v)


def numerals(text: str, *, in_heading: bool = False) -> list[Numeral]:
    """The numbers `text` gives with what they count: «глава IX» (chapter, 9), "act three"
    (act, 3), a bare upper-case Roman numeral after a title ("Сказки об Италии IX"). In a
    query a bare Arabic number or number word counts only after a kind word (a year or "one"
    is not a chapter); in a heading (`in_heading`) every numeral does."""
    tokens = _TOKEN.findall(text)
    out: list[Numeral] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        kind = _kind(token)
        if kind is not None and i + 1 < len(tokens):
            nxt = tokens[i + 1].rstrip(".")
            value = roman_value(nxt.upper()) if nxt.upper() == nxt or len(nxt) <= 4 else None
            value = value or _word_value(nxt)
            if value:
                out.append(Numeral(kind, value, (token, tokens[i + 1])))
                i += 2
                continue
        if kind is not None and i > 0:
            # «часть вторая» as «вторая часть»: the number before the word
            value = _word_value(tokens[i - 1])
            if value and (not out or tokens[i - 1] not in out[-1].words):
                out.append(Numeral(kind, value, (tokens[i - 1], token)))
                i += 1
                continue
        bare = token.rstrip(".")
        value = roman_value(bare) if len(bare) >= 2 or in_heading else None
        if value is None and in_heading:
            value = _word_value(bare) if bare.isdigit() else None
        if value:
            out.append(Numeral(None, value, (token,)))
        i += 1
    return out


def _fits(want: Numeral, have: Numeral) -> bool:
    if want.value != have.value:
        return False
    if want.kind is None or have.kind is None:
        # a bare numeral in a heading is a chapter (or a piece) of its work
        return want.kind in (None, "chapter") or have.kind == want.kind
    return want.kind == have.kind


def heading_fits(wanted: list[Numeral], heading: str) -> bool:
    """Every number the query asks for is in the heading, counting the same thing."""
    have = numerals(heading, in_heading=True)
    return bool(have) and all(any(_fits(w, h) for h in have) for w in wanted)


def strip_numerals(text: str, found: list[Numeral]) -> str:
    """`text` without the words its numerals were read from (the name part of the query)."""
    drop = {w for n in found for w in n.words}
    return " ".join(t for t in _TOKEN.findall(text) if t not in drop)
