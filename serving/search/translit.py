"""Names across scripts: the same Russian name as a person types it in Cyrillic or in
Latin letters, under any of the common transliteration schemes.

A library of Russian books is asked for «Чехов» and for "Chekhov", for «Каштанка» and
"Kashtanka", for «Горький» and "Gorky" / "Gorkiy" / "Gor'kii"; file names often carry
the author in Latin letters and the title in Cyrillic. Exact transliteration cannot
bridge these: the schemes differ (BGN/PCGN "Chekhov", ISO 9 "Čehov", scholarly "Čexov",
German "Tschechow"), and English spellings of well-known names follow none of them
("Gorky", "Herzen", "Tolstoy").

`skeleton` maps a word of either script to a lossy Latin key on which those spellings
agree: Cyrillic is transliterated (х as kh, ц as ts, я as ya ...), then both sides are
folded the same way - y and j read as i, the soft and hard signs dropped, ё / yo / ye
read as e, z and ts as one letter, a lone h as g (Herzen / Герцен, Hamlet / Гамлет),
doubled letters single. Two schemes lose: ISO 9's h for х (Čehov) and German spellings
(Tschechow) - a lone h is far more often an English г. Distinct names rarely share a key (the fold is coarser than spelling,
not than pronunciation), and a key is only ever compared with keys of names and words
the library actually holds.
"""

from __future__ import annotations

import re
import unicodedata

_CYRILLIC = {
    "а": "a", "б": "b", "в": "v", "г": "g", "д": "d", "е": "e", "ё": "e", "ж": "zh", "з": "z", "и": "i",
    "й": "y", "к": "k", "л": "l", "м": "m", "н": "n", "о": "o", "п": "p", "р": "r", "с": "s", "т": "t",
    "у": "u", "ф": "f", "х": "kh", "ц": "ts", "ч": "ch", "ш": "sh", "щ": "shch", "ъ": "", "ы": "y", "ь": "",
    "э": "e", "ю": "yu", "я": "ya",
    # Ukrainian and Belarusian letters
    "і": "i", "ї": "yi", "є": "ye", "ґ": "g", "ў": "u",
}

# Latin letters with diacritics of ISO 9 / scholarly transliteration, before accents are stripped
_DIACRITICS = {"č": "ch", "š": "sh", "ž": "zh", "ŝ": "shch", "ë": "e", "è": "e", "é": "e", "û": "yu",
               "â": "ya", "ǎ": "ya", "ĭ": "y", "ʹ": "", "ʺ": "", "'": "", "’": "", "ʼ": ""}

# Folds applied in order to a lower-case Latin spelling. Digraphs become one placeholder
# letter first so that the later single-letter folds cannot split them.
_FOLDS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), r) for p, r in (
    (r"tsch|tch", "C"),            # ч: Tschaikowsky, Tchaikovsky
    (r"shch|sch", "Q"),            # щ
    (r"ch|cz", "C"),               # ч: Chekhov, Czech-style
    (r"sh|sz", "S"),               # ш
    (r"zh|zs", "Z"),               # ж
    (r"kh|x", "X"),                # х (a Latin x is rarer than х spelled "x": Xarms / Хармс)
    (r"ts|tz|c(?=[eiy])", "T"),    # ц; a c before e/i/y reads as ts in most schemes
    (r"c", "k"),                   # any other c is a k (Nicolai / Николай)
    (r"z", "T"),                   # з and ц meet here: German-style Herzen / Герцен
    (r"ph", "f"), (r"w", "v"), (r"q", "k"),
    (r"(?<=[aeiouy])[jy]e|^[jy]e", "e"),   # е after a vowel or at the start: Dostoyevsky, Yeltsin
    (r"[jy]o", "e"),               # ё: Alyosha, Fyodor, Pyotr
    (r"[jy]", "i"),                # й, ы, и, and j/y of any scheme
    (r"h", "g"),                   # a lone h is г: Herzen, Hamlet, Hugo
    (r"(.)\1+", r"\1"),            # doubled letters (Anna, Gorkii)
))

_WORD = re.compile(r"[^\W\d_]+(?:['’ʼ][^\W\d_]+)*", re.UNICODE)


def to_latin(text: str) -> str:
    """Cyrillic letters of `text` transliterated (BGN/PCGN-like, without apostrophes), the rest kept."""
    out = []
    for ch in text:
        low = ch.lower()
        if low in _CYRILLIC:
            latin = _CYRILLIC[low]
            out.append(latin.capitalize() if ch != low and latin else latin)
        else:
            out.append(ch)
    return "".join(out)


def _strip_accents(text: str) -> str:
    text = "".join(_DIACRITICS.get(ch, ch) for ch in text)
    return "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))


def skeleton(word: str) -> str:
    """The lossy cross-script key of one word ('' for a word without letters)."""
    text = to_latin(word.casefold())
    text = _strip_accents(text)
    text = "".join(ch for ch in text if "a" <= ch <= "z")
    for pattern, repl in _FOLDS:
        text = pattern.sub(repl, text)
    return text


def words(text: str) -> list[str]:
    """The words of `text` (letters, with inner apostrophes: Gor'kii)."""
    return _WORD.findall(text)


# English function words: their keys would match nothing across scripts, and in a
# query they would count as shared words with every English name holding them
FUNCTION_WORDS = frozenset("""
a an the and or but nor of to in on at by for from with without into onto over under about after before
between through during against among as than then so if whether because while who whom whose what which
when where why how that this these those there here is are was were be been being am do does did done
doing have has had having can could shall should will would may might must not no yes it its he him his
she her hers they them their theirs we us our you your i me my mine one ones any some all each every
other another such same very too also just only own off out up down again once more most much many few
""".split())


def skeletons(text: str, *, min_length: int = 3) -> set[str]:
    """The keys of the words of `text` at least `min_length` letters long, English
    function words left out."""
    out = set()
    for word in words(text):
        if word.casefold() in FUNCTION_WORDS:
            continue
        key = skeleton(word)
        if len(key) >= min_length:
            out.add(key)
    return out
