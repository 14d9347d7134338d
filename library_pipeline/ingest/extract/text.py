"""Plain text and Markdown: the encoding guessed from the bytes, binary refused."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from library_pipeline.ingest.extract.common import Extracted, ExtractionError, Page
from library_pipeline.ingest.extract.titles import author_from_filename, clean_title, title_from_filename

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
    pages = [Page(n, part, heading=heading) for n, (heading, part) in enumerate(text_sections(text), start=1)] \
        if fmt == "txt" else [Page(1, text)]
    return Extracted(fmt, title or title_from_filename(path), pages, [], None, author_from_filename(path))


# -- the headings of a plain-text book ------------------------------------------------
#
# A plain-text book has no outline, but its own headings stand out: a short line alone
# between blank lines that is a Roman or Arabic numeral ("IX", "12."), names a chapter,
# part, book or act («Глава первая», «АКТ ТРЕТИЙ», "Chapter XII"), or is written in capitals
# («ДЯДЮШКА ЛЕВ СТЕПАНОВИЧ», "VIXERUNT!"). Without them, a story inside a collection and
# a chapter asked for by number ("Тарас Бульба глава IX") were unreachable by name: every
# passage of a text file sat under no heading.

HEADING_WORDS = (r"глава|часть|книга|том|действие|акт|явление|картина|сцена|песнь|"
                 r"chapter|part|book|volume|act|scene|canto")
_HEADING_WORD = re.compile(rf"^(?:{HEADING_WORDS})\b", re.IGNORECASE)
_ROMAN = re.compile(r"^(?:--\s*|—\s*)?[IVXLC]+\.?$")
_NUMERAL = re.compile(r"^(?:--\s*|—\s*)?(?:[IVXLC]+|\d{1,3})\.?$")
_FOOTNOTE_MARK = re.compile(r"(?<=[^\W\d_]|[!?.»)])\d{1,2}$")
MAX_HEADING_CHARS = 80


def _heading_line(line: str, before: bool, after: bool, continues: bool = False) -> str | None:
    """The line as a heading (a footnote mark glued to its end dropped), or None. `before`,
    `after`: a blank line (or the text's edge) on that side. A line that is only a Roman
    numeral is a heading anywhere (some texts have no blank lines at all); an Arabic one or
    a chapter word needs a blank line before it; a line in capitals, blank lines around it
    (a shouted line of dialogue runs on into its paragraph), or right under another heading
    line (`continues`: «ГЛАВА I» / «СЕРЖАНТ ГВАРДИИ»)."""
    text = " ".join(line.split())
    if not text or len(text) > MAX_HEADING_CHARS:
        return None
    if _ROMAN.match(text) or (before and _NUMERAL.match(text)):
        return text.lstrip("-— ").rstrip(".")
    if not before:
        return None
    text = _FOOTNOTE_MARK.sub("", text)
    if _HEADING_WORD.match(text):
        return text
    letters = [ch for ch in text if ch.isalpha()]
    if (after or continues) and len(letters) >= 3 and not any(ch.islower() for ch in letters) \
            and text[-1] not in ",;:-":
        return text
    return None


def text_sections(text: str) -> list[tuple[str | None, str]]:
    """(heading, text) sections of a plain-text book, in order; the heading lines stay in
    their section's text. Consecutive heading lines (blank lines between) are one heading
    ("IV. VIXERUNT!"); a bare numeral under a chapter word or a title («Часть вторая»,
    «Глава четвертая», «ДЕТСТВО») is numbered within it ("Часть вторая › II")."""
    lines = text.split("\n")
    starts: list[tuple[int, str]] = []      # (first line of the section, its heading)
    group: list[str] = []
    group_start = 0
    parent: str | None = None
    last_heading_line = -2

    def close() -> None:
        nonlocal parent
        heading = ". ".join(group) if len(group) > 1 else group[0]
        if _HEADING_WORD.match(group[0]) or not any(_NUMERAL.match(g) for g in group):
            parent = group[0]   # «Часть вторая», «Глава четвертая», «ДЕТСТВО» (a work of a trilogy)
        elif parent and all(_NUMERAL.match(g) for g in group):
            heading = f"{parent} › {heading}"
        starts.append((group_start, heading))

    for i, line in enumerate(lines):
        if not line.strip():
            continue
        before = i == 0 or not lines[i - 1].strip() or last_heading_line == i - 1
        after = i + 1 >= len(lines) or not lines[i + 1].strip()
        heading = _heading_line(line, before, after, continues=last_heading_line == i - 1)
        if heading is None:
            if group:
                close()
                group = []
            continue
        if group and all(not lines[j].strip() for j in range(last_heading_line + 1, i)):
            group.append(heading)
        else:
            if group:
                close()
            group, group_start = [heading], i
        last_heading_line = i
    if group:
        close()
    if not starts:
        return [(None, text)]
    sections = []
    if starts[0][0] > 0:
        sections.append((None, "\n".join(lines[:starts[0][0]])))
    for (start, heading), nxt in zip(starts, [s for s, _ in starts[1:]] + [len(lines)]):
        sections.append((heading, "\n".join(lines[start:nxt])))
    return [(h, t) for h, t in sections if t.strip()]
