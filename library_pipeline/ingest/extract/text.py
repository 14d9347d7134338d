"""Plain text and Markdown: the encoding guessed from the bytes, binary refused."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from library_pipeline.ingest.extract.common import Extracted, ExtractionError, Page
from library_pipeline.ingest.extract.titles import clean_title, title_from_filename

log = logging.getLogger("library_pipeline.ingest.extract")


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


def extract_text(path: Path, fmt: str) -> Extracted:
    text = decode_text(path.read_bytes())
    title = None
    if fmt == "md" and text.startswith("---"):  # YAML front matter (Obsidian, Jekyll, Hugo)
        end = text.find("\n---", 3, 20_000)
        match = re.search(r"^title:\s*[\"']?(.+?)[\"']?\s*$", text[:end], re.MULTILINE) if end > 0 else None
        title = clean_title(match.group(1)) if match else None
    return Extracted(fmt, title or title_from_filename(path), [Page(1, text)], [], None)
