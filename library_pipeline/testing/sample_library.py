"""A small real library for the search tests (library_pipeline_tests/search_fixtures.py
builds it once per session) and the search benchmark's "sample library" figures
(benchmarks/search.py), inserted directly as documents + passages rows with real
MiniLM embeddings. The material is library_pipeline_tests/data; callers pass
its folder.

Real text only: chapters of three Project Gutenberg EPUBs, SICP's front
matter with its actual table of contents (which says "Contents", not "Table
of Contents"), the Russian Pushkin novel (ts_config russian), a Federal
Register notice, Quartz vault notes (source 'vault'), SciFact abstracts as
bulk (one document per paper, a slug of its title as the file name), a
removed document, and extractive summary rows (summary_level 1).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg
from pgvector import HalfVector

from serving.db import Database
from serving.embedding import embed_text_for_passage

SCIFACT_DOCS = 80


@dataclass
class Chunk:
    content: str
    kind: str = "text"
    heading: str | None = None
    page_start: int | None = None
    page_end: int | None = None


@dataclass
class Doc:
    path: str
    title: str
    format: str
    language: str
    ts_config: str
    source: str = "library"
    status: str = "ingested"
    chunks: list[Chunk] = field(default_factory=list)


def chunk_text(text: str, size: int = 900) -> list[str]:
    """Paragraph-packing window; long paragraphs split at sentence ends."""
    pieces: list[str] = []
    for para in re.split(r"\n\s*\n|\r\n\s*\r\n", text):
        para = re.sub(r"\s+", " ", para).strip()
        while len(para) > size:
            cut = para.rfind(". ", 0, size)
            cut = cut + 1 if cut > size // 3 else size
            pieces.append(para[:cut].strip())
            para = para[cut:].strip()
        if para:
            pieces.append(para)
    chunks, current = [], ""
    for piece in pieces:
        if current and len(current) + len(piece) + 1 > size:
            chunks.append(current)
            current = piece
        else:
            current = f"{current} {piece}".strip()
    if current:
        chunks.append(current)
    return chunks


def _epub_chapters(path: Path) -> list[tuple[str, str]]:
    import ebooklib
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning
    from ebooklib import epub

    warnings.filterwarnings("ignore", category=XMLParsedAsHTMLWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="ebooklib")
    warnings.filterwarnings("ignore", category=FutureWarning, module="ebooklib")
    book = epub.read_epub(str(path))
    out = []
    for item in book.get_items_of_type(ebooklib.ITEM_DOCUMENT):
        soup = BeautifulSoup(item.get_content(), "lxml")
        heading = soup.find(["h1", "h2", "h3"])
        paras = [p.get_text(" ", strip=True) for p in soup.find_all("p")]
        out.append(((heading.get_text(" ", strip=True) if heading else ""), "\n\n".join(paras)))
    return out


def _epub_doc(data: Path, name: str, title: str, chapters: slice, per_chapter: int) -> Doc:
    doc = Doc(f"epub/{name}", title, "epub", "en", "english")
    for heading, text in _epub_chapters(data / "documents" / "epub" / name)[chapters]:
        for piece in chunk_text(text)[:per_chapter]:
            doc.chunks.append(Chunk(piece, heading=heading[:120] or None))
    return doc


def _sicp(data: Path) -> Doc:
    import pymupdf

    pdf = pymupdf.open(data / "documents" / "pdf" / "sicp-2nd-ed-sarabander.pdf")
    doc = Doc("pdf/sicp-2nd-ed-sarabander.pdf", "Structure and Interpretation of Computer Programs, 2nd ed.",
              "pdf", "en", "english")
    # TOC pages kept whole (the reference chunker keeps contiguous front-matter TOC pages together)
    for first, last in ((3, 4), (5, 6), (7, 8)):
        text = "\n".join(pdf[p - 1].get_text() for p in range(first, last + 1))
        doc.chunks.append(Chunk(re.sub(r"[ \t]+", " ", text).strip(), kind="toc", heading="Contents",
                                page_start=first, page_end=last))
    for page in list(range(12, 20)) + list(range(29, 37)):
        for piece in chunk_text(pdf[page - 1].get_text().replace("\n", " "))[:1]:
            doc.chunks.append(Chunk(piece, page_start=page, page_end=page))
    return doc


def _pushkin(data: Path) -> Doc:
    text = (data / "documents" / "text_ru" / "pushkin_kapitanskaya-dochka.txt").read_text(encoding="utf-8")
    doc = Doc("text_ru/pushkin_kapitanskaya-dochka.txt", "Капитанская дочка", "txt", "ru", "russian")
    parts = re.split(r"\n(ГЛАВА [IVXL]+|ПРОПУЩЕННАЯ ГЛАВА)\n", text)
    # parts: [preamble, 'ГЛАВА I', body, 'ГЛАВА II', body, ...]
    for i in range(1, min(len(parts), 17), 2):
        for piece in chunk_text(parts[i + 1].replace("\n", "\n\n"))[:3]:
            doc.chunks.append(Chunk(piece, heading=parts[i]))
    return doc


def _federal_register(data: Path) -> Doc:
    import pymupdf

    pdf = pymupdf.open(data / "documents" / "pdf" / "federal-register-2020-17221.pdf")
    doc = Doc("pdf/federal-register-2020-17221.pdf", "Airworthiness Directives; The Boeing Company Airplanes",
              "pdf", "en", "english")
    for page in (1, 2, 3):
        for piece in chunk_text(pdf[page - 1].get_text().replace("\n", " "))[:2]:
            doc.chunks.append(Chunk(piece, page_start=page, page_end=page))
    return doc


def _vault(data: Path) -> list[Doc]:
    docs = []
    root = data / "obsidian_vaults" / "quartz_docs"
    for name in ("configuration.md", "hosting.md", "philosophy.md", "build.md", "layout.md"):
        text = re.sub(r"^---.*?---", "", (root / name).read_text(encoding="utf-8"), flags=re.S)
        doc = Doc(f"quartz_docs/{name}", name[:-3].capitalize(), "md", "en", "english", source="vault")
        for piece in chunk_text(text)[:2]:
            doc.chunks.append(Chunk(piece, kind="note"))
        docs.append(doc)
    return docs


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def _scifact(data: Path, n: int) -> list[Doc]:
    docs = []
    with open(data / "beir_scifact" / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            doc = Doc(f"scifact/{row['_id']}-{_slug(row['title'])}.txt", row["title"], "txt", "en", "english")
            doc.chunks = [Chunk(c) for c in chunk_text(row["text"], 1000)]
            docs.append(doc)
            if len(docs) >= n:
                break
    return docs


def sample_documents(data: Path, scifact_docs: int = SCIFACT_DOCS) -> list[Doc]:
    docs = [
        _epub_doc(data, "pg1661-sherlock-holmes.epub", "The Adventures of Sherlock Holmes", slice(1, 4), 6),
        _epub_doc(data, "pg2701-moby-dick.epub", "Moby Dick; Or, The Whale", slice(3, 7), 5),
        _epub_doc(data, "pg11-alice-in-wonderland.epub", "Alice's Adventures in Wonderland", slice(1, 5), 3),
        _sicp(data),
        _pushkin(data),
        _federal_register(data),
        *_vault(data),
    ]
    removed = Doc("epub/old-edition/hound-of-the-baskervilles.txt", "The Hound of the Baskervilles", "txt",
                  "en", "english", status="removed")
    removed.chunks = [Chunk("Mr. Sherlock Holmes, who was usually very late in the mornings, was seated at the "
                            "breakfast table. The hound of the Baskervilles howled over the moor at Grimpen Mire.")]
    return docs + [removed] + _scifact(data, scifact_docs)


_EMBEDDINGS: dict[str, np.ndarray] = {}
EMBED_CACHE: Path | None = None  # set by the tests' corpus fixture: pytest's cache dir, survives between runs


def _load_cache(embedder) -> Path | None:
    if EMBED_CACHE is None:
        return None
    path = EMBED_CACHE / (hashlib.sha1(embedder.name.encode()).hexdigest()[:12] + ".npz")
    if path.exists() and not _EMBEDDINGS:
        try:
            with np.load(path) as stored:
                _EMBEDDINGS.update({k: stored[k] for k in stored.files})
        except (OSError, ValueError):
            pass
    return path


def embed_all(embedder, texts: list[str]) -> np.ndarray:
    """Embeddings memoised by text hash: per process, and across runs in pytest's
    cache (MiniLM manages ~7-30 passages/s on 2 busy cores; a cold run embeds ~250)."""
    cache = _load_cache(embedder)
    keys = [hashlib.sha1(t.encode("utf-8")).hexdigest() for t in texts]
    missing = [(k, t) for k, t in zip(keys, texts) if k not in _EMBEDDINGS]
    if missing:
        vectors = embedder.encode_passages([t for _, t in missing])
        for (k, _), v in zip(missing, vectors):
            _EMBEDDINGS[k] = v
        if cache is not None:
            np.savez(cache, **_EMBEDDINGS)
    return np.stack([_EMBEDDINGS[k] for k in keys]) if keys else np.zeros((0, embedder.dims), np.float32)


def insert_documents(conn: psycopg.Connection, embedder, docs: list[Doc]) -> dict[str, int]:
    """Insert documents and their passages (+ extractive level-1 summaries for books). Returns path -> id."""
    conn.execute("SELECT ensure_vector_indexes(%s, %s)", (embedder.name, embedder.dims))
    rows, ids = [], {}
    for doc in docs:
        doc_id = conn.execute(
            "INSERT INTO documents (source, path, partition_key, title, format, language, ts_config, pages, "
            "status, indexed_hash) VALUES (%s, %s, %s, %s, %s, %s, %s::regconfig, %s, %s, 'x') RETURNING id",
            (doc.source, doc.path, uuid.uuid4().hex, doc.title, doc.format, doc.language, doc.ts_config,
             max([c.page_end or 0 for c in doc.chunks] + [0]) or None, doc.status)).fetchone()[0]
        ids[doc.path] = doc_id
        for ordinal, chunk in enumerate(doc.chunks):
            rows.append((doc, doc_id, ordinal, chunk, 0))
        if len(doc.chunks) >= 8 and doc.source == "library" and doc.status == "ingested":
            firsts = [re.split(r"(?<=[.!?])\s", c.content, maxsplit=1)[0] for c in doc.chunks if c.kind == "text"]
            rows.append((doc, doc_id, len(doc.chunks), Chunk(" ".join(firsts[:6])[:1500], kind="summary"), 1))
    texts = [embed_text_for_passage(d.title, c.heading, c.content) for d, _, _, c, _ in rows]
    vectors = embed_all(embedder, texts)
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO passages (document_id, source, ordinal, kind, summary_level, page_start, page_end, heading, "
            "content, content_hash, ts_config, embedding, embed_model, removed) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::regconfig, %s, %s, %s)",
            [(doc_id, d.source, ordinal, c.kind, level, c.page_start, c.page_end, c.heading, c.content,
              hashlib.sha256(c.content.encode()).hexdigest(), d.ts_config, HalfVector(v), embedder.name,
              d.status == "removed")
             for (d, doc_id, ordinal, c, level), v in zip(rows, vectors)])
    return ids


def create_database(server_db: Database, name: str | None = None) -> Database:
    """A fresh database on the session server (like conftest's make_db, session-scoped)."""
    import dataclasses

    name = name or f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_db.dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(server_db.dsn)
    info["dbname"] = name
    db = Database(dataclasses.replace(server_db.settings, db_dsn=psycopg.conninfo.make_conninfo(**info)))
    db.ensure_schema()
    return db


@dataclass
class Corpus:
    db: Database
    ids: dict[str, int]
    docs: list[Doc]


def build_corpus(db: Database, embedder, data: Path) -> Corpus:
    from serving.lexemes import refresh_lexeme_df

    docs = sample_documents(data)
    with db.connect() as conn:
        ids = insert_documents(conn, embedder, docs)
        conn.commit()
        refresh_lexeme_df(conn)
    return Corpus(db, ids, docs)


def small_library(db: Database, embedder, data: Path, *, books: int = 3, refresh: bool = True) -> Corpus:
    """A few books only (embeddings come from the per-process cache): for tests that
    write breaker state or otherwise must not touch the shared corpus."""
    from serving.lexemes import refresh_lexeme_df

    docs = sample_documents(data, scifact_docs=0)[:books]
    with db.connect() as conn:
        ids = insert_documents(conn, embedder, docs)
        conn.commit()
        if refresh:
            refresh_lexeme_df(conn)
    return Corpus(db, ids, docs)
