"""The language of an extracted text (py3langid over a sample), or None when too
little of it is letters to tell."""

from __future__ import annotations

from functools import lru_cache

LANG_SAMPLE_CHARS = 20_000
LANG_MIN_LETTERS = 40


@lru_cache(maxsize=1)
def _lang_identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def detect_language(text: str) -> str | None:
    """ISO 639-1 code of the dominant language, or None for too little text.
    Samples ten windows spread over the text (≤ 20k chars) so a long English
    licence at the start of a Russian book cannot decide alone."""
    if not text or sum(ch.isalpha() for ch in text[:LANG_SAMPLE_CHARS * 2]) < LANG_MIN_LETTERS:
        return None
    if len(text) > LANG_SAMPLE_CHARS:
        n, width = 10, LANG_SAMPLE_CHARS // 10
        step = (len(text) - width) / (n - 1)
        text = " ".join(text[int(i * step): int(i * step) + width] for i in range(n))
    lang, confidence = _lang_identifier().classify(text)
    return lang if confidence >= 0.3 else None
