"""Text rules every passage writer of the pipeline shares (library files, vault notes,
summary trees): a heading as stored, and the tokens a passage's content may use
beside its "title — heading" prefix."""

from __future__ import annotations

from serving.embedding import Embedder, embed_text_for_passage


def prefix_budget(embedder: Embedder, title: str | None) -> int:
    """Tokens a chunk's content may use once the contextual prefix is added.
    Headings vary per chunk; reserve room for a typical one (measured: headings
    in the sample books are under 24 MiniLM tokens) and clip longer ones."""
    reserve = embedder.count_tokens(embed_text_for_passage(title, None, "")) + 24
    return max(32, embedder.max_tokens - reserve)


def clip_heading(heading: str | None, limit: int = 120) -> str | None:
    if heading is None:
        return None
    heading = " ".join(heading.split())
    return heading if len(heading) <= limit else heading[: limit - 1] + "…"
