"""The gender a person name carries, so that resolution never joins a woman and a man.

Two signals, both general:
- a form of address: "Miss Turner", "Mrs. Hudson", «госпожа» are women; "Mr. Holmes",
  "Lord St. Simon", «господин» are men. Stripping the form at extraction lost this:
  in the Sherlock Holmes stories "Miss Turner" (Alice, the daughter) became "Turner"
  and merged into "John Turner", her father. So gendered forms stay in the extracted
  name ("Miss Turner") and resolution reads them here; forms without a gender
  (Dr., Colonel, Inspector) are still stripped.
- the first name of a name of two words or more: English first names from the US
  Census 1990 first-name frequency files (public domain data, shipped by the MIT
  licensed `names` package as dist.male.first / dist.female.first: 1,219 male and
  4,275 female names with their frequency); Russian first names from pymorphy3's
  dictionary (the `Name` tag carries masc / femn).

A single word is never read as a first name: "Hunter" is in the male list and is
Violet Hunter's surname.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from pathlib import Path

# forms of address, as kg_normalise_name leaves them (lower case, no full stop)
MALE_FORMS = frozenset({"mr", "mister", "sir", "lord", "monsieur", "master", "господин", "сударь", "князь",
                        "граф", "барон"})
FEMALE_FORMS = frozenset({"mrs", "ms", "miss", "madam", "madame", "mme", "mlle", "lady", "dame", "countess",
                          "госпожа", "сударыня", "княгиня", "графиня", "баронесса"})
GENDERED_FORMS = MALE_FORMS | FEMALE_FORMS
# a first name is one gender when the census counts it at least this many times more
# often for it than for the other ("James": 3.318% of men, 0.010% of women)
RATIO = 4.0
_LOCK = threading.Lock()


def form_gender(word: str) -> str | None:
    """'m' / 'f' for a gendered form of address (any case, with or without its full stop)."""
    w = word.lower().rstrip(".")
    return "m" if w in MALE_FORMS else "f" if w in FEMALE_FORMS else None


@lru_cache(maxsize=1)
def _census() -> dict[str, str]:
    import names

    folder = Path(names.__file__).parent
    freq: dict[str, dict[str, float]] = {}
    for gender, file in (("m", "dist.male.first"), ("f", "dist.female.first")):
        for line in (folder / file).read_text(encoding="ascii").splitlines():
            parts = line.split()
            if len(parts) >= 2:
                freq.setdefault(parts[0].lower(), {})[gender] = float(parts[1])
    out = {}
    for name, f in freq.items():
        m, w = f.get("m", 0.0), f.get("f", 0.0)
        if m >= RATIO * w:
            out[name] = "m"
        elif w >= RATIO * m:
            out[name] = "f"
    return out


_MORPH: list = []


def _morph():
    with _LOCK:
        if not _MORPH:
            import pymorphy3

            _MORPH.append(pymorphy3.MorphAnalyzer(lang="ru"))
        return _MORPH[0]


def first_name_gender(word: str) -> str | None:
    word = word.lower()
    if re.search(r"[а-яё]", word):
        genders = {p.tag.gender for p in _morph().parse(word) if "Name" in p.tag and p.score >= 0.1}
        genders.discard(None)
        if genders == {"masc"}:
            return "m"
        if genders == {"femn"}:
            return "f"
        return None
    return _census().get(word)


@lru_cache(maxsize=1)
def _census_names() -> frozenset[str]:
    import names

    folder = Path(names.__file__).parent
    return frozenset(line.split()[0].lower() for file in ("dist.male.first", "dist.female.first")
                     for line in (folder / file).read_text(encoding="ascii").splitlines() if line.split())


_PATRONYMIC = re.compile(r"(?:ович|евич|овна|евна|ична|инична|ич|ыч)$")


def is_first_name(word: str) -> bool:
    """A first name of either gender (pymorphy3's Name tag; the US census lists for Latin)."""
    word = word.lower()
    if re.search(r"[а-яё]", word):
        return any("Name" in p.tag and p.score >= 0.1 for p in _morph().parse(word))
    return word in _census_names()


def is_patronymic(word: str) -> bool:
    word = word.lower()
    if not re.search(r"[а-яё]", word):
        return False
    return bool(_PATRONYMIC.search(word)) or any("Patr" in p.tag and p.score >= 0.1 for p in _morph().parse(word))


def name_gender(name_norm: str) -> str | None:
    """Gender of a normalised person name: its form of address, else the first name of
    a name of two words or more; None when neither tells."""
    words = name_norm.split()
    if not words:
        return None
    if words[0] in GENDERED_FORMS:
        return form_gender(words[0])
    if len(words) >= 2 and len(words[0]) > 1:
        return first_name_gender(words[0])
    return None


def compatible(a: str | None, b: str | None) -> bool:
    return a is None or b is None or a == b
