"""Text extraction for one library file: PDF (PyMuPDF, Tesseract for image-only
pages), EPUB (EbookLib + BeautifulSoup), plain text and Markdown.

Pure: no database, no Dagster. Every failure a user can cause (an empty, huge,
corrupt, encrypted or binary file) surfaces as `ExtractionError` with a short
reason that is stored on the document row, never as a raw stack trace.

One module per format (pdf, epub, text), plus the language, the titles and
headings, and the boilerplate split; this module dispatches by suffix.
"""

from __future__ import annotations

import logging
from pathlib import Path

from library_pipeline.ingest.extract.boilerplate import BOILERPLATE, split_boilerplate
from library_pipeline.ingest.extract.common import (
    SUPPORTED_SUFFIXES,
    Extracted,
    ExtractionError,
    Page,
    short_reason,
)
from library_pipeline.ingest.extract.epub import extract_epub
from library_pipeline.ingest.extract.language import detect_language
from library_pipeline.ingest.extract.pdf import extract_pdf
from library_pipeline.ingest.extract.text import decode_text, extract_text
from library_pipeline.ingest.extract.titles import title_from_filename

log = logging.getLogger(__name__)


def extract_file(path: Path, *, ocr_languages: str = "rus+eng", max_bytes: int | None = None,
                 ocr: bool = True) -> Extracted:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ExtractionError(f"unsupported file type {suffix or '(no suffix)'!r}; "
                              f"supported: {', '.join(sorted(SUPPORTED_SUFFIXES))}")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ExtractionError("file not found (moved or deleted before it could be read)") from None
    except PermissionError:
        raise ExtractionError("permission denied reading the file") from None
    if not path.is_file():
        raise ExtractionError("not a regular file")
    if size == 0:
        raise ExtractionError("empty file (0 bytes)")
    if max_bytes is not None and size > max_bytes:
        raise ExtractionError(f"file too large: {size / 1e6:.1f} MB exceeds the limit of {max_bytes / 1e6:.1f} MB")
    try:
        if suffix == ".pdf":
            result = extract_pdf(path, ocr_languages=ocr_languages, ocr=ocr)
        elif suffix == ".epub":
            result = extract_epub(path)
        else:
            result = extract_text(path, suffix[1:])
    except ExtractionError:
        raise
    except FileNotFoundError:
        raise ExtractionError("file not found (moved or deleted while being read)") from None
    except MemoryError:
        raise ExtractionError("file too large to extract in memory") from None
    except Exception as exc:  # a parser bug or damage nobody foresaw: still one readable line
        log.exception("extraction of %s failed unexpectedly", path.name)
        raise ExtractionError(f"could not extract text ({type(exc).__name__}: {short_reason(exc)})") from None
    if not any(p.text.strip() for p in result.pages):
        raise ExtractionError({"pdf": "no text found in the PDF" + ("" if ocr else " (OCR is disabled)"),
                               "epub": "EPUB has no readable text content"}.get(result.format, "file contains no text"))
    # a file name that is not valid UTF-8 reaches the title as surrogate escapes,
    # which Postgres cannot store; escape them as the stored path does
    result.title = result.title.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") \
        if result.title else result.title
    result.language = detect_language("\n".join(p.text for p in result.pages))
    log.info("extracted %s: %s, %d pages (%d OCR), %d outline entries, language %s", path.name,
             result.format, len(result.pages), result.ocr_pages, len(result.outline), result.language)
    return result


__all__ = ["Page", "Extracted", "ExtractionError", "SUPPORTED_SUFFIXES", "extract_file", "detect_language",
           "decode_text", "title_from_filename", "split_boilerplate", "BOILERPLATE"]
