"""Split a long memory into passages the embedder reads whole.

serving must deploy without library_pipeline, so this is not the book chunker
(library_pipeline.ingest.chunking): memories are short prose, and a window
of whole tokens, cut at a whitespace where possible, is enough. Token-exact with
the embedder's own tokenizer when it exposes offsets; ~4 characters per token
otherwise (Ollama).
"""

from __future__ import annotations

from serving.embedding import Embedder

OVERLAP_TOKENS = 32


def chunk_memory(text: str, embedder: Embedder, *, max_tokens: int | None = None,
                 overlap: int = OVERLAP_TOKENS) -> list[str]:
    limit = (max_tokens or embedder.max_tokens) - 2  # [CLS] / [SEP]
    offsets_fn = getattr(embedder, "token_offsets", None)
    if offsets_fn is None:
        size = limit * 4
        if len(text) <= size:
            return [text]
        step = size - overlap * 4
        return [text[i:i + size] for i in range(0, len(text), step) if text[i:i + size].strip()]
    spans = offsets_fn(text)
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
