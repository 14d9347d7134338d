"""The language of a query and the script of a passage, for fusion's per-query trust
(serving/search/fusion.py): an English-only embedder is noise for a Russian query,
and keyword matches across scripts are noise (a Russian question shares only
numbers and Latin names with an English paragraph).

Query language: py3langid restricted to the languages the library stems (schema.sql
ts_config_for_language) plus Ukrainian, with a confidence floor for Latin-script text:
a short English query ("ADHD gene variants") is often misread as Dutch or Danish
with a low probability, and misreading English as another language would switch off
the English-only model for it. So a Latin-script query is English unless langid is
sure; a Cyrillic one is Russian unless langid is sure of Ukrainian (or another).
"""

from __future__ import annotations

import functools
import re

LANGUAGES = ("en", "ru", "uk", "de", "fr", "es", "it", "pt", "nl", "sv", "no", "da", "fi", "hu", "ro", "tr", "pl",
             "cs")
# a Latin-script query is another language than English only at this langid probability
CONFIDENT = 0.95

# ISO 639-1 codes written in Cyrillic, and in scripts that are neither Latin nor Cyrillic
# (everything else is written in Latin letters)
CYRILLIC_LANGUAGES = frozenset({"ru", "uk", "be", "bg", "sr", "mk", "kk", "ky", "tg", "mn"})
OTHER_SCRIPT_LANGUAGES = frozenset({"el", "zh", "ja", "ko", "ar", "he", "fa", "ur", "hi", "bn", "th", "ka", "hy",
                                    "ta", "te", "ml", "kn", "gu", "pa", "mr", "ne", "si", "km", "lo", "my", "am"})

_LETTER = re.compile(r"[^\W\d_]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")


def script(text: str, limit: int = 600) -> str:
    """'cyrillic', 'latin', 'other' or 'none' (no letters): the majority script of the
    first `limit` characters' letters."""
    head = text[:limit]
    if head.isascii():
        # the common case, answered without the Unicode letter class: a search scripts
        # ~140 passages, and that took 14 ms of a 1M-passage search's 110 ms
        return "latin" if _ASCII_LETTER.search(head) else "none"
    letters = _LETTER.findall(head)
    if not letters:
        return "none"
    cyr = sum(1 for ch in letters if "\u0400" <= ch <= "\u04ff")
    latin = sum(1 for ch in letters if ch < "\u0250")
    if cyr * 2 > len(letters):
        return "cyrillic"
    if latin * 2 > len(letters):
        return "latin"
    return "other"


def word_scripts(text: str) -> set[str]:
    """The scripts of a query's words ('latin', 'cyrillic', 'other'): "Пугачев Queequeg"
    names a passage in either script by its words, whatever its majority script."""
    found = {script(word) for word in text.split() if len(_LETTER.findall(word)) >= 2}
    return found - {"none"}


def language_script(language: str | None) -> str | None:
    """The script an ISO 639-1 language is written in ('latin', 'cyrillic', 'other'), as
    `script` names a text's; None for no or an undetermined language."""
    if not language or language == "und":
        return None
    if language in CYRILLIC_LANGUAGES:
        return "cyrillic"
    return "other" if language in OTHER_SCRIPT_LANGUAGES else "latin"


@functools.lru_cache(maxsize=1)
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages(list(LANGUAGES))
    return ident


@functools.lru_cache(maxsize=4096)
def query_language(text: str) -> str:
    """ISO 639-1 code of a query ('en' when unsure in Latin script, 'ru' in Cyrillic);
    'und' for text in another script (CJK, Arabic, ...) or without letters."""
    sc = script(text)
    if sc == "none":
        return "en"
    if sc == "other":
        return "und"
    lang, prob = _identifier().classify(text)
    if sc == "cyrillic":
        return lang if lang in ("ru", "uk") and prob >= CONFIDENT else "ru"
    if lang in ("ru", "uk") or prob < CONFIDENT:
        return "en"
    return lang
