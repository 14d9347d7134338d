"""Structure-aware chunking of extracted pages. (One responsibility at ~450 lines:
the TOC detector and the prose window share the token budget and the heading runs.)

- TOC-like pages in the front matter (the first max(20, 15 %) pages) are kept
  together as `kind="toc"` chunks instead of being cut by the prose window: the
  agent-library (github.com/CreateM1nd/agent-library) found its table of contents only by keyword, because a TOC
  sliced into windows of bare numbers and dotted leaders embeds as noise. Density
  alone also flags body pages (SICP pp. 249, 479: code tables; GeoTopo pp. 23-82:
  figure pages) and would flag an answer key at the back; position tells them
  apart. A TOC run fills chunks up to `max_tokens`, split at line ends.
- Everything else is prose: runs of consecutive pages sharing a heading are cut
  into sentence-aligned sliding windows (preferring paragraph ends) that may
  cross page breaks but never a heading change.
- No chunk's content ever exceeds `max_tokens` as measured by the embedder's own
  counter: tokens are counted per sentence (additive for WordPiece, whose
  pre-tokeniser splits on whitespace), every emitted chunk is re-counted, and a
  chunk that is still over is shrunk. SICP (894 pages, 1.2 M chars) chunks in a
  few seconds with the MiniLM tokenizer.

Defaults measured with benchmarks/chunk_size.py (see the figures below).
"""

from __future__ import annotations

import bisect
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from library_pipeline.ingest.extract import BOILERPLATE, Page, split_boilerplate

log = logging.getLogger(__name__)

# Window size, measured (not agent-library's 1,800 characters, which were sized
# for a 32k-token model): all-MiniLM-L6-v2 reads 256 tokens.
#   LIBRARY_EMBED_DTYPE=float32 .venv/bin/python benchmarks/chunk_size.py
#   (2026-11-30, seed 13, 1,480 s on a shared 2-core box at load ~6)
# BEIR SciFact TRAIN, 300 queries, 600 abstracts (277 relevant + distractors),
# doc score = max over its chunks, nDCG@10; Δ = paired mean difference to the best
# row of its layout, ± its standard error. "stream" lays the abstracts end to end
# as one book (windows may straddle two abstracts); "doc" chunks each alone.
#   layout  target overlap  chunks  mean tok  nDCG@10   Δ best   ±SE
#   whole        -       -     600         -   0.8222  (one truncated passage each)
#   stream      64       0    4238        52   0.8246  -0.0076  0.0086
#   stream      64      16    4295        52   0.8283  -0.0040  0.0086
#   stream      96       0    2724        79   0.8322   best
#   stream      96      24    2872        79   0.8297  -0.0025  0.0068
#   stream     128       0    1980       108   0.8163  -0.0160  0.0099
#   stream     128      32    2202       108   0.8138  -0.0184  0.0088
#   stream     192       0    1281       166   0.7944  -0.0378  0.0114
#   stream     192      48    1533       165   0.7999  -0.0323  0.0110
#   stream     256       0     947       224   0.7819  -0.0504  0.0151
#   stream     256      64    1163       224   0.7853  -0.0469  0.0120
#   doc         64      16    4363        51   0.8314  -0.0120  0.0074
#   doc         96      24    2944        76   0.8434   best
#   doc        128      32    2228       104   0.8377  -0.0057  0.0065
#   doc        192      48    1463       160   0.8348  -0.0087  0.0093
#   doc        256      64    1212       195   0.8336  -0.0098  0.0087
# Same run in bf16 (the "auto" default on CPUs with native bf16; 461 s): the same
# ranking - stream 96/24 0.8335 best, 64 -0.007..-0.012, 128 -0.018, 192 -0.035,
# 256 -0.049; doc 96/24 0.8445 best, 128 -0.007, 256 -0.013; whole 0.8232.
# Both layouts peak at a 96-token target; 192-256 lose 0.03-0.05 when windows can
# straddle topics (3-3.5 SE), which is what a book's pages do. Overlap moved
# nothing beyond noise (it is carried in whole sentences, so 25 % is at most one
# short sentence, +5 % chunks); 24 is kept for facts that straddle a cut, which a
# document-level metric cannot see. Targets count special tokens, like max_tokens.
DEFAULT_TARGET_TOKENS = 96
DEFAULT_OVERLAP_TOKENS = 24
# A run shorter than this (a chapter-title page, a heading-only EPUB section) is
# merged into the next run instead of becoming a chunk of its own.
MIN_RUN_CHARS = 120
# A run's last few tokens (a page number, a hyphenated half line) join the
# window before them, up to the hard budget, rather than making a chunk alone.
MIN_TAIL_SHARE = 0.25
# A window holding less than this share of the target may take the next (long)
# sentence even past the target, within the budget, instead of ending tiny.
MIN_FILL = 0.5
# Prefer ending a window at a paragraph end once it holds this share of the target.
PARAGRAPH_FILL = 0.6
FRONT_MATTER_MIN_PAGES = 20
FRONT_MATTER_SHARE = 0.15
TOC_LABEL = "Table of contents"
BOILERPLATE_LABEL = "Licence and publisher notice"


@dataclass
class Chunk:
    ordinal: int
    kind: str               # "text" | "toc" | "boilerplate" (licence / publisher text, not the work)
    page_start: int
    page_end: int
    heading: str | None
    content: str


# --- TOC detection ------------------------------------------------------------------

_CONTENTS = re.compile(r"^(the )?(table of contents|contents|inhalt|inhaltsverzeichnis|содержание|оглавление|"
                       r"table des matières|sommaire|índice|indice|spis treści)\s*[:.]?$", re.IGNORECASE)
_LEADER = re.compile(r"(\.\s?){4,}|…{2,}|_{4,}|·{3,}")
_PAGE_REF = re.compile(r"(^|\s)(\d{1,4}|[ivxlcdm]{1,7})$", re.IGNORECASE)
_CHAPTER_ONLY = re.compile(r"^(chapter|part|book|lecture|глава|часть|kapitel|teil|chapitre)\s+\w+\.?$", re.IGNORECASE)
_WORD = re.compile(r"[^\W\d_]{3}")
_NUMBERED = re.compile(r"^((chapter|part|section|book|appendix|lecture|глава|часть|раздел|kapitel|teil|chapitre)\b"
                       r"|\d+(\.\d+)*\.?(\s|$)|[IVXLC]+\.(\s|$))", re.IGNORECASE)


def is_toc_like(text: str, *, continuation: bool = False) -> bool:
    """Many short lines that end in page numbers, carry dotted leaders or number
    chapters, or a "Contents" heading over short lines. `continuation` (the page
    before was a TOC page) lowers the bar for the TOC's later pages."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return False
    n = len(lines)
    short = sum(1 for line in lines if len(line) <= 80 and len(line.split()) <= 12) / n
    structured = sum(1 for line in lines if _LEADER.search(line) or _PAGE_REF.search(line)
                     or _NUMBERED.match(line)) / n
    if any(_CONTENTS.match(line) for line in lines[:5]) and short >= 0.6:
        return True
    # Page references in a TOC climb down the page; the numbers on a page of
    # Pascal's triangle or Scheme code (SICP pp. 82, 105, inside its 15 % front
    # matter window) do not. Measured, consecutive pairs rising / strictly rising:
    # SICP TOC pp. 3-8 >= 0.96 / >= 0.89, GeoTopo p. 4 0.89 / 0.74; SICP p. 82
    # 0.71 / 0.29, p. 105 0.83 / 0.33.
    refs = [int(m.group(2)) for m in map(_PAGE_REF.search, lines)
            if m and m.group(2).isdigit() and not _CHAPTER_ONLY.match(m.string)]
    if len(refs) >= 6:
        pairs = list(zip(refs, refs[1:]))
        if sum(b >= a for a, b in pairs) < 0.7 * len(pairs) or sum(b > a for a, b in pairs) < 0.4 * len(pairs):
            return False
    if continuation:
        return n >= 3 and short >= 0.6 and structured >= 0.25
    # entries that name something ("CHAPTER 2. The Carpet-Bag.", "Preface 19") or
    # page numbers rising down the page (SICP sets titles and numbers on separate
    # lines); bare numbers and formulas alone are not enough
    entries = sum(1 for line in lines if _WORD.search(line) and (
        _LEADER.search(line) or _PAGE_REF.search(line) or _NUMBERED.match(line))) / n
    return n >= 6 and short >= 0.75 and structured >= 0.4 and (entries >= 0.2 or len(refs) >= 8)


def front_matter_pages(pages: list[Page]) -> int:
    """Last page_no that counts as front matter (reference figures: max(20, 15 %))."""
    total = max((p.page_no for p in pages), default=0)
    return max(FRONT_MATTER_MIN_PAGES, math.ceil(FRONT_MATTER_SHARE * total))


# --- splitting text into sentence units -------------------------------------------------

_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE_END = re.compile(r"[.!?…;]+[\"'»”’)\]]*\s+")


@dataclass
class _Unit:
    start: int
    end: int
    tokens: int
    para_start: bool


def _sentence_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    spans, cursor = [], start
    for match in _SENTENCE_END.finditer(text, start, end):
        nxt = text[match.end()] if match.end() < end else ""
        if nxt and (nxt.isupper() or nxt.isdigit() or nxt in "\"'«“‘([—–-•"):
            spans.append((cursor, match.end()))
            cursor = match.end()
    if cursor < end:
        spans.append((cursor, end))
    return [(s, e) for s, e in ((s, _rstrip(text, s, e)) for s, e in spans) if e > s]


def _rstrip(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


class _Counter:
    """Content tokens (special tokens excluded) of a span of one text."""

    def __init__(self, count_tokens: Callable[[str], int],
                 count_many: Callable[[list[str]], list[int]] | None = None) -> None:
        self.count_tokens = count_tokens
        self.count_many = count_many
        self.overhead = count_tokens("")
        self.known: dict[str, int] = {}   # counts taken ahead (`remember`), by text

    def __call__(self, text: str) -> int:
        known = self.known.get(text)
        return max(0, self.count_tokens(text) - self.overhead) if known is None else known

    def many(self, texts: list[str]) -> list[int]:
        """`self(t)` for each text; one tokenizer call when the model offers one."""
        if self.count_many is None:
            return [self(t) for t in texts]
        return [max(0, n - self.overhead) for n in self.count_many(texts)]

    def remember(self, texts: list[str]) -> None:
        """Count `texts` ahead, in one call, for the calls that will ask for them."""
        todo = [t for t in dict.fromkeys(texts) if t not in self.known]
        self.known.update(zip(todo, self.many(todo)))


def _split_oversize(text: str, start: int, end: int, tokens: int, limit: int, count: _Counter) -> list[tuple[int, int, int]]:
    """Halve a span at the best break near its middle (line, then space, then any
    character) until every piece fits `limit` tokens."""
    if tokens <= limit or end - start <= 1:
        return [(start, end, tokens)]
    mid = (start + end) // 2
    window = max(1, (end - start) // 4)
    cut = -1
    for sep in ("\n", " "):
        left = text.rfind(sep, mid - window, mid + 1)
        right = text.find(sep, mid, mid + window)
        candidates = [c for c in (left, right) if start < c < end - 1]
        if candidates:
            cut = min(candidates, key=lambda c: abs(c - mid)) + 1
            break
    if cut <= start:
        cut = mid
    out = []
    for s, e in ((start, _rstrip(text, start, cut)), (cut, end)):
        while s < e and text[s].isspace():
            s += 1
        if e > s:
            out.extend(_split_oversize(text, s, e, count(text[s:e]), limit, count))
    return out


def _units(text: str, limit: int, count: _Counter) -> list[_Unit]:
    spans: list[tuple[int, int, bool]] = []  # (start, end, first sentence of its paragraph)
    cursor = 0
    for para_end, next_start in [(m.start(), m.end()) for m in _PARAGRAPH.finditer(text)] + [(len(text), len(text))]:
        spans.extend((s, e, k == 0) for k, (s, e) in enumerate(_sentence_spans(text, cursor, para_end)))
        cursor = next_start
    # every sentence counted in one call: the tokenizer's per-call cost was the larger part
    # of chunking a short file (one call per sentence)
    units: list[_Unit] = []
    for (s, e, first), tokens in zip(spans, count.many([text[s:e] for s, e, _ in spans])):
        for ps, pe, pt in _split_oversize(text, s, e, tokens, limit, count):
            units.append(_Unit(ps, pe, pt, first))
            first = False
    return units


# --- chunking -------------------------------------------------------------------------

@dataclass
class _Run:
    kind: str
    heading: str | None
    pages: list[Page]


def _runs(pieces: list[tuple[Page, str]]) -> list[_Run]:
    limit = front_matter_pages([p for p, _ in pieces])
    runs: list[_Run] = []
    previous_toc = False
    for page, piece_kind in pieces:
        toc = piece_kind != BOILERPLATE and page.page_no <= limit and is_toc_like(page.text, continuation=previous_toc)
        kind = BOILERPLATE if piece_kind == BOILERPLATE else "toc" if toc else "text"
        last = runs[-1] if runs else None
        # boilerplate is one run whatever its headings: it is never read as the work
        if last is not None and last.kind == kind and (kind != "text" or last.heading == page.heading):
            last.pages.append(page)
        else:
            runs.append(_Run(kind, page.heading, [page]))
        previous_toc = toc
    # a lone chapter-title page says little on its own: it joins the run after it
    merged: list[_Run] = []
    carry: list[Page] = []
    for i, run in enumerate(runs):
        if run.kind == "text":
            run.pages = carry + run.pages
            carry = []
            size = sum(len(p.text.strip()) for p in run.pages)
            nxt = runs[i + 1] if i + 1 < len(runs) else None
            if size < MIN_RUN_CHARS and nxt is not None and nxt.kind == "text":
                carry = run.pages
                continue
        merged.append(run)
    return merged


def _joined(pages: list[Page]) -> tuple[str, list[int]]:
    texts = [p.text.strip() for p in pages]
    offsets, pos = [], 0
    for text in texts:
        offsets.append(pos)
        pos += len(text) + 2
    return "\n\n".join(texts), offsets


def _fit(content: str, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """Last-resort trim for a tokenizer whose counts are not additive."""
    while count_tokens(content) > max_tokens and len(content) > 1:
        content = content[: int(len(content) * 0.9)].rstrip()
        log.debug("trimmed an over-budget chunk to %d chars", len(content))
    return content


def _paragraph_groups(units: list[_Unit], target: int) -> list[list[_Unit]]:
    """Paragraphs windowed on their own, short ones joined to the next.

    Windows used to flow across paragraph ends (overlap carried the last
    sentence over). Then one edited paragraph shifted the phase of every window
    after it: measured on a 40-paragraph file, editing paragraph 20 re-embedded
    38 of 80 chunks. Windowing each paragraph (or group of short ones) on its
    own makes the chunks after an edit identical again from the next group on,
    so content-hash reuse re-embeds only the edited neighbourhood (1-3 chunks).
    """
    groups: list[list[_Unit]] = []
    tokens = 0
    for unit in units:
        if unit.para_start and groups and tokens >= PARAGRAPH_FILL * target:
            groups.append([])
            tokens = 0
        if not groups:
            groups.append([])
        groups[-1].append(unit)
        tokens += unit.tokens
    return groups


def _text_chunks(run: _Run, target: int, overlap: int, budget: int, count: _Counter) -> list[tuple[str, int, int]]:
    text, offsets = _joined(run.pages)
    groups = _paragraph_groups(_units(text, target, count), target)
    # Windowing checks each window's own count (counts are not quite additive): one
    # tokenizer call per window was the larger part of chunking a short file. A first
    # pass that takes every window to fit names the windows; their counts come in one
    # call; the real pass below then finds them known (and counts any window it
    # changed, so the chunks are those of counting one by one).
    if count.count_many is not None:
        planned: list[str] = []
        for group in groups:
            _window(group, text, offsets, run, target, overlap, budget, count,
                    fits=lambda c: planned.append(c) or True)
        count.remember(planned)
    out: list[tuple[str, int, int]] = []
    for group in groups:
        out.extend(_window(group, text, offsets, run, target, overlap, budget, count))
    return out


def _window(units: list[_Unit], text: str, offsets: list[int], run: _Run, target: int, overlap: int,
            budget: int, count: _Counter, fits: Callable[[str], bool] | None = None) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    i, n = 0, len(units)
    after = [0] * (n + 1)  # tokens from unit k to the end of the run
    for k in range(n - 1, -1, -1):
        after[k] = after[k + 1] + units[k].tokens
    while i < n:
        j, total = i, 0
        # a short sentence before a long one may overrun the target (never the
        # budget) rather than become a chunk of its own
        while j < n and (j == i or total + units[j].tokens <= target
                         or (total < MIN_FILL * target and total + units[j].tokens <= budget)):
            total += units[j].tokens
            j += 1
        if j < n and after[j] <= MIN_TAIL_SHARE * target and total + after[j] <= budget:
            j, total = n, total + after[j]  # a stray page number or half sentence joins its neighbour
        if j < n:  # end at a paragraph end if one leaves the window reasonably full
            fill = total
            for k in range(j - 1, i, -1):
                fill -= units[k].tokens
                if units[k].para_start and fill >= PARAGRAPH_FILL * target:
                    j = k
                    break
        while True:
            content = text[units[i].start: units[j - 1].end]
            fit = fits(content) if fits is not None else count(content) <= budget
            if fit or j - 1 == i:
                break
            j -= 1
        if not fit:
            content = _fit(content, budget + count.overhead, count.count_tokens)
        first = bisect.bisect_right(offsets, units[i].start) - 1
        last = bisect.bisect_right(offsets, units[j - 1].end - 1) - 1
        out.append((content, run.pages[first].page_no, run.pages[last].page_no))
        if j >= n:
            break
        k, carried = j, 0
        while k - 1 > i and carried + units[k - 1].tokens <= overlap:
            carried += units[k - 1].tokens
            k -= 1
        # the overlap must leave room for the next new sentence, or the next
        # window would repeat old sentences and nothing else
        while k < j and carried + units[j].tokens > target:
            carried -= units[k].tokens
            k += 1
        i = k
    return out


def _toc_chunks(run: _Run, budget: int, count: _Counter) -> list[tuple[str, int, int]]:
    """A TOC run fills whole chunks up to the embedder's budget, split only at line ends."""
    lines: list[tuple[str, int, int]] = []  # (line, tokens, page_no)
    for page in run.pages:
        for line in page.text.strip().splitlines():
            if line.strip():
                line = line.strip()
                tokens = count(line)
                if tokens > budget:  # a pathological single line: cut it like prose
                    for s, e, t in _split_oversize(line, 0, len(line), tokens, budget, count):
                        lines.append((line[s:e], t, page.page_no))
                else:
                    lines.append((line, tokens, page.page_no))
    out: list[tuple[str, int, int]] = []
    pending = _balanced_groups([t for _, t, _ in lines], budget)
    while pending:
        i, j = pending.pop(0)
        content = "\n".join(line for line, _, _ in lines[i:j])
        if j - i > 1 and count(content) > budget:  # estimate was short: halve and retry
            mid = (i + j) // 2
            pending[:0] = [(i, mid), (mid, j)]
            continue
        if count(content) > budget:
            content = _fit(content, budget + count.overhead, count.count_tokens)
        out.append((content, lines[i][2], lines[j - 1][2]))
    return out


def _balanced_groups(tokens: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive groups, each within `budget`, as few as possible and of similar
    size: a 1,100-token TOC becomes 5 x 220, not 4 full chunks and an 8-token stub."""
    n, total = len(tokens), sum(tokens)
    cum = [0]
    for t in tokens:
        cum.append(cum[-1] + t)
    for k in range(max(1, math.ceil(total / budget)), n + 1):
        cuts = [0]
        for m in range(1, k):
            goal = total * m / k
            idx = bisect.bisect_left(cum, goal)
            if idx > 0 and goal - cum[idx - 1] < cum[idx] - goal:
                idx -= 1
            cuts.append(min(max(idx, cuts[-1] + 1), n))
        cuts.append(n)
        groups = [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
        if all(cum[b] - cum[a] <= budget or b - a == 1 for a, b in groups):
            return groups
    return [(i, i + 1) for i in range(n)]


def chunk_pages(pages: list[Page], *, count_tokens: Callable[[str], int], max_tokens: int,
                target_tokens: int | None = None, overlap_tokens: int | None = None,
                count_many: Callable[[list[str]], list[int]] | None = None) -> list[Chunk]:
    """Chunks of at most `max_tokens` (as `count_tokens` measures them, special
    tokens included). `target_tokens` is the prose window (same measure), capped
    at `max_tokens`; `overlap_tokens` is carried between windows, in whole
    sentences, at most half the window. `count_many`: `count_tokens` of many texts
    in one call (the same counts, faster), when the model has it."""
    count = _Counter(count_tokens, count_many)
    budget = max_tokens - count.overhead
    if budget < 8:
        raise ValueError(f"max_tokens={max_tokens} leaves no room for content")
    target = min(target_tokens or DEFAULT_TARGET_TOKENS, max_tokens) - count.overhead
    target = max(target, 8)
    overlap = DEFAULT_OVERLAP_TOKENS if overlap_tokens is None else overlap_tokens
    overlap = max(0, min(overlap, target // 2))
    usable = sorted((p for p in pages if p.text and p.text.strip()), key=lambda p: p.page_no)
    chunks: list[Chunk] = []
    for run in _runs(split_boilerplate(usable)):
        if run.kind == BOILERPLATE:
            pieces = _text_chunks(run, target, overlap, budget, count)
            heading = BOILERPLATE_LABEL
        elif run.kind == "toc":
            pieces = _toc_chunks(run, budget, count)
            # the heading says what the chunk is, so the contextual prefix carries
            # "table of contents" into the embedding (agent-library's TOC chunk scored 0.44 cosine against that query)
            heading = run.heading if run.heading and _CONTENTS.match(run.heading) else TOC_LABEL
        else:
            pieces = _text_chunks(run, target, overlap, budget, count)
            heading = run.heading
        for content, first, last in pieces:
            if content.strip():
                chunks.append(Chunk(len(chunks), run.kind, first, last, heading, content))
    log.debug("chunked %d pages into %d chunks (%d toc, %d boilerplate)", len(usable), len(chunks),
              sum(c.kind == "toc" for c in chunks), sum(c.kind == BOILERPLATE for c in chunks))
    return chunks


__all__ = ["Chunk", "chunk_pages", "is_toc_like", "front_matter_pages", "DEFAULT_TARGET_TOKENS",
           "DEFAULT_OVERLAP_TOKENS"]
