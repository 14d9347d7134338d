"""Boilerplate: licence and distribution text that is not the work.

Every Project Gutenberg book carries a ~700-word header and a ~3,000-word licence
at the end; measured on a library of Gutenberg books before this existed, "Project
Gutenberg" was the most mentioned entity of the graph (66 mentions) and was typed a
person, and the licence's passages fed the summaries. The markers are the ones PG
has used since ~2005 ("*** START OF THE PROJECT GUTENBERG EBOOK ... ***") and the
older "THIS" / "E-BOOK" and "End of the Project Gutenberg EBook" forms.
"""

from __future__ import annotations

import re

from library_pipeline.ingest.extract.common import Page

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
