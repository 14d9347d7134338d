"""EPUB (EbookLib + BeautifulSoup).

EPUB "pages" are TOC sections, not whole spine documents: Project Gutenberg's
Moby Dick packs 146 TOC entries into 29 spine files (Children's Literature packs
22 into one), so one Page per spine file would give most chunks the wrong
heading. Each spine document is cut at the TOC anchors that point into it;
page_no numbers those sections 1..N in reading order and `outline[].page` uses
the same numbering. The label is the section's href (file plus #fragment).
"""

from __future__ import annotations

import logging
import posixpath
import re
import warnings
import zipfile
from pathlib import Path
from urllib.parse import unquote

from library_pipeline.ingest.extract.common import Extracted, ExtractionError, Page, short_reason
from library_pipeline.ingest.extract.titles import (author_from_filename, clean_author, clean_title, set_headings,
                                                    title_from_filename)

log = logging.getLogger("library_pipeline.ingest.extract")


_BLOCK_TAGS = ["p", "div", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "tr", "table", "ul", "ol",
               "dl", "blockquote", "pre", "section", "article", "header", "footer", "aside", "figure",
               "figcaption", "hr", "nav", "address", "center", "body"]
_MARK = re.compile("\ue000(\\d+)\ue001")


def _toc_entries(toc, level: int = 1) -> list[tuple[int, str, str]]:
    """EbookLib's nested TOC as (level, title, href), in order."""
    out: list[tuple[int, str, str]] = []
    for node in toc:
        head, children = node if isinstance(node, (tuple, list)) and len(node) == 2 else (node, [])
        linked = bool(getattr(head, "href", None))
        if linked:
            out.append((level, " ".join((head.title or "").split()), head.href))
        out.extend(_toc_entries(children, level + 1 if linked else level))
    return out


def _html_text(soup) -> str:
    for tag in soup(["script", "style", "head", "title", "svg", "math"]):
        tag.decompose()
    for br in soup.find_all("br"):
        br.replace_with("\n")
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_before("\n\n")
        tag.append("\n\n")
    for cell in soup.find_all(["td", "th"]):
        cell.append(" ")
    text = soup.get_text()
    text = re.sub(r"[ \t\r\f\v\u00a0]+", " ", text)
    text = re.sub(r" ?\n ?", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# EbookLib reads every entry of the archive into memory. A 1 MB EPUB whose
# chapter inflates to 1 GiB of spaces took the extracting process to 2.1 GB RSS
# (benchmarks/hostile_corpus.py). Real EPUBs are far below this ratio: XHTML deflates
# ~3-5x, images not at all; the sample library's books unpack to 1.1-3.4x.
EPUB_MAX_RATIO = 20
EPUB_RATIO_FLOOR_BYTES = 64 * 1024 * 1024  # below this, any ratio is harmless
EPUB_MAX_UNPACKED_BYTES = 2 * 1024 * 1024 * 1024


def _refuse_zip_bomb(path: Path) -> None:
    """Refuse an archive whose entries unpack to far more than it holds, from the
    central directory's sizes. Sizes that lie are caught by zipfile itself: it stops
    at the declared size and fails the CRC check."""
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        raise ExtractionError("broken EPUB: not a readable zip archive") from None
    packed = max(1, path.stat().st_size)
    if unpacked > EPUB_MAX_UNPACKED_BYTES or (unpacked > EPUB_RATIO_FLOOR_BYTES
                                              and unpacked > EPUB_MAX_RATIO * packed):
        raise ExtractionError(f"EPUB refused as a decompression bomb: {packed / 1e6:.1f} MB unpacks to "
                              f"{unpacked / 1e6:,.0f} MB")


def extract_epub(path: Path) -> Extracted:
    import ebooklib
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning
    from ebooklib import epub

    _refuse_zip_bomb(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            book = epub.read_epub(str(path), options={"ignore_ncx": False})
    except FileNotFoundError:
        raise
    except Exception as exc:  # BadZipFile, EpubException("Bad Zip file"), KeyError for a missing OPF, lxml errors
        if isinstance(exc, zipfile.BadZipFile) or "Bad Zip" in str(exc):
            raise ExtractionError("broken EPUB: not a readable zip archive") from None
        raise ExtractionError(f"broken EPUB ({short_reason(exc).strip(chr(34) + chr(39))})") from None
    titles = book.get_metadata("DC", "title")
    title = clean_title(titles[0][0] if titles else None)

    spine: list[tuple[str, object]] = []  # (normalised href, item)
    for idref, *_ in book.spine:
        item = book.get_item_with_id(idref)
        if item is not None and item.get_type() in (ebooklib.ITEM_DOCUMENT, ebooklib.ITEM_NAVIGATION):
            spine.append((posixpath.normpath(unquote(item.get_name())), item))
    by_name = {name: i for i, (name, _) in enumerate(spine)}
    by_base = {posixpath.basename(name): i for i, (name, _) in enumerate(spine)}

    # TOC entry -> (spine index, fragment)
    anchors: dict[int, list[tuple[int, str]]] = {}
    entries = _toc_entries(book.toc)
    for k, (_, _, href) in enumerate(entries):
        file_part, _, frag = unquote(href).partition("#")
        name = posixpath.normpath(file_part) if file_part else ""
        idx = by_name.get(name, by_base.get(posixpath.basename(name)))
        if idx is None:
            log.debug("%s: TOC entry %r points outside the spine", path.name, href)
            continue
        anchors.setdefault(idx, []).append((k, frag))

    sections: list[tuple[str, str, list[int]]] = []  # (label, text, TOC entries starting here)
    for idx, (name, item) in enumerate(spine):
        try:
            with warnings.catch_warnings():
                # XHTML through the HTML parser is deliberate: it forgives broken markup
                warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
                soup = BeautifulSoup(item.get_content(), "lxml")
        except Exception as exc:
            log.warning("%s: unreadable spine item %s skipped (%s)", path.name, name, short_reason(exc))
            continue
        at_start: list[int] = []
        fragments: dict[int, str] = {}
        for k, frag in anchors.get(idx, []):
            target = (soup.find(id=frag) or soup.find(attrs={"name": frag})) if frag else None
            if target is None:
                at_start.append(k)
            else:
                target.insert_before(f"\ue000{k}\ue001")
                fragments[k] = frag
        parts = _MARK.split(_html_text(soup))
        sections.append((name, parts[0], at_start))
        for j in range(1, len(parts), 2):
            k = int(parts[j])
            sections.append((f"{name}#{fragments[k]}", parts[j + 1], [k]))

    # drop empty sections; their TOC entries move to the next section with text
    pages: list[Page] = []
    entry_page: dict[int, int] = {}
    pending: list[int] = []
    for label, text, starts in sections:
        pending.extend(starts)
        if text.strip():
            pages.append(Page(len(pages) + 1, text.strip(), label=label))
            entry_page.update((k, len(pages)) for k in pending)
            pending = []
    outline = [{"level": lvl, "title": t, "page": entry_page[k]}
               for k, (lvl, t, _) in enumerate(entries) if k in entry_page and t]
    set_headings(pages, outline)
    creators = book.get_metadata("DC", "creator")
    author = clean_author(creators[0][0] if creators else None) or author_from_filename(path)
    return Extracted("epub", title or title_from_filename(path), pages, outline, None, author)
