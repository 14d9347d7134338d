"""Text extraction for one library file: PDF (PyMuPDF, Tesseract for image-only
pages), EPUB (EbookLib + BeautifulSoup), plain text and Markdown.

Pure: no database, no Dagster. Every failure a user can cause (an empty, huge,
corrupt, encrypted or binary file) surfaces as `ExtractionError` with a short
reason that is stored on the document row, never as a raw stack trace.

EPUB "pages" are TOC sections, not whole spine documents: Project Gutenberg's
Moby Dick packs 146 TOC entries into 29 spine files (Children's Literature packs
22 into one), so one Page per spine file would give most chunks the wrong
heading. Each spine document is cut at the TOC anchors that point into it;
page_no numbers those sections 1..N in reading order and `outline[].page` uses
the same numbering. The label is the section's href (file plus #fragment).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import shutil
import subprocess
import warnings
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

log = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = {".pdf", ".epub", ".txt", ".md"}
TESSDATA_DIR = "/usr/share/tesseract-ocr/5/tessdata"
# A page with fewer characters than this but an image covering a quarter of it is a scan.
OCR_MIN_CHARS = 50
OCR_MIN_IMAGE_AREA = 0.25
# 300 dpi is what Tesseract is tuned for; the long side is capped so a poster-sized
# page cannot allocate gigabytes.
OCR_DPI = 300
OCR_MAX_PIXELS = 6000
OCR_TIMEOUT_S = 300
LANG_SAMPLE_CHARS = 20_000
LANG_MIN_LETTERS = 40


class ExtractionError(Exception):
    """A readable, user-facing reason this one file could not be extracted."""


@dataclass
class Page:
    page_no: int            # 1-based (PDF page; EPUB TOC section in reading order; 1 for txt/md)
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

    @property
    def ocr_pages(self) -> int:
        return sum(1 for p in self.pages if p.ocr)


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
            result = _extract_pdf(path, ocr_languages=ocr_languages, ocr=ocr)
        elif suffix == ".epub":
            result = _extract_epub(path)
        else:
            result = _extract_text(path, suffix[1:])
    except ExtractionError:
        raise
    except FileNotFoundError:
        raise ExtractionError("file not found (moved or deleted while being read)") from None
    except MemoryError:
        raise ExtractionError("file too large to extract in memory") from None
    except Exception as exc:  # a parser bug or damage nobody foresaw: still one readable line
        log.exception("extraction of %s failed unexpectedly", path.name)
        raise ExtractionError(f"could not extract text ({type(exc).__name__}: {_short(exc)})") from None
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


# --- language -------------------------------------------------------------------

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


# --- titles and outline headings ----------------------------------------------

_JUNK_TITLE = re.compile(r"^(untitled|microsoft word\b|title\b|document\d*$|\S+\.(docx?|pdf|tex|dvi|indd|rtf|odt)$)",
                         re.IGNORECASE)


def _clean_title(title: str | None) -> str | None:
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


def _short_title(title: str) -> bool:
    # "I.", "II.", "1.2" say nothing without their parent
    return re.search(r"[^\W\d_]{3}", title) is None


def _set_headings(pages: list[Page], outline: list[dict]) -> None:
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


# --- PDF ------------------------------------------------------------------------

def _extract_pdf(path: Path, *, ocr_languages: str, ocr: bool) -> Extracted:
    import pymupdf

    try:
        doc = pymupdf.open(path, filetype="pdf")
    except Exception as exc:  # FileDataError, RuntimeError, ValueError depending on the damage
        if isinstance(exc, (FileNotFoundError, pymupdf.FileNotFoundError)):
            raise FileNotFoundError(path.name) from None
        if "Failed to open" in str(exc):  # MuPDF's wording names the full path; say what it means
            raise ExtractionError("corrupt or unreadable PDF: not a valid PDF file") from None
        raise ExtractionError(f"corrupt or unreadable PDF ({_short(exc)})") from None
    with doc:
        if doc.needs_pass and not doc.authenticate(""):
            raise ExtractionError("encrypted PDF: a password is needed to open it")
        if doc.page_count == 0:
            raise ExtractionError("corrupt PDF: no pages could be read")
        title = _clean_title((doc.metadata or {}).get("title"))
        try:
            outline = [{"level": int(lvl), "title": " ".join(str(t).split()), "page": int(pg)}
                       for lvl, t, pg, *_ in doc.get_toc(simple=True)
                       if 1 <= int(pg) <= doc.page_count and str(t).strip()]
        except Exception as exc:
            log.warning("%s: unreadable outline ignored (%s)", path.name, _short(exc))
            outline = []
        pages: list[Page] = []
        try:
            for page in doc:
                label = _label(page)
                text = _pdf_page_text(page, label)
                ocr_text = ""
                if ocr and len(text.strip()) < OCR_MIN_CHARS and _image_coverage(page) >= OCR_MIN_IMAGE_AREA:
                    ocr_text = _ocr_page(page, ocr_languages)
                used = len(ocr_text.strip()) > len(text.strip())
                pages.append(Page(page.number + 1, ocr_text if used else text, ocr=used, label=label))
        except ExtractionError:
            raise
        except Exception as exc:
            raise ExtractionError(f"corrupt PDF: page {len(pages) + 1} could not be read ({_short(exc)})") from None
    _set_headings(pages, outline)
    return Extracted("pdf", title or title_from_filename(path), pages, outline, None)


def _label(page) -> str | None:
    try:
        return page.get_label() or None
    except Exception:  # a broken /PageLabels tree costs the labels, not the text
        return None


def _pdf_page_text(page, label: str | None) -> str:
    # Blocks joined by a blank line give the chunker paragraph boundaries; lines
    # inside a block keep their breaks (code listings, tables).
    blocks = page.get_text("blocks", sort=False)
    parts = [b[4].strip() for b in blocks if b[6] == 0 and b[4].strip()]
    # the printed page number as a block of its own is furniture, not text: it
    # would end a chapter's last chunk as a stray "65"
    if label:
        while parts and parts[-1] == label:
            parts.pop()
        while parts and parts[0] == label:
            parts.pop(0)
    return "\n\n".join(parts)


def _image_coverage(page) -> float:
    import pymupdf

    covered = sum(abs(pymupdf.Rect(info["bbox"]) & page.rect) for info in page.get_image_info())
    return min(1.0, covered / (abs(page.rect) or 1.0))


@lru_cache(maxsize=1)
def _tesseract_languages() -> frozenset[str]:
    exe = shutil.which("tesseract")
    if exe is None:
        return frozenset()
    out = subprocess.run([exe, "--list-langs"], capture_output=True, text=True, env=_tesseract_env(), timeout=60)
    return frozenset(line.strip() for line in out.stdout.splitlines()[1:] if line.strip())


def _tesseract_env() -> dict[str, str]:
    env = dict(os.environ)
    if "TESSDATA_PREFIX" not in env and os.path.isdir(TESSDATA_DIR):
        env["TESSDATA_PREFIX"] = TESSDATA_DIR
    # Measured on the 2-core box: Tesseract's OpenMP threads thrash each other,
    # 30 s per 300-dpi page with the default vs 3.3 s with one thread.
    env["OMP_THREAD_LIMIT"] = "1"
    return env


def _ocr_page(page, languages: str) -> str:
    """Tesseract's own CLI, not PyMuPDF's OCR text page: on the 3-column Federal
    Register scan PyMuPDF's OCR layer interleaves the columns line by line
    (SequenceMatcher 0.35 against ground truth) while Tesseract's layout analysis
    keeps them apart (0.945), and it ran 2.4x faster single-threaded."""
    available = _tesseract_languages()
    if not available:
        raise ExtractionError("page needs OCR but Tesseract is not installed "
                              "(Debian/Ubuntu: apt-get install tesseract-ocr tesseract-ocr-rus)")
    wanted = [lang for lang in languages.split("+") if lang]
    usable = [lang for lang in wanted if lang in available]
    if not usable:
        raise ExtractionError(f"page needs OCR but Tesseract has none of the languages {languages!r} "
                              f"(install e.g. tesseract-ocr-{wanted[0] if wanted else 'eng'})")
    if len(usable) < len(wanted):
        log.warning("Tesseract lacks %s; OCR with %s only", set(wanted) - set(usable), "+".join(usable))
    import pymupdf

    zoom = OCR_DPI / 72
    longest = max(page.rect.width, page.rect.height) * zoom
    if longest > OCR_MAX_PIXELS:
        zoom *= OCR_MAX_PIXELS / longest
    pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), colorspace=pymupdf.csGRAY, alpha=False)
    try:
        out = subprocess.run([shutil.which("tesseract") or "tesseract", "stdin", "stdout", "-l", "+".join(usable)],
                             input=pix.tobytes("png"), capture_output=True, env=_tesseract_env(),
                             timeout=OCR_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("OCR of page %d timed out after %d s", page.number + 1, OCR_TIMEOUT_S)
        return ""
    if out.returncode != 0:
        log.warning("OCR of page %d failed: %s", page.number + 1, out.stderr.decode(errors="replace")[-300:])
        return ""
    return out.stdout.decode("utf-8", errors="replace").replace("\f", "").strip()


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:160]


# --- EPUB -----------------------------------------------------------------------

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


def _extract_epub(path: Path) -> Extracted:
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
        raise ExtractionError(f"broken EPUB ({_short(exc).strip(chr(34) + chr(39))})") from None
    titles = book.get_metadata("DC", "title")
    title = _clean_title(titles[0][0] if titles else None)

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
            log.warning("%s: unreadable spine item %s skipped (%s)", path.name, name, _short(exc))
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
    _set_headings(pages, outline)
    return Extracted("epub", title or title_from_filename(path), pages, outline, None)


# --- plain text / Markdown ----------------------------------------------------------

_PREFERRED_CODECS = ("cp1252", "cp1251", "koi8_r", "cp1250", "cp866")


def decode_text(data: bytes) -> str:
    """UTF-8 (BOM or not), UTF-16/32 with BOM, else charset-normalizer's best guess
    (cp1251 and KOI8-R Russian files are common); binary content is refused."""
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
                       (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if data.startswith(bom):
            try:
                return _refuse_binary(data.decode(codec))
            except UnicodeDecodeError:
                raise ExtractionError(f"undecodable text: starts with a {codec} byte-order mark but is not {codec}") from None
    # before UTF-8: ASCII in UTF-16 is also valid UTF-8, NULs and all
    utf16 = _bomless_utf16(data) if b"\x00" in data[:65536] else None
    if utf16 is not None:
        return _refuse_binary(utf16)
    try:
        return _refuse_binary(data.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    if b"\x00" in data[:65536]:
        raise ExtractionError("binary content, not text (contains NUL bytes)")
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        raise ExtractionError("undecodable text: no character encoding fits (binary file?)")
    # charset-normalizer's lowest-chaos pick for French cp1252 is cp1257 ("trčs
    # célčbre"): among near-ties, prefer the encodings real files use
    floor = min(m.chaos for m in matches)
    best = min((m for m in matches if m.chaos <= floor + 0.1), key=lambda m: (next(
        (i for i, enc in enumerate(_PREFERRED_CODECS) if enc in m.could_be_from_charset), len(_PREFERRED_CODECS)),
        m.chaos))
    log.debug("decoded as %s", best.encoding)
    return _refuse_binary(str(best))


def _bomless_utf16(data: bytes) -> str | None:
    """UTF-16 without a byte-order mark (Windows tools write it) was refused as
    binary for its NUL bytes. Latin or Cyrillic text in UTF-16 has a NUL or a
    constant high byte in every other position; random binary does not."""
    sample = data[:65536]
    if len(sample) < 16 or len(data) % 2:
        return None
    for codec, high in (("utf-16-le", sample[1::2]), ("utf-16-be", sample[0::2])):
        if high.count(0) + high.count(4) >= 0.9 * len(high):  # U+00xx Latin, U+04xx Cyrillic
            try:
                return data.decode(codec)
            except UnicodeDecodeError:
                return None
    return None


def _refuse_binary(text: str) -> str:
    sample = text[:65536]
    if sample:
        control = sum(1 for ch in sample if (ord(ch) < 32 and ch not in "\t\n\r\f\v") or ch == "\ufffd")
        if control / len(sample) > 0.02:
            raise ExtractionError("binary content, not text (control characters)")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _extract_text(path: Path, fmt: str) -> Extracted:
    text = decode_text(path.read_bytes())
    title = None
    if fmt == "md" and text.startswith("---"):  # YAML front matter (Obsidian, Jekyll, Hugo)
        end = text.find("\n---", 3, 20_000)
        match = re.search(r"^title:\s*[\"']?(.+?)[\"']?\s*$", text[:end], re.MULTILINE) if end > 0 else None
        title = _clean_title(match.group(1)) if match else None
    return Extracted(fmt, title or title_from_filename(path), [Page(1, text)], [], None)


# --- boilerplate: licence and distribution text that is not the work ------------------
#
# Every Project Gutenberg book carries a ~700-word header and a ~3,000-word licence
# at the end; measured on a library of Gutenberg books before this existed, "Project
# Gutenberg" was the most mentioned entity of the graph (66 mentions) and was typed a
# person, and the licence's passages fed the summaries. The markers are the ones PG
# has used since ~2005 ("*** START OF THE PROJECT GUTENBERG EBOOK ... ***") and the
# older "THIS" / "E-BOOK" and "End of the Project Gutenberg EBook" forms.

_PG_START = re.compile(r"^[ \t]*\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK[^\n]*$",
                       re.IGNORECASE | re.MULTILINE)
_PG_END = re.compile(r"^[ \t]*(?:\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK"
                     r"|End of (?:the )?Project Gutenberg'?s? )[^\n]*$", re.IGNORECASE | re.MULTILINE)
_PG_LICENCE = re.compile(r"^[ \t]*THE FULL PROJECT GUTENBERG(?:\(?TM\)?|™)? LICENSE\b", re.MULTILINE)
# a publisher's copyright page: short, in the front matter, and at least two of these
_IMPRINT = [re.compile(p, re.IGNORECASE) for p in (
    r"all rights reserved", r"\bISBN(?:-1[03])?[:\s]", r"(?:copyright|©|\(c\))\s*(?:©\s*)?(?:19|20)\d\d",
    r"no part of this (?:publication|book|work) may be reproduced", r"library of congress",
    r"printed (?:and bound )?in (?:the )?[A-Z]", r"first (?:published|edition|printing)\b",
    r"british library cataloguing", r"все права защищены", r"охраняется законом об авторском праве")]
IMPRINT_MAX_CHARS = 4000
IMPRINT_PAGES = 8
BOILERPLATE = "boilerplate"


def split_boilerplate(pages: list[Page]) -> list[tuple[Page, str]]:
    """The document in reading order as (piece, kind) with kind "text" or
    "boilerplate": the Project Gutenberg header (up to and including its START
    line) and everything from its END line (or the full licence) on, and
    publisher copyright pages in the first pages. A page that holds both is cut
    into two pieces with the same page_no; pages without either come back whole."""
    ordered = sorted(pages, key=lambda p: p.page_no)
    start: tuple[int, int] | None = None       # (index of page, offset where the work begins)
    end: tuple[int, int] | None = None         # (index of page, offset where the licence begins)
    for i, page in enumerate(ordered[: max(3, len(ordered) // 2 + 1)]):
        match = _PG_START.search(page.text)
        if match:
            start = (i, match.end())
            break
    for i in range(len(ordered) - 1, (start[0] if start else 0) - 1, -1):
        text = ordered[i].text
        lower = start[1] if start and i == start[0] else 0
        matches = [m for m in _PG_END.finditer(text) if m.start() >= lower]
        if matches:
            end = (i, matches[0].start())
            continue                        # an earlier page may hold the END line itself
        if end is not None:
            break
        licence = _PG_LICENCE.search(text)
        if start is not None and licence and licence.start() >= lower:
            end = (i, licence.start())
    out: list[tuple[Page, str]] = []

    def piece(page: Page, text: str, kind: str) -> None:
        if text.strip():
            out.append((Page(page.page_no, text, page.ocr, page.label, page.heading), kind))

    for i, page in enumerate(ordered):
        begin, stop = 0, len(page.text)
        if start is not None and i < start[0] or end is not None and i > end[0]:
            piece(page, page.text, BOILERPLATE)
            continue
        if start is not None and i == start[0]:
            begin = start[1]
        if end is not None and i == end[0]:
            stop = max(begin, end[1])
        piece(page, page.text[:begin], BOILERPLATE)
        work = page.text[begin:stop]
        imprint = (start is None and i < IMPRINT_PAGES and len(work) <= IMPRINT_MAX_CHARS
                   and sum(bool(p.search(work)) for p in _IMPRINT) >= 2)
        piece(page, work, BOILERPLATE if imprint else "text")
        piece(page, page.text[stop:], BOILERPLATE)
    return out


__all__ = ["Page", "Extracted", "ExtractionError", "SUPPORTED_SUFFIXES", "extract_file", "detect_language",
           "decode_text", "title_from_filename", "split_boilerplate", "BOILERPLATE"]
