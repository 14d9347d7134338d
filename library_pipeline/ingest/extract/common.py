"""What every extractor returns, and how one fails."""

from __future__ import annotations

from dataclasses import dataclass, field

# The file types the library reads: the folder scan registers only these, and
# extract_file refuses anything else with this list.
SUPPORTED_SUFFIXES = (".pdf", ".epub", ".txt", ".md")


class ExtractionError(Exception):
    """A readable, user-facing reason this one file could not be extracted."""


@dataclass
class Page:
    page_no: int            # 1-based (PDF page; EPUB TOC section or txt heading's section, in reading order; 1 for md)
    text: str
    ocr: bool = False       # text came from Tesseract
    label: str | None = None    # PDF page label, or EPUB href (file#fragment)
    heading: str | None = None  # deepest outline entry starting on or before this page


@dataclass
class Extracted:
    format: str              # "pdf" | "epub" | "txt" | "md"
    title: str | None
    pages: list[Page]
    outline: list[dict] = field(default_factory=list)  # [{"level", "title", "page"}]
    language: str | None = None
    author: str | None = None   # metadata (EPUB dc:creator, PDF Author), else the file name's "Author - "

    @property
    def ocr_pages(self) -> int:
        return sum(1 for p in self.pages if p.ocr)


def short_reason(exc: BaseException) -> str:
    """An exception as one line of at most 160 characters, for a document's error."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]
