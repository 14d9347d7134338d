"""The hostile-file corpus: files built to break an ingest pipeline, laid among
good files in a library folder (~400 lines, one responsibility: each case is a few lines
of bytes and its expectation, kept together so a case reads whole) (benchmarks/hostile_corpus.py writes it to a
folder; library_pipeline_tests/test_hostile_corpus.py ingests it).

Everything is generated here (PyMuPDF, zipfile, plain bytes); nothing is
downloaded or checked in as a binary. Each case says what the pipeline must do
with it: `failed` with a fragment of the readable reason, or `ingested` when
the file is hostile in form only (a name with a newline, a PDF with a damaged
cross-reference table that MuPDF repairs, text that is not valid UTF-8 but is
valid cp1251) - the rule is that a bad file fails *alone*, not that
every odd file fails. The expectations were measured, then frozen, by
library_pipeline_tests/test_hostile_corpus.py.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


GOOD_TEXT = "\n\n".join(
    f"Chapter {i}. The harbour master kept tide tables for the northern coast; high water "
    f"came at dawn in the spring months and the fishing fleet sailed on the ebb." for i in range(8))
# 600 MB, above the default LIBRARY_MAX_FILE_MB (512), written as a sparse file
# so it costs no disk
SPARSE_BIG_BYTES = 600 * 1024 * 1024
# uncompressed size of the decompression bomb's chapter (deflate packs a run of
# one byte ~1000:1, so the .epub is ~1 MB)
BOMB_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str                  # path relative to the library root (may hold \n, control chars)
    expect: str                # "failed" | "ingested"
    reason: str = ""           # fragment of documents.error (case-insensitive) when failed
    note: str = ""


# -- builders -------------------------------------------------------------------

def _pdf(text: str | None = "The harbour master's tide tables.", pages: int = 1, **save) -> bytes:
    import pymupdf

    doc = pymupdf.open()
    for _ in range(pages):
        page = doc.new_page()
        if text:
            page.insert_text((72, 72), text)
    data = doc.tobytes(**save)
    doc.close()
    return data


def _corrupt_xref(data: bytes) -> bytes:
    # every xref offset points 7 bytes off and startxref points into the middle
    # of an object: MuPDF has to rebuild the table by scanning
    head, sep, tail = data.partition(b"\nxref\n")
    if not sep:
        return data.replace(b"startxref", b"startxref\n999999\n%")
    lines = tail.split(b"\n")
    out = []
    for line in lines:
        parts = line.split(b" ")
        if len(parts) >= 3 and parts[0].isdigit() and len(parts[0]) == 10:
            line = b"%010d" % (int(parts[0]) + 7) + b" " + b" ".join(parts[1:])
        out.append(line)
    fixed = head + sep + b"\n".join(out)
    start = fixed.rfind(b"startxref")
    return fixed[:start] + b"startxref\n123\n%%EOF\n"


def _pdf_raw(objects: list[bytes], root: int = 1) -> bytes:
    """A PDF from raw object bodies, with a correct xref table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % n + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, root, xref))
    return out.getvalue()


def _stream(data: bytes, compress: bool = True) -> bytes:
    body = zlib.compress(data, 9) if compress else data
    flt = b" /Filter /FlateDecode" if compress else b""
    return b"<< /Length %d%s >>\nstream\n" % (len(body), flt) + body + b"\nendstream"


def _page_objects(content: bytes) -> list[bytes]:
    return [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            content,
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]


def _pdf_stream_bomb() -> bytes:
    # one page whose content stream inflates to 256 MB of spaces around one line of text
    text = b"BT /F1 12 Tf 72 700 Td (The bomb page's only words.) Tj ET\n"
    comp = zlib.compressobj(9)
    parts = [comp.compress(text)]
    block = b" " * (1 << 20)
    for _ in range(256):
        parts.append(comp.compress(block))
    parts.append(comp.flush())
    body = b"".join(parts)
    stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(body) + body + b"\nendstream"
    return _pdf_raw(_page_objects(stream))


def _pdf_page_tree_loop() -> bytes:
    # the page tree's only kid is the tree itself
    return _pdf_raw([b"<< /Type /Catalog /Pages 2 0 R >>",
                     b"<< /Type /Pages /Kids [2 0 R] /Count 1 >>"])


def _pdf_bad_flate() -> bytes:
    return _pdf_raw(_page_objects(b"<< /Length 64 /Filter /FlateDecode >>\nstream\n" + os.urandom(64)
                                  + b"\nendstream"))


def _pdf_huge_count() -> bytes:
    # a page tree claiming two billion pages that holds one
    objs = _page_objects(_stream(b"BT /F1 12 Tf 72 700 Td (Only one page exists.) Tj ET", compress=False))
    objs[1] = b"<< /Type /Pages /Kids [3 0 R] /Count 2147483647 >>"
    return _pdf_raw(objs)


CONTAINER = (b'<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             b'<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
             b'</rootfiles></container>')


def _opf(items: list[tuple[str, str]], title: str = "A hostile book") -> bytes:
    manifest = "".join(f'<item id="{i}" href="{href}" media-type="application/xhtml+xml"/>' for i, href in items)
    spine = "".join(f'<itemref idref="{i}"/>' for i, _ in items)
    return (f'<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
            f'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            f'<dc:identifier id="id">hostile</dc:identifier><dc:title>{title}</dc:title>'
            f'<dc:language>en</dc:language></metadata><manifest>{manifest}'
            f'<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
            f'</manifest><spine>{spine}</spine></package>').encode()


NAV = (b'<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml" '
       b'xmlns:epub="http://www.idpf.org/2007/ops"><body><nav epub:type="toc"><ol>'
       b'<li><a href="c1.xhtml">One</a></li></ol></nav></body></html>')


def _xhtml(body: str) -> bytes:
    return (f'<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml"><head>'
            f'<title>c</title></head><body>{body}</body></html>').encode()


def _epub(entries: list[tuple[str, bytes]], *, opf: bytes | None = None, mimetype: bool = True) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        if mimetype:
            z.writestr(zipfile.ZipInfo("mimetype"), b"application/epub+zip")
        z.writestr("META-INF/container.xml", CONTAINER)
        if opf is not None:
            z.writestr("OEBPS/content.opf", opf)
        for name, data in entries:
            z.writestr(name, data)
    return buf.getvalue()


def _good_epub() -> bytes:
    return _epub([("OEBPS/c1.xhtml", _xhtml("".join(f"<p>{p}</p>" for p in GOOD_TEXT.split("\n\n")))),
                  ("OEBPS/nav.xhtml", NAV)], opf=_opf([("c1", "c1.xhtml")], "The tide tables"))


def _epub_bomb(path: Path) -> None:
    """1 GiB of whitespace inside a chapter, deflated to ~1 MB, streamed to disk."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), b"application/epub+zip")
        z.writestr("META-INF/container.xml", CONTAINER)
        z.writestr("OEBPS/content.opf", _opf([("c1", "c1.xhtml")]))
        z.writestr("OEBPS/nav.xhtml", NAV)
        with z.open("OEBPS/c1.xhtml", "w", force_zip64=True) as fh:
            fh.write(b'<html xmlns="http://www.w3.org/1999/xhtml"><body><p>')
            block = b" " * (4 << 20)
            for _ in range(BOMB_BYTES // len(block)):
                fh.write(block)
            fh.write(b"</p></body></html>")


def _epub_lying_sizes() -> bytes:
    """A chapter whose central directory claims 10 bytes while it inflates to 64 MB."""
    data = _epub([("OEBPS/c1.xhtml", b"<html><body><p>" + b"a" * (64 << 20) + b"</p></body></html>"),
                  ("OEBPS/nav.xhtml", NAV)], opf=_opf([("c1", "c1.xhtml")]))
    # patch the uncompressed-size fields (local header and central directory) of c1
    name = b"OEBPS/c1.xhtml"
    out = bytearray(data)
    pos = 0
    while True:
        pos = out.find(name, pos)
        if pos < 0:
            break
        if out[pos - 30: pos - 26] == b"PK\x03\x04":
            out[pos - 8: pos - 4] = (10).to_bytes(4, "little")
        elif out[pos - 46: pos - 42] == b"PK\x01\x02":
            out[pos - 22: pos - 18] = (10).to_bytes(4, "little")
        pos += len(name)
    return bytes(out)


def _epub_billion_laughs() -> bytes:
    ents = '<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{"&lol%s;" % (i - 1 if i > 1 else "") * 10}">' for i in range(1, 10))
    chapter = (f'<?xml version="1.0"?><!DOCTYPE html [{ents}]><html xmlns="http://www.w3.org/1999/xhtml">'
               f'<body><p>&lol9;</p></body></html>').encode()
    opf = _opf([("c1", "c1.xhtml")]).replace(b"<package", f"<!DOCTYPE package [{ents}]><package".encode(), 1)
    opf = opf.replace(b"A hostile book", b"&lol9;")
    return _epub([("OEBPS/c1.xhtml", chapter), ("OEBPS/nav.xhtml", NAV)], opf=opf)


def _epub_deep_nesting() -> bytes:
    depth = 100_000
    return _epub([("OEBPS/c1.xhtml", _xhtml("<div>" * depth + "deep text" + "</div>" * depth)),
                  ("OEBPS/nav.xhtml", NAV)], opf=_opf([("c1", "c1.xhtml")]))


def _epub_many_entries() -> bytes:
    entries = [(f"OEBPS/junk/{i:05d}.css", b"p{}") for i in range(20_000)]
    return _epub(entries + [("OEBPS/nav.xhtml", NAV)], opf=_opf([]))


def _epub_traversal() -> bytes:
    # zip entries and a manifest href that climb out of the archive; a reader that
    # extracted to disk would write ../../escaped.xhtml
    opf = _opf([("c1", "c1.xhtml"), ("evil", "../../escaped.xhtml")])
    return _epub([("OEBPS/c1.xhtml", _xhtml("".join(f"<p>{p}</p>" for p in GOOD_TEXT.split("\n\n")))),
                  ("../../escaped.xhtml", _xhtml("<p>ESCAPED-ENTRY-TEXT climbing out of the archive</p>")),
                  ("/abs/escaped.xhtml", _xhtml("<p>absolute entry</p>")),
                  ("OEBPS/nav.xhtml", NAV)], opf=opf)


def _epub_traversal_only() -> bytes:
    opf = _opf([("evil", "../../escaped.xhtml")])
    return _epub([("../../escaped.xhtml", _xhtml("<p>ESCAPED-ENTRY-TEXT</p>")), ("OEBPS/nav.xhtml", NAV)], opf=opf)


def _utf16le_no_bom() -> bytes:
    return ("UTF-16 without a byte-order mark. " + GOOD_TEXT).encode("utf-16-le")


def _truncated_utf16() -> bytes:
    # BOM, then an odd number of bytes ending inside a surrogate pair
    return b"\xff\xfe" + "tide tables 🌊".encode("utf-16-le")[:-1]


def _invalid_utf8_cp1251() -> bytes:
    return ("Приливы северной гавани: таблицы смотрителя. " * 30).encode("cp1251")


def _invalid_utf8_mixed() -> bytes:
    # mostly UTF-8 with stray bytes that are not: decoding must still land the text
    return GOOD_TEXT.encode() + b"\n\nbroken \xff\xfe\xc3( bytes \xed\xa0\x80 here\n" + GOOD_TEXT.encode()


# -- the corpus -------------------------------------------------------------------

def cases() -> list[tuple[Case, Callable[[Path], None]]]:
    """(expectation, writer) pairs. Writers get the absolute target path."""

    def data(blob: bytes | Callable[[], bytes]) -> Callable[[Path], None]:
        def write(path: Path) -> None:
            path.write_bytes(blob() if callable(blob) else blob)
        return write

    def symlink(target: str) -> Callable[[Path], None]:
        return lambda path: path.symlink_to(target)

    def sparse(size: int) -> Callable[[Path], None]:
        def write(path: Path) -> None:
            with path.open("wb") as fh:
                fh.write(b"a few words at the start of a very large sparse file\n")
                fh.truncate(size)
        return write

    def fifo(path: Path) -> None:
        os.mkfifo(path)

    good_pdf = _pdf("The harbour master kept tide tables for the northern coast.")
    out: list[tuple[Case, Callable[[Path], None]]] = [
        # --- PDF
        (Case("pdf/truncated.pdf", "failed", "pdf"), data(lambda: good_pdf[: len(good_pdf) // 3])),
        (Case("pdf/header-only.pdf", "failed", "pdf"), data(b"%PDF-1.7\n")),
        (Case("pdf/corrupt-xref.pdf", "ingested", note="MuPDF rebuilds the xref table"),
         data(lambda: _corrupt_xref(good_pdf))),
        (Case("pdf/encrypted.pdf", "failed", "encrypted"),
         data(lambda: _pdf("secret tide tables", encryption=5, owner_pw="o", user_pw="u"))),  # 5 = PDF_ENCRYPT_AES_256
        (Case("pdf/encrypted-owner-only.pdf", "ingested", note="empty user password: readable"),
         data(lambda: _pdf("The harbour master's tide tables, print-protected.", encryption=5, owner_pw="o"))),
        (Case("pdf/blank-10000-pages.pdf", "failed", "no text"), data(lambda: _pdf(None, pages=10_000, garbage=3))),
        (Case("pdf/not-a-pdf.pdf", "failed", "pdf"), data(b"Just some words pretending to be a PDF.\n" * 20)),
        (Case("pdf/page-tree-loop.pdf", "failed", "pdf"), data(_pdf_page_tree_loop)),
        (Case("pdf/bad-flate.pdf", "failed", "no text"), data(_pdf_bad_flate)),
        (Case("pdf/stream-bomb-256mb.pdf", "ingested", note="one line of text inside 256 MB of inflated spaces"),
         data(_pdf_stream_bomb)),
        (Case("pdf/claims-2-billion-pages.pdf", "failed", "number of pages", note="/Count 2147483647, one kid"),
         data(_pdf_huge_count)),
        (Case("pdf/empty.pdf", "failed", "empty"), data(b"")),
        # --- EPUB
        (Case("epub/not-a-zip.epub", "failed", "epub"), data(b"PK\x03\x04 not really a zip archive")),
        (Case("epub/truncated.epub", "failed", "epub"), data(lambda: _good_epub()[:700])),
        (Case("epub/no-opf.epub", "failed", "epub"), data(lambda: _epub([("OEBPS/c1.xhtml", _xhtml("<p>x</p>"))]))),
        (Case("epub/malformed-opf.epub", "failed", "epub"),
         data(lambda: _epub([], opf=b"<package><manifest><item id="))),
        (Case("epub/decompression-bomb.epub", "failed", "bomb"), _epub_bomb),
        (Case("epub/lying-sizes.epub", "failed", "epub"), data(_epub_lying_sizes)),
        (Case("epub/billion-laughs.epub", "failed", "epub"), data(_epub_billion_laughs)),
        (Case("epub/deep-nesting.epub", "failed", "no readable text", note="100,000 nested <div>s: lxml "
                                                                           "drops the text below its depth limit"),
         data(_epub_deep_nesting)),
        (Case("epub/20000-entries.epub", "failed", "no readable text"), data(_epub_many_entries)),
        (Case("epub/path-traversal.epub", "failed", "epub", note="../../ and /abs entries; nothing is written"),
         data(_epub_traversal)),
        (Case("epub/path-traversal-only.epub", "failed", "epub"), data(_epub_traversal_only)),
        (Case("epub/empty.epub", "failed", "empty"), data(b"")),
        # --- text
        (Case("text/empty.txt", "failed", "empty"), data(b"")),
        (Case("text/whitespace.md", "failed", "no text"), data(b" \n\t\n   \r\n" * 100)),
        (Case("text/random-bytes.txt", "failed", "binary"), data(lambda: os.urandom(64 * 1024))),
        (Case("text/nul-bytes.txt", "failed", "binary"), data(lambda: GOOD_TEXT.encode() + b"\x00" * 4096)),
        (Case("text/invalid-utf8-cp1251.txt", "ingested", note="not UTF-8; decoded as cp1251"),
         data(_invalid_utf8_cp1251)),
        (Case("text/invalid-utf8-stray-bytes.txt", "ingested", note="UTF-8 with stray invalid bytes"),
         data(_invalid_utf8_mixed)),
        (Case("text/utf16le-no-bom.txt", "ingested", note="UTF-16LE without a BOM"), data(_utf16le_no_bom)),
        (Case("text/utf16-truncated.txt", "failed", "undecodable"), data(_truncated_utf16)),
        (Case("text/above-size-limit.txt", "failed", "too large", note="600 MB sparse > LIBRARY_MAX_FILE_MB 512"),
         sparse(SPARSE_BIG_BYTES)),
        (Case("text/named-pipe.txt", "failed", "not a regular file", note="a FIFO: opening it would block"), fifo),
        # --- links
        (Case("links/loop-a.txt", "failed", "resolve"), symlink("loop-b.txt")),
        (Case("links/loop-b.txt", "failed", "resolve"), symlink("loop-a.txt")),
        (Case("links/self-loop.pdf", "failed", "resolve"), symlink("self-loop.pdf")),
        (Case("links/dangling.md", "failed", "not found"), symlink("no-such-file.md")),
        (Case("links/to-etc-passwd.txt", "failed", "outside the library"), symlink("/etc/passwd")),
        (Case("links/to-good-file.txt", "ingested", note="a link inside the library is followed"),
         symlink("../good/tide tables.txt")),
        # --- names
        (Case("names/new\nline.txt", "ingested"), data(GOOD_TEXT.encode())),
        (Case("names/ctrl-\x01\x1b[31mred\x07.md", "ingested"), data(GOOD_TEXT.encode())),
        (Case("names/" + "long-" * 49 + ".txt", "ingested", note="a 254-byte name"), data(GOOD_TEXT.encode())),
        (Case("names/'; DROP TABLE documents; --.txt", "ingested"), data(GOOD_TEXT.encode())),
        (Case("names/dots..in...the..name.txt", "ingested"), data(GOOD_TEXT.encode())),
        (Case("names/bad-utf8-\udcff\udcfe.txt", "ingested", note="name bytes that are not UTF-8"),
         data(GOOD_TEXT.encode())),
    ]
    return out


GOOD_FILES = {
    "good/tide tables.txt": GOOD_TEXT.encode(),
    "good/harbour.pdf": None,  # built at write time
    "good/tide book.epub": None,
    "good/notes.md": ("---\ntitle: Harbour notes\n---\n\n" + GOOD_TEXT).encode(),
}


def write_corpus(root: Path, hostile: bool = True) -> tuple[list[Case], list[str]]:
    """Write the good files and (unless `hostile` is false) every hostile case under
    `root`. Returns (cases, good relative paths). The directory symlink loop
    (links/dir-loop -> ..) is written too; the scanner must not follow it."""
    root.mkdir(parents=True, exist_ok=True)
    good = dict(GOOD_FILES)
    good["good/harbour.pdf"] = _pdf("The harbour master kept tide tables for the northern coast; high water "
                                    "came at dawn in the spring months.")
    good["good/tide book.epub"] = _good_epub()
    for rel, blob in good.items():
        path = root / rel
        if path.exists():  # PDFs and zips carry timestamps: rewriting would change them
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
    written: list[Case] = []
    if not hostile:
        return written, sorted(good)
    for case, writer in cases():
        path = root / case.name
        path.parent.mkdir(parents=True, exist_ok=True)
        writer(path)
        written.append(case)
    (root / "links" / "dir-loop").symlink_to("..", target_is_directory=True)
    return written, sorted(good)


def display_name(name: str) -> str:
    """The relative path as `documents.path` stores it (non-UTF-8 bytes escaped)."""
    from library_pipeline.defs.ingest.partitions import display_path

    return display_path(name)
