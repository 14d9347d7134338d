"""BEIR-format datasets, and loading one into an isolated library database
through the pipeline's own chunk / embed / lexeme code.

A BEIR directory holds `corpus.jsonl` ({_id, title, text}), `queries.jsonl`
({_id, text}) and `qrels/<split>.tsv` (query-id, corpus-id, score; header).

Loading: one `documents` row per BEIR document (path = the BEIR doc id, so a
search result's `path` is the doc id; title = the BEIR title; language detected as
ingest detects it, so a Russian corpus is stemmed as Russian) and
one `pages` row holding the text; then the ingest stage's own `chunk_step`
and `embed_step` (library_pipeline.ingest.store) for every document, and
`serving.lexemes.refresh_lexeme_df`. Nothing about chunking, the embedded text
(title prefix) or the stored tsvector is re-implemented here.

Speed: `embed_step` embeds one document's chunks per call, i.e. batches of ~3
texts, which wastes most of the encoder. As the ingest asset does, the chunks of
many documents are encoded by each vector lane's model in one call beforehand
(`library_pipeline.ingest.batching`: `batched_writer`, `prefetch`) and `embed_step` gets a writer
whose models answer from those vectors, so `embed_step` itself - its reuse rule,
its atomic swap, its bookkeeping - runs unchanged.

Isolation: the evaluation never touches the user's library. It uses its own
database `library_eval_<dataset>` on the embedded server (or LIBRARY_EVAL_DSN /
an explicit DSN). Re-running is cheap: documents whose content hash is already
indexed are skipped, and vectors are reused by embedded-text hash.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.types.json import Jsonb

from library_pipeline.ingest import chunking
from library_pipeline.documents import partition_key_for
from library_pipeline.ingest.batching import batched_writer, prefetch
from library_pipeline.ingest.store import chunk_step, embed_step
from serving.db import Database
from serving.embedding import Embedder, chunk_counter, sha256
from serving.lexemes import refresh_lexeme_df
from serving.passage_writer import build_vector_indexes
from serving.settings import get_settings

log = logging.getLogger(__name__)


@dataclass
class BeirDataset:
    name: str
    corpus: dict[str, dict[str, str]]          # doc id -> {"title", "text"}
    queries: dict[str, str]                    # query id -> text (only those with qrels in the split)
    qrels: dict[str, dict[str, int]]           # query id -> {doc id: relevance}
    split: str

    def subset(self, query_ids: list[str]) -> BeirDataset:
        return dataclasses.replace(self, queries={q: self.queries[q] for q in query_ids},
                                   qrels={q: self.qrels[q] for q in query_ids})


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        for row in reader:
            if not row or len(row) < 3:
                continue
            qid, did, score = row[0].strip(), row[1].strip(), row[2].strip()
            if qid.lower() in ("query-id", "query_id", "qid"):
                continue  # header
            qrels.setdefault(qid, {})[did] = int(float(score))
    return qrels


def load_beir(directory: Path | str, split: str = "test") -> BeirDataset:
    directory = Path(directory)
    corpus: dict[str, dict[str, str]] = {}
    with (directory / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                doc = json.loads(line)
                corpus[str(doc["_id"])] = {"title": doc.get("title") or "", "text": doc.get("text") or ""}
    all_queries: dict[str, str] = {}
    with (directory / "queries.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                q = json.loads(line)
                all_queries[str(q["_id"])] = q["text"]
    qrels_path = directory / "qrels" / f"{split}.tsv"
    if not qrels_path.exists():
        raise FileNotFoundError(f"no qrels for split {split!r}: {qrels_path}")
    qrels = read_qrels(qrels_path)
    missing = [q for q in qrels if q not in all_queries]
    if missing:
        raise ValueError(f"{len(missing)} qrels queries are not in queries.jsonl (e.g. {missing[0]!r})")
    queries = {q: all_queries[q] for q in sorted(qrels, key=_natural)}
    return BeirDataset(name=directory.name, corpus=corpus, queries=queries, qrels=qrels, split=split)


def _natural(s: str):
    return (0, int(s), "") if s.isdigit() else (1, 0, s)


# -- isolated database -----------------------------------------------------------

def database_name(dataset: str) -> str:
    slug = re.sub(r"[^a-z0-9_]+", "_", dataset.lower()).strip("_") or "dataset"
    return f"library_eval_{slug}"[:63]


def eval_database(dataset: str, *, dsn: str | None = None, base: Database | None = None) -> Database:
    """A Database for the evaluation of `dataset`, never the user's library.

    `dsn` (or LIBRARY_EVAL_DSN) is used as given. Otherwise a database named
    library_eval_<dataset> is created on the server `base` points at (by default
    the embedded server of the current settings, or the server of LIBRARY_DB_DSN).
    """
    settings = base.settings if base is not None else get_settings()
    dsn = dsn or settings.eval_dsn
    if dsn is not None:
        if settings.db_dsn and dsn == settings.db_dsn:
            raise ValueError("refusing to load an evaluation corpus into the library database itself")
        db = Database(dataclasses.replace(settings, db_dsn=dsn))
        db.ensure_schema()
        return db
    base = base or Database()
    name = database_name(dataset)
    with psycopg.connect(base.dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            try:
                conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
            except psycopg.errors.DuplicateDatabase:
                pass
    info = psycopg.conninfo.conninfo_to_dict(base.dsn)
    info["dbname"] = name
    db = Database(dataclasses.replace(base.settings, db_dsn=psycopg.conninfo.make_conninfo(**info)))
    db._server_keepalive = base  # noqa: SLF001 - the embedded server's owner lives as long as this
    db.ensure_schema()
    return db


def release(db: Database) -> None:
    """Give up the claim on the embedded server that `eval_database` took."""
    db.stop()
    keeper = getattr(db, "_server_keepalive", None)
    if keeper is not None:
        keeper.stop()


# -- loading ------------------------------------------------------------------------

def chunking_fingerprint(embedder: Embedder) -> dict:
    """What, besides the text, decides the passages: a change re-chunks everything."""
    return {"model": embedder.name, "target_tokens": chunking.DEFAULT_TARGET_TOKENS,
            "overlap_tokens": chunking.DEFAULT_OVERLAP_TOKENS, "max_tokens": embedder.max_tokens,
            # texts the primary model does not read are sized by the multilingual one
            "other_languages": getattr(chunk_counter(embedder, "ru"), "name", None)}


def doc_hash(doc: dict[str, str]) -> str:
    return sha256(f"{doc['title']}\x1f{doc['text']}")


UPSERT_DOC_SQL = """
INSERT INTO documents (source, path, partition_key, title, format, language, ts_config, pages,
                       content_hash, status)
VALUES ('library', %(path)s, %(key)s, %(title)s, 'txt', %(lang)s, ts_config_for_language(%(lang)s), 1,
        %(hash)s, 'pending')
ON CONFLICT (source, path) DO UPDATE
   SET title = EXCLUDED.title, content_hash = EXCLUDED.content_hash, pages = 1,
       language = EXCLUDED.language, ts_config = EXCLUDED.ts_config, status = 'pending', error = NULL,
       updated_at = now()
RETURNING id
"""

# bm25s / PyStemmer names of the ISO 639-1 codes the schema's ts_config_for_language stems
STEMMERS = {"en": "english", "ru": "russian", "de": "german", "fr": "french", "es": "spanish",
            "it": "italian", "pt": "portuguese", "nl": "dutch", "sv": "swedish", "no": "norwegian",
            "da": "danish", "fi": "finnish", "hu": "hungarian", "ro": "romanian", "tr": "turkish"}


def document_languages(dataset: BeirDataset) -> dict[str, str]:
    """doc id -> ISO 639-1 code, detected as ingest detects a file's language
    (library_pipeline.ingest.extract.detect_language), so each passage is stemmed
    in its own language; a document too short to tell takes the corpus's majority."""
    from collections import Counter

    from library_pipeline.ingest.extract import detect_language

    found = {did: detect_language(f"{doc['title']}\n{doc['text']}") for did, doc in dataset.corpus.items()}
    counts = Counter(lang for lang in found.values() if lang)
    majority = counts.most_common(1)[0][0] if counts else "en"
    return {did: lang or majority for did, lang in found.items()}


def collection_language(dataset: BeirDataset) -> str:
    """The corpus's majority language (ISO 639-1), from a sample of its documents."""
    from collections import Counter

    from library_pipeline.ingest.extract import detect_language

    ids = list(dataset.corpus)
    step = max(len(ids) // 200, 1)
    counts = Counter(detect_language(f"{dataset.corpus[d]['title']}\n{dataset.corpus[d]['text']}")
                     for d in ids[::step])
    counts.pop(None, None)
    return counts.most_common(1)[0][0] if counts else "en"


def build_index(db: Database, dataset: BeirDataset, embedder: Embedder, *, batch_docs: int = 128,
                progress: Callable[[int, int], None] | None = None, force: bool = False) -> dict:
    """Load `dataset.corpus` into `db` through chunk_step / embed_step; returns figures.

    Idempotent: documents whose content hash is indexed under the same chunking
    fingerprint are skipped; a fingerprint change (model, chunk size) re-chunks
    all of them (vectors of unchanged passages are still reused).
    """
    started = time.perf_counter()
    fingerprint = chunking_fingerprint(embedder)
    with db.connect() as conn:
        row = conn.execute("SELECT value FROM settings WHERE key = 'eval_chunking'").fetchone()
        stale = force or row is None or row[0] != fingerprint
        existing = {path: (h, ih, lang) for path, h, ih, lang in conn.execute(
            "SELECT path, content_hash, indexed_hash, language FROM documents WHERE source = 'library'")}
    wanted = {did: doc_hash(doc) for did, doc in dataset.corpus.items()}
    languages = document_languages(dataset)
    todo = [did for did, h in wanted.items()
            if stale or did not in existing or existing[did][0] != h or existing[did][1] != h
            or existing[did][2] != languages[did]]
    extra = [p for p in existing if p not in wanted]
    with db.transaction() as conn:
        if extra:  # a different corpus was loaded here before: this database is the dataset's alone
            conn.execute("DELETE FROM documents WHERE source = 'library' AND path = ANY(%s)", (extra,))
        with conn.cursor() as cur:
            for did in todo:
                doc = dataset.corpus[did]
                cur.execute(UPSERT_DOC_SQL, {"path": did, "key": partition_key_for(did), "title": doc["title"] or None,
                                             "lang": languages[did], "hash": wanted[did]})
                doc_id = cur.fetchone()[0]
                cur.execute("DELETE FROM pages WHERE document_id = %s", (doc_id,))
                cur.execute("INSERT INTO pages (document_id, page_no, text) VALUES (%s, 1, %s)",
                            (doc_id, doc["text"].replace("\x00", "")))
    # both vector lanes encoded across a batch of documents, each document written in
    # its own transaction: the ingest asset's path (file by file, the multilingual
    # model ran on 1-5 texts a call and loading SciFact took 58 minutes on two cores)
    writer, lanes = batched_writer(embedder)
    batched = writer.primary
    figures = {"documents": len(wanted), "loaded": len(todo), "removed": len(extra), "passages": 0,
               "embedded": 0, "reused": 0, "chunk_seconds": 0.0, "embed_seconds": 0.0}
    done = 0
    for start in range(0, len(todo), batch_docs):
        batch = todo[start:start + batch_docs]
        keys = [partition_key_for(did) for did in batch]
        t = time.perf_counter()
        for key in keys:
            r = chunk_step(db, key, batched, force=True)
            if r.status == "failed":
                raise RuntimeError(f"chunking {r.path} failed: {r.reason}")
        figures["chunk_seconds"] += time.perf_counter() - t
        t = time.perf_counter()
        prefetch(db, keys, lanes, force=True, writer=writer)
        for key in keys:
            r = embed_step(db, key, embedder, force=True, writer=writer)
            if r.status == "failed":
                raise RuntimeError(f"embedding {r.path} failed: {r.reason}")
            figures["passages"] += r.figures.get("passages", 0)
            figures["embedded"] += r.figures.get("embedded", 0)
            figures["reused"] += r.figures.get("reused", 0)
        for lane, _ in lanes:
            lane.clear()
        figures["embed_seconds"] += time.perf_counter() - t
        done += len(batch)
        if progress:
            progress(done, len(todo))
    with db.connect() as conn:
        # what the deployment's corpus-index refresh does after a sync: the HNSW indexes
        # the range path left out (searches are scored on the index agents search with)
        figures["vector_indexes"] = build_vector_indexes(conn)
        if todo or extra or stale:
            figures["lexeme_df"] = refresh_lexeme_df(conn)
            with conn.transaction():
                conn.execute("INSERT INTO settings (key, value) VALUES ('eval_chunking', %s) "
                             "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (Jsonb(fingerprint),))
        figures["total_passages"] = conn.execute(
            "SELECT count(*) FROM passages WHERE summary_level = 0 AND NOT removed").fetchone()[0]
    figures["encode_calls"] = sum(lane.calls for lane, _ in lanes)
    figures["seconds"] = round(time.perf_counter() - started, 2)
    figures["chunk_seconds"] = round(figures["chunk_seconds"], 2)
    figures["embed_seconds"] = round(figures["embed_seconds"], 2)
    return figures
