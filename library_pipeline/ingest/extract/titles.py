"""Document titles (from metadata or the file name) and the outline heading each page sits under."""

from __future__ import annotations

import re
from pathlib import Path

from library_pipeline.ingest.extract.common import Page
from serving.search.titles import author_from_filename  # noqa: F401  (one rule for readers and extractors)


_JUNK_TITLE = re.compile(r"^(untitled|microsoft word\b|title\b|document\d*$|\S+\.(docx?|pdf|tex|dvi|indd|rtf|odt)$)",
                         re.IGNORECASE)


def clean_title(title: str | None) -> str | None:
    title = " ".join((title or "").split())
    if not title or not any(ch.isalpha() for ch in title) or _JUNK_TITLE.match(title):
        return None
    if " " not in title and "_" in title:  # an identifier such as "fr_rasterized"
        return None
    return title


def title_from_filename(path: Path) -> str:
    stem = path.stem
    if " " not in stem:
        stem = re.sub(r"[_.]+|(?<=[A-Za-z])-|-(?=[A-Za-z])", " ", stem)
    return " ".join(stem.replace("_", " ").split()) or path.name


def clean_author(author: str | None) -> str | None:
    author = " ".join((author or "").split())
    if not author or not any(ch.isalpha() for ch in author) or _JUNK_TITLE.match(author) or len(author) > 120:
        return None
    return author


def _short_title(title: str) -> bool:
    # "I.", "II.", "1.2" say nothing without their parent
    return re.search(r"[^\W\d_]{3}", title) is None


def set_headings(pages: list[Page], outline: list[dict]) -> None:
    """Deepest entry starting on or before each page (outline order, levels as a stack)."""
    entries = sorted((e for e in outline if e["page"] >= 1), key=lambda e: e["page"])  # stable
    stack: list[dict] = []
    i = 0
    for page in sorted(pages, key=lambda p: p.page_no):
        while i < len(entries) and entries[i]["page"] <= page.page_no:
            entry = entries[i]
            while stack and stack[-1]["level"] >= entry["level"]:
                stack.pop()
            stack.append(entry)
            i += 1
        page.heading = stack[-1]["title"] if stack else None
        if page.heading and len(stack) > 1 and _short_title(page.heading):
            page.heading = f"{stack[-2]['title']} › {page.heading}"
