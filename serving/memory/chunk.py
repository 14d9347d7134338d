"""Split a long memory into passages the embedder reads whole.

serving must deploy without library_pipeline, so this is not the book chunker
(library_pipeline.ingest.chunking): memories are short prose, and a window
of whole tokens, cut at a whitespace where possible, is enough. Token-exact with
the embedder's own tokenizer when it exposes offsets; ~4 characters per token
otherwise (Ollama).

A long memory written as lines (a chat session saved as one note, a log, a list of
findings) is cut between its lines instead, a few lines per passage (`LINE_TOKENS`):
one passage of the window's 254 tokens held some 20 turns of a conversation, and its
one vector stood for all of them, so a question about one turn matched the whole
mixture weakly. On LoCoMo's dev half (136 whole-session notes in one agent's index, 786
questions, R@5 over sessions; docs/evaluation.md): windows 0.8576, lines 0.8562, lines
whose passages carry the note's first line (store.passage_headings) 0.8711, and scored
best + half + quarter of their passages (store.record_score) 0.8792. Lines alone lose the
session's date and header, which is why they need the first line.
"""

from __future__ import annotations

from serving.embedding import Embedder

OVERLAP_TOKENS = 32
# Lines are packed into a passage up to this many tokens (a line longer than the window is
# cut as prose). 64: a LoCoMo turn is 40 tokens on average, so most turns stand alone and
# short ones ("Thanks!") join their neighbour.
LINE_TOKENS = 64
# A memory is cut between lines only when it has at least this many lines (a paragraph or
# two of prose keeps the window chunks) and each passage holds LINE_TOKENS or fewer tokens.
MIN_LINES = 4


def split_memory(text: str, embedder: Embedder, *, max_tokens: int | None = None,
                 overlap: int = OVERLAP_TOKENS, line_tokens: int | None = LINE_TOKENS,
                 max_chunks: int | None = None) -> tuple[list[str], bool]:
    """(passages, whether they were cut between lines). A text written as lines (MIN_LINES
    or more non-empty lines) longer than the window is cut between lines, whole lines
    packed up to `line_tokens` per passage (None: never), unless that would make more than
    `max_chunks` passages; otherwise windows of tokens with `overlap`."""
    limit = (max_tokens or embedder.max_tokens) - 2  # [CLS] / [SEP]
    offsets_fn = getattr(embedder, "token_offsets", None)
    if offsets_fn is None:
        size = limit * 4
        if len(text) <= size:
            return [text], False
        if line_tokens:
            lines = _by_lines(text, lambda s: (len(s) + 3) // 4, line_tokens, limit, max_chunks)
            if lines is not None:
                return [c for line in lines for c in _windows_chars(line, size, overlap)], True
        return _windows_chars(text, size, overlap), False
    spans = offsets_fn(text)
    if len(spans) <= limit:
        return [text], False
    if line_tokens:
        lines = _by_lines(text, lambda s: len(offsets_fn(s)), line_tokens, limit, max_chunks)
        if lines is not None:
            return [c for line in lines for c in _windows_tokens(line, offsets_fn(line), limit, overlap)], True
    return _windows_tokens(text, spans, limit, overlap), False


def _by_lines(text: str, count, budget: int, limit: int, max_chunks: int | None) -> list[str] | None:
    """Whole lines packed greedily up to `budget` tokens per piece (a line over the window
    stays one piece, cut later); None when the text has fewer than MIN_LINES lines or the
    pieces would exceed `max_chunks`."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) < MIN_LINES:
        return None
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for line in lines:
        n = count(line)
        if current and used + n > budget:
            pieces.append("\n".join(current))
            current, used = [], 0
        current.append(line)
        used += n
        if max_chunks is not None and len(pieces) + (n + limit - 1) // limit > max_chunks:
            return None
    if current:
        pieces.append("\n".join(current))
    if max_chunks is not None and len(pieces) > max_chunks:
        return None
    return pieces


def _windows_chars(text: str, size: int, overlap: int) -> list[str]:
    if len(text) <= size:
        return [text]
    step = size - overlap * 4
    return [text[i:i + size] for i in range(0, len(text), step) if text[i:i + size].strip()]


def _windows_tokens(text: str, spans: list[tuple[int, int]], limit: int, overlap: int) -> list[str]:
    if len(spans) <= limit:
        return [text]
    chunks: list[str] = []
    start_tok = 0
    while start_tok < len(spans):
        end_tok = min(start_tok + limit, len(spans))
        start_char = spans[start_tok][0]
        end_char = spans[end_tok - 1][1] if end_tok == len(spans) else spans[end_tok][0]
        if end_tok < len(spans):
            # back off to the last whitespace in the window's final quarter
            cut = text.rfind(" ", start_char + (end_char - start_char) * 3 // 4, end_char)
            if cut > start_char:
                end_char = cut
                while end_tok > start_tok + 1 and spans[end_tok - 1][0] >= end_char:
                    end_tok -= 1
        piece = text[start_char:end_char].strip()
        if piece:
            chunks.append(piece)
        if end_tok >= len(spans):
            break
        start_tok = max(end_tok - overlap, start_tok + 1)
    return chunks
