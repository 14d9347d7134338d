"""Extraction on the real third-party material in library_pipeline_tests/data/documents
(see its SOURCES.md), plus the bad inputs a user's library really contains."""

from __future__ import annotations

import difflib
import os
import shutil
import zipfile
from pathlib import Path

import pymupdf
import pytest

from library_pipeline.ingest.extract import (
    SUPPORTED_SUFFIXES,
    Extracted,
    ExtractionError,
    decode_text,
    detect_language,
    extract_file,
)


@pytest.fixture(scope="module")
def docs(test_data: Path) -> Path:
    return test_data / "documents"


@pytest.fixture(scope="module")
def scanned(docs: Path) -> Extracted:
    # OCR is the slow part (~3 s a page single-threaded): once per module
    return extract_file(docs / "pdf_scanned" / "federal-register-2020-17221_rasterized-p1-3.pdf")


def _norm(text: str) -> str:
    return " ".join(text.split())


# --- PDF ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sicp-2nd-ed-sarabander.pdf", "GeoTopo-komprimiert_de.pdf",
                                  "federal-register-2020-17221.pdf"])
def test_pdf_page_count_matches_pymupdf(docs: Path, name: str) -> None:
    path = docs / "pdf" / name
    result = extract_file(path, ocr=False)
    with pymupdf.open(path) as doc:
        assert len(result.pages) == doc.page_count
    assert [p.page_no for p in result.pages] == list(range(1, len(result.pages) + 1))
    assert result.format == "pdf" and result.ocr_pages == 0


def test_sicp_outline_labels_headings(docs: Path) -> None:
    result = extract_file(docs / "pdf" / "sicp-2nd-ed-sarabander.pdf")
    assert result.title == "Structure and Interpretation of Computer Programs, 2nd ed."
    assert result.language == "en"
    assert len(result.outline) == 140  # SOURCES.md: 140 outline items
    assert result.outline[-1] == {"level": 1, "title": "Colophon", "page": 894}
    pages = {p.page_no: p for p in result.pages}
    assert pages[1].label == "i" and pages[3].label == "iii"
    assert pages[3].text.startswith("Contents")
    # deepest entry starting on or before the page
    lexical = next(e for e in result.outline if e["title"] == "Lexical Addressing")
    assert pages[lexical["page"]].heading == "Lexical Addressing"
    assert pages[lexical["page"] - 1].heading == "An Example of Compiled Code"
    assert pages[882].heading == "List of Exercises"
    assert pages[1].heading is None  # before the first outline entry


def test_geotopo_german_outline(docs: Path) -> None:
    result = extract_file(docs / "pdf" / "GeoTopo-komprimiert_de.pdf")
    assert result.language == "de"
    assert result.title == "Geometrie und Topologie"
    assert len(result.outline) == 35
    assert {e["level"] for e in result.outline} == {1, 2, 3}
    assert result.pages[5].heading == "1.1 Topologische Räume"  # page 6: chapter 1 and 1.1 both start there


def test_pdf_without_metadata_title_gets_readable_file_name(docs: Path) -> None:
    result = extract_file(docs / "pdf" / "federal-register-2020-17221.pdf")
    assert result.title == "federal register 2020-17221"
    assert result.outline == [] and all(p.heading is None for p in result.pages)
    assert "Airworthiness Directives" in result.pages[0].text


def test_ocr_of_rasterised_pdf_matches_ground_truth(docs: Path, scanned: Extracted) -> None:
    assert scanned.ocr_pages == 3 and all(p.ocr for p in scanned.pages)
    # pdftotext separates pages with form feeds; comparing page by page is the
    # same character ratio (2 * matches / total length) at a fifth of the cost
    truth = (docs / "pdf_scanned" / "federal-register-2020-17221_rasterized-p1-3.groundtruth.txt").read_text()
    truth_pages = [t for t in truth.split("\f") if t.strip()]
    assert len(truth_pages) == 3
    matched = total = 0
    for page, expected in zip(scanned.pages, truth_pages):
        a, b = _norm(page.text), _norm(expected)
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        matched += sum(block.size for block in matcher.get_matching_blocks())
        total += len(a) + len(b)
    ratio = 2 * matched / total
    assert ratio >= 0.90, f"OCR similarity {ratio:.3f}"  # measured 0.945
    assert scanned.language == "en"
    assert scanned.title == "federal register 2020-17221 rasterized p1-3"  # metadata title "fr_rasterized" is junk


def test_image_only_pdf_without_ocr_is_a_readable_failure(docs: Path) -> None:
    with pytest.raises(ExtractionError, match="OCR is disabled"):
        extract_file(docs / "pdf_scanned" / "huckleberry-finn-p22_c02-22.pdf", ocr=False)


def test_missing_tesseract_is_reported_only_when_a_page_needs_ocr(docs: Path, monkeypatch) -> None:
    from library_pipeline.ingest.extract import pdf

    monkeypatch.setattr(pdf, "_tesseract_languages", lambda: frozenset())
    assert extract_file(docs / "pdf" / "federal-register-2020-17221.pdf").ocr_pages == 0
    with pytest.raises(ExtractionError, match="apt-get install tesseract-ocr"):
        extract_file(docs / "pdf_scanned" / "huckleberry-finn-p22_c02-22.pdf")


# --- EPUB --------------------------------------------------------------------------

def _spine_files(path: Path) -> list[str]:
    import warnings

    from ebooklib import epub

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        book = epub.read_epub(str(path))
    return [book.get_item_with_id(idref).get_name() for idref, *_ in book.spine]


def test_moby_dick_spine_order_and_chapter_headings(docs: Path) -> None:
    path = docs / "epub" / "pg2701-moby-dick.epub"
    result = extract_file(path)
    assert result.format == "epub" and result.title == "Moby Dick; Or, The Whale" and result.language == "en"
    # pages follow the spine: the files behind the labels appear in spine order
    files = list(dict.fromkeys(p.label.partition("#")[0] for p in result.pages))
    spine = _spine_files(path)
    assert [spine.index(f) for f in files] == sorted(spine.index(f) for f in files)
    assert len(result.outline) == 146  # SOURCES.md: 146 entries, depth 2
    assert {e["level"] for e in result.outline} == {1, 2}
    pages = {p.page_no: p for p in result.pages}
    chapters = [e for e in result.outline if e["title"].startswith("CHAPTER")]
    assert len(chapters) == 135
    for entry in chapters:  # several chapters share a spine file: each still gets its own heading
        assert pages[entry["page"]].heading == entry["title"]
        assert pages[entry["page"]].text.startswith(entry["title"].split(".")[0])
    ishmael = next(p for p in result.pages if "Call me Ishmael" in p.text)
    assert ishmael.heading == "CHAPTER 1. Loomings."
    carpet = next(p for p in result.pages if p.heading == "CHAPTER 2. The Carpet-Bag.")
    assert carpet.page_no == ishmael.page_no + 1 and carpet.label.partition("#")[0] == ishmael.label.partition("#")[0]
    assert [e["page"] for e in result.outline] == sorted(e["page"] for e in result.outline)


def test_nested_toc_keeps_levels(docs: Path) -> None:
    result = extract_file(docs / "epub" / "idpf_childrens-literature.epub")
    assert len(result.outline) == 22 and max(e["level"] for e in result.outline) == 3
    friendship = next(e for e in result.outline if e["title"] == "II. Friendship")
    assert friendship["level"] == 3
    page = result.pages[friendship["page"] - 1]
    assert page.heading == "II. Friendship" and "Friendship" in page.text[:200]


def test_short_sub_headings_carry_their_parent(docs: Path) -> None:
    result = extract_file(docs / "epub" / "pg1661-sherlock-holmes.epub")
    assert len(result.outline) == 18
    woman = next(p for p in result.pages if "To Sherlock Holmes she" in p.text)
    assert woman.heading == "I. A SCANDAL IN BOHEMIA › I."


@pytest.mark.parametrize("name,entries", [("pg11-alice-in-wonderland.epub", 16), ("idpf_wasteland.epub", 6),
                                          ("idpf_georgia-cfi.epub", 10)])
def test_epub_toc_entries_all_mapped(docs: Path, name: str, entries: int) -> None:
    result = extract_file(docs / "epub" / name)
    assert len(result.outline) == entries
    assert all(1 <= e["page"] <= len(result.pages) for e in result.outline)
    assert all(p.text.strip() for p in result.pages)


# --- text ----------------------------------------------------------------------------

def test_russian_text_detected_as_ru(docs: Path) -> None:
    result = extract_file(docs / "text_ru" / "pushkin_kapitanskaya-dochka.txt")
    assert result.format == "txt" and result.language == "ru"
    # a section per chapter, under the chapter's own heading; the head before the first
    assert [p.page_no for p in result.pages] == list(range(1, 16))
    assert result.pages[0].heading is None and "КАПИТАНСКАЯ ДОЧКА" in result.pages[0].text
    assert result.pages[1].heading == "ГЛАВА I. СЕРЖАНТ ГВАРДИИ" and result.pages[1].text.startswith("ГЛАВА I\n")
    assert result.pages[-1].heading == "ГЛАВА XIV. СУД"
    assert result.title == "pushkin kapitanskaya dochka"


def test_text_encodings(docs: Path, tmp_path: Path) -> None:
    original = (docs / "text_ru" / "pushkin_kapitanskaya-dochka.txt").read_text(encoding="utf-8")[:6000]
    plain = original.encode("koi8-r", "replace").decode("koi8-r")  # KOI8-R has no em dash or guillemets
    cases = {"cp1251.txt": (original, "cp1251"), "bom8.txt": (original, "utf-8-sig"),
             "utf16.txt": (original, "utf-16"), "koi8.txt": (plain, "koi8-r")}
    for name, (text, codec) in cases.items():
        (tmp_path / name).write_bytes(text.encode(codec))
        result = extract_file(tmp_path / name)
        assert "\n".join(p.text for p in result.pages) == text, name
        assert result.language == "ru"
    french = "Le café est très célèbre à Paris. Où est la bibliothèque ? Les élèves étudient.\r\n" * 3
    assert decode_text(french.encode("cp1252")) == french.replace("\r\n", "\n")
    assert decode_text("naïve café\r\n".encode("latin-1")) == "naïve café\n"


def test_markdown_front_matter_title(tmp_path: Path) -> None:
    path = tmp_path / "some_note.md"
    path.write_text('---\ntitle: "Kerberos notes"\ntags: [auth]\n---\n# Tickets\nThe KDC issues tickets.\n')
    result = extract_file(path)
    assert result.format == "md" and result.title == "Kerberos notes"
    (tmp_path / "plain-note.md").write_text("# Heading\nbody text\n")
    assert extract_file(tmp_path / "plain-note.md").title == "plain note"


def test_detect_language() -> None:
    assert detect_language("") is None
    assert detect_language("ok") is None
    assert detect_language("The quick brown fox jumps over the lazy dog near the river bank.") == "en"
    assert detect_language("Съешь же ещё этих мягких французских булок, да выпей чаю.") == "ru"


# --- bad input -------------------------------------------------------------------------

def _minimal_epub(path: Path, body: str) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        zf.writestr("META-INF/container.xml",
                    '<?xml version="1.0"?><container version="1.0" '
                    'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
                    '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
                    '</rootfiles></container>')
        zf.writestr("OEBPS/content.opf",
                    '<?xml version="1.0" encoding="UTF-8"?><package xmlns="http://www.idpf.org/2007/opf" '
                    'version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
                    '<dc:identifier id="id">x</dc:identifier><dc:title>T</dc:title><dc:language>en</dc:language>'
                    '</metadata><manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
                    '</manifest><spine><itemref idref="c1"/></spine></package>')
        zf.writestr("OEBPS/c1.xhtml", '<?xml version="1.0" encoding="UTF-8"?><html '
                    f'xmlns="http://www.w3.org/1999/xhtml"><head><title>c</title></head><body>{body}</body></html>')


def test_minimal_epub_fixture_is_valid(tmp_path: Path) -> None:
    _minimal_epub(tmp_path / "ok.epub", "<p>Some real text in a paragraph.</p>")
    result = extract_file(tmp_path / "ok.epub")
    assert result.pages[0].text == "Some real text in a paragraph." and result.title == "T"


def _zip(path: Path, members: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def _pdf(path: Path, text: str | None = "Hello PDF world, this page has some text.", **save) -> None:
    doc = pymupdf.open()
    page = doc.new_page()
    if text:
        page.insert_text((72, 72), text)
    doc.save(path, **save)


@pytest.mark.parametrize("name,make,reason", [
    ("empty.pdf", lambda p: p.write_bytes(b""), r"empty file \(0 bytes\)"),
    ("empty.txt", lambda p: p.write_bytes(b""), r"empty file \(0 bytes\)"),
    ("garbage.pdf", lambda p: p.write_bytes(b"%PDF-1.7\n" + os.urandom(4000)), "corrupt or unreadable PDF"),
    ("notes.docx", lambda p: p.write_bytes(b"PK\x03\x04rest"), "unsupported file type '.docx'"),
    ("noext", lambda p: p.write_bytes(b"text"), r"unsupported file type '\(no suffix\)'"),
    ("secret.pdf", lambda p: _pdf(p, encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="o", user_pw="u"),
     "encrypted PDF: a password is needed"),
    ("blank.pdf", lambda p: _pdf(p, text=None), "no text found in the PDF"),
    ("broken.epub", lambda p: p.write_bytes(b"this is not a zip archive at all" * 20),
     "broken EPUB: not a readable zip archive"),
    ("no-container.epub", lambda p: _zip(p, {"mimetype": "application/epub+zip"}), "broken EPUB .*container.xml"),
    ("images-only.epub", lambda p: _minimal_epub(p, '<div><img src="x.png" alt=""/></div>'),
     "EPUB has no readable text"),
    ("binary.txt", lambda p: p.write_bytes(bytes(range(256)) * 40), "binary content"),
    ("blank.md", lambda p: p.write_text("  \n\n\t\n"), "file contains no text"),
])
def test_bad_input_raises_readable_error(tmp_path: Path, name: str, make, reason: str) -> None:
    path = tmp_path / name
    make(path)
    with pytest.raises(ExtractionError, match=reason) as info:
        extract_file(path)
    message = str(info.value)
    assert len(message) < 200 and "Traceback" not in message and str(tmp_path) not in message


def test_truncated_pdf(docs: Path, tmp_path: Path) -> None:
    data = (docs / "pdf" / "sicp-2nd-ed-sarabander.pdf").read_bytes()
    (tmp_path / "cut.pdf").write_bytes(data[:300_000])
    with pytest.raises(ExtractionError, match="corrupt"):
        extract_file(tmp_path / "cut.pdf")


def test_owner_password_only_pdf_opens(tmp_path: Path) -> None:
    _pdf(tmp_path / "owner.pdf", encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="o", user_pw="")
    assert "Hello PDF world" in extract_file(tmp_path / "owner.pdf").pages[0].text


def test_size_limit_and_vanished_file(docs: Path, tmp_path: Path) -> None:
    src = docs / "text_ru" / "pushkin_kapitanskaya-dochka.txt"
    with pytest.raises(ExtractionError, match="file too large"):
        extract_file(src, max_bytes=100_000)
    assert extract_file(src, max_bytes=10_000_000).pages
    with pytest.raises(ExtractionError, match="file not found"):
        extract_file(tmp_path / "gone.pdf")
    copy = tmp_path / "dir.txt"
    copy.mkdir()
    with pytest.raises(ExtractionError, match="not a regular file"):
        extract_file(copy)
    shutil.rmtree(copy)


def test_supported_suffixes() -> None:
    assert set(SUPPORTED_SUFFIXES) == {".pdf", ".epub", ".txt", ".md"}
    with pytest.raises(ExtractionError, match="undecodable|binary"):
        decode_text(b"\xff\xfe" + b"\x00\xd8" * 10)  # UTF-16 BOM, then lone surrogates


@pytest.mark.parametrize("suffix", [".pdf", ".epub", ".txt"])
def test_file_vanishing_while_being_read(tmp_path: Path, monkeypatch, suffix: str) -> None:
    path = tmp_path / f"vanishing{suffix}"
    path.write_bytes(b"some bytes")
    real_is_file = Path.is_file

    def is_file_then_delete(self: Path) -> bool:  # the sync client removes it after our stat()
        found = real_is_file(self)
        if self == path:
            path.unlink()
        return found

    monkeypatch.setattr(Path, "is_file", is_file_then_delete)
    with pytest.raises(ExtractionError, match="file not found"):
        extract_file(path)
