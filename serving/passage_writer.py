"""The one writer of `passages`: vectors (reuse, then embed the missing ones), the
per-model vector indexes, and the insert / swap of a set of rows.

Every producer of searchable text goes through here - library ingest, RAPTOR
summaries, vault notes, agent memories - so the rules below hold for all of them:

- **Two vector lanes.** Each row gets the primary model's vector (`embedding`,
  `embed_model`) and, unless LIBRARY_EMBED_MULTILINGUAL=off, the multilingual
  model's (`embedding_multi`, `embed_model_multi`). Both are embedded from the same
  text, whose sha256 is `embed_hash`.
- **Only models that read the text.** A passage in a script the primary model does not
  read (Russian under an English-only MiniLM) gets no primary vector when the
  multilingual model embeds it: `embed_model` names the primary model and `embedding`
  stays NULL, so the row is current for that model and absent from its index. Writers
  made with `readers_only=False` (agent memories: near-duplicate detection compares
  every memory's first passage in the primary model's space) embed every row with both.
- **Reuse.** A vector already stored for the same embedded text under the same model
  (this file or another: a library often holds the same book twice) is copied, not
  recomputed; per model, so a library that predates the second lane reuses its
  primary vectors and embeds only the multilingual ones.
- **Indexes** (schema.sql ensure_vector_indexes / ensure_multilingual_indexes) are
  created once per database and model before the first row of that model is written -
  except the verbatim rows' HNSW index for a writer made with `verbatim_index=False`
  (the ingest's range runs, RAPTOR): those leave a missing one to
  `build_vector_indexes`, which builds it once after a sync's rows are in (pgvector
  inserting each row into the graph on its own cost 5x the rest of the write).
  Until then the vector lanes read the rows by exact scan.
- **Swap.** `swap` replaces one document's rows of one altitude (verbatim or
  summaries) inside the caller's transaction: deleted, or marked superseded when the
  old version must stay searchable on request (vault notes). The caller owns the
  transaction, so per-file atomicity is the caller's one `with db.transaction()`.

Interface: rows in (`PassageRow`, plain values), ids out; vectors are prepared with
`prepare` before the write transaction opens (embedding is slow, locks are not held).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import psycopg
from pgvector import HalfVector
from psycopg.types.json import Jsonb

from serving.embedding import Embedder, encode_passages_side_by_side, multilingual_embedder, reads_text, sha256

log = logging.getLogger(__name__)

_DEFAULT = object()


def ts_config_for_language(conn: psycopg.Connection, language: str | None) -> str:
    """The text-search configuration a passage in `language` (ISO 639-1, or None) is
    stemmed with. The map is schema.sql's `ts_config_for_language`, the one both SQL
    (documents) and every Python writer use; unknown languages get 'simple'."""
    return conn.execute("SELECT ts_config_for_language(%s)::text", (language,)).fetchone()[0]


@dataclass
class PassageRow:
    """One passage to write. `embed_text` is the exact text both models read (for
    library rows: title and heading before the content, embed_text_for_passage)."""

    content: str
    embed_text: str
    ordinal: int = 0
    kind: str = "text"
    source: str = "library"
    document_id: int | None = None
    summary_level: int = 0
    summarises: list[int] | None = None
    page_start: int | None = None
    page_end: int | None = None
    heading: str | None = None
    ts_config: str = "simple"
    scope: str = "global"
    agent: str | None = None
    department: str | None = None
    memory_id: int | None = None
    note_version: int | None = None
    content_hash: str | None = None       # default sha256(content)
    vector: np.ndarray | None = None      # primary vector computed by the caller (RAPTOR centroids)

    @property
    def embed_hash(self) -> str:
        return sha256(self.embed_text)


@dataclass
class Vectors:
    """Vectors by embed_hash for each model, and what it cost."""

    primary: dict[str, HalfVector] = field(default_factory=dict)
    multi: dict[str, HalfVector] = field(default_factory=dict)
    embedded: int = 0          # distinct texts the primary model embedded now
    reused: int = 0            # distinct texts whose primary vector was already stored
    embedded_multi: int = 0
    reused_multi: int = 0
    embed_seconds: float = 0.0  # primary model
    embed_seconds_multi: float = 0.0
    fresh: set[str] = field(default_factory=set)   # hashes the primary model embedded now
    unread: set[str] = field(default_factory=set)  # hashes the primary model cannot read (no vector)


# a vector already stored for the same embedded text under the same model
_REUSE_PRIMARY_SQL = ("SELECT DISTINCT ON (embed_hash) embed_hash, embedding FROM passages "
                      "WHERE embed_model = %s AND embed_hash = ANY(%s) AND embedding IS NOT NULL")
_REUSE_MULTI_SQL = ("SELECT DISTINCT ON (embed_hash) embed_hash, embedding_multi FROM passages "
                    "WHERE embed_model_multi = %s AND embed_hash = ANY(%s) AND embedding_multi IS NOT NULL")


def stored_vectors(conn: psycopg.Connection, model: Embedder, hashes: list[str], *,
                   multilingual: bool = False) -> dict[str, HalfVector]:
    """Vectors already stored under `model` for these embed_hashes, of either lane."""
    query = _REUSE_MULTI_SQL if multilingual else _REUSE_PRIMARY_SQL
    return dict(conn.execute(query, (model.name, hashes)).fetchall())


def embed_missing(model: Embedder, hashes: list[str], by_hash: dict[str, str],
                   have: dict[str, HalfVector]) -> tuple[list[str], float]:
    """Embed the texts of `hashes` that `have` lacks, into `have`: (those hashes, seconds)."""
    todo = [h for h in hashes if h not in have]
    if not todo:
        return todo, 0.0
    t = time.perf_counter()
    vectors = model.encode_passages([by_hash[h] for h in todo])
    seconds = time.perf_counter() - t
    have.update((h, HalfVector(np.asarray(v, dtype=np.float32))) for h, v in zip(todo, vectors))
    return todo, seconds


def _not_encoded_ahead(model: Embedder, hashes: list[str], by_hash: dict[str, str]) -> list[str]:
    """The hashes worth looking up among stored vectors: a model that encoded texts ahead
    for a group of files (`encoded_ahead`) was given only texts not stored at that moment,
    so a second lookup per file finds nothing new (two queries a file)."""
    ahead = getattr(model, "encoded_ahead", None)
    return hashes if ahead is None else [h for h in hashes if not ahead(by_hash[h])]


class PassageWriter:
    """Writes passages with the primary model and (by default) the multilingual one."""

    # (database, column, model, verbatim index too) whose indexes exist; the database is
    # the caller's dsn or, without one, the connection's
    _indexed: set[tuple[str, str, str, bool]] = set()

    def __init__(self, primary: Embedder, multilingual: Embedder | None | object = _DEFAULT, *,
                 verbatim_index: bool = True, readers_only: bool = True) -> None:
        self.primary = primary
        self.multi: Embedder | None = multilingual_embedder() if multilingual is _DEFAULT else multilingual  # type: ignore[assignment]
        self.verbatim_index = verbatim_index
        self.readers_only = readers_only
        # told (model, texts) as encoding advances: a long novel's encode takes minutes,
        # and a progress bar that moved per file stood still through it
        self.on_encoded: Callable[[Embedder, int], None] | None = None

    def primary_reads(self, text: str) -> bool:
        """Whether the primary model embeds `text` (see "Only models that read the text")."""
        return not self.readers_only or self.multi is None or reads_text(self.primary, text)

    @property
    def models(self) -> dict[str, str | None]:
        return {"primary": self.primary.name, "multilingual": self.multi.name if self.multi else None}

    # -- indexes ------------------------------------------------------------------

    def _indexes_todo(self, dsn: str) -> list[tuple[str, Embedder]]:
        verbatim = self.verbatim_index
        todo = [("embedding", self.primary)] + ([("embedding_multi", self.multi)] if self.multi else [])
        return [(col, e) for col, e in todo
                if (dsn, col, e.name, verbatim) not in self._indexed and (dsn, col, e.name, True) not in self._indexed]

    def ensure_indexes(self, conn: psycopg.Connection, *, dsn: str | None = None) -> None:
        """Both models' HNSW indexes, and the library's first model recorded as its
        active one (settings.embed_model; a re-embed migration changes it later).
        Call it before the write transaction, on a connection with none open. `dsn`:
        the database as the caller names it (`indexes_known` then answers without one)."""
        dsn, verbatim = dsn or conn.info.dsn, self.verbatim_index
        todo = self._indexes_todo(dsn)
        if not todo:
            return
        with conn.transaction():
            for col, e in todo:
                fn = "ensure_vector_indexes" if col == "embedding" else "ensure_multilingual_indexes"
                conn.execute(f"SELECT {fn}(%s, %s, %s)", (e.name, e.dims, verbatim))
            conn.execute("INSERT INTO settings (key, value) VALUES ('embed_model', %s) ON CONFLICT (key) DO NOTHING",
                         (Jsonb({"name": self.primary.name, "dims": self.primary.dims}),))
            if self.multi is not None:
                conn.execute("INSERT INTO settings (key, value) VALUES ('embed_model_multi', %s) "
                             "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                             (Jsonb({"name": self.multi.name, "dims": self.multi.dims}),))
        self._indexed.update((dsn, col, e.name, verbatim) for col, e in todo)

    def indexes_known(self, dsn: str) -> bool:
        """Whether `ensure_indexes(..., dsn=dsn)` already saw to this database."""
        return not self._indexes_todo(dsn)

    # -- vectors ------------------------------------------------------------------

    def prepare(self, conn: psycopg.Connection, texts: list[str], *, primary_given: set[str] = frozenset(),
                multi_given: dict[str, np.ndarray] | None = None, reuse: bool = True) -> Vectors:
        """Vectors for `texts` (by sha256) under both models: stored ones reused, the rest
        embedded, each distinct text once. `primary_given`: hashes whose primary vector the
        caller supplies itself (RAPTOR), so the primary model is not asked for them;
        `multi_given`: multilingual vectors the caller computed (RAPTOR over that model)."""
        by_hash: dict[str, str] = {}
        for t in texts:
            by_hash.setdefault(sha256(t), t)
        hashes = list(by_hash)
        out = Vectors()
        out.unread = {h for h in hashes if h not in primary_given and not self.primary_reads(by_hash[h])}
        if self.multi is not None and multi_given:
            out.multi.update((h, HalfVector(np.asarray(v, dtype=np.float32))) for h, v in multi_given.items())
        wanted = [h for h in hashes if h not in primary_given and h not in out.unread]
        if reuse and (lookup := _not_encoded_ahead(self.primary, wanted, by_hash)):
            out.primary = stored_vectors(conn, self.primary, lookup)
        if reuse and self.multi is not None and (lookup := _not_encoded_ahead(self.multi, hashes, by_hash)):
            out.multi.update(stored_vectors(conn, self.multi, [h for h in lookup if h not in out.multi],
                                            multilingual=True))
        todo = [h for h in wanted if h not in out.primary]
        jobs = [(self.primary, todo, out.primary)]
        if self.multi is not None:
            todo_multi = [h for h in hashes if h not in out.multi]
            jobs.append((self.multi, todo_multi, out.multi))
        encoded = encode_passages_side_by_side([(model, [by_hash[h] for h in t]) for model, t, _ in jobs],
                                               on_encoded=self.on_encoded)
        for (_, t, have), (vectors, _) in zip(jobs, encoded):
            have.update((h, HalfVector(np.asarray(v, dtype=np.float32))) for h, v in zip(t, vectors))
        out.embed_seconds = encoded[0][1] if todo else 0.0
        out.reused, out.embedded, out.fresh = len(wanted) - len(todo), len(todo), set(todo)
        if self.multi is not None:
            out.embed_seconds_multi = encoded[1][1] if todo_multi else 0.0
            out.reused_multi, out.embedded_multi = len(hashes) - len(todo_multi), len(todo_multi)
        return out

    # -- rows ---------------------------------------------------------------------

    _COLUMNS = ("document_id", "source", "ordinal", "kind", "summary_level", "summarises", "page_start",
                "page_end", "heading", "content", "content_hash", "embed_hash", "ts_config", "scope", "agent",
                "department", "memory_id", "note_version", "embedding", "embed_model", "embedding_multi",
                "embed_model_multi")
    _INSERT = (f"INSERT INTO passages ({', '.join(_COLUMNS)}) VALUES "
               f"({', '.join('%s::regconfig' if c == 'ts_config' else '%s' for c in _COLUMNS)}) RETURNING id")

    def _values(self, row: PassageRow, vectors: Vectors) -> tuple:
        h = row.embed_hash
        primary = HalfVector(np.asarray(row.vector, dtype=np.float32)) if row.vector is not None \
            else None if h in vectors.unread else vectors.primary[h]
        multi = vectors.multi.get(h) if self.multi is not None else None
        content = row.content.replace("\x00", "")
        return (row.document_id, row.source, row.ordinal, row.kind, row.summary_level, row.summarises,
                row.page_start, row.page_end, row.heading, content, row.content_hash or sha256(row.content), h,
                row.ts_config, row.scope, row.agent, row.department, row.memory_id, row.note_version,
                primary, self.primary.name, multi, self.multi.name if multi is not None else None)

    def insert(self, conn: psycopg.Connection, rows: list[PassageRow], vectors: Vectors) -> list[int]:
        """Insert `rows` in the caller's transaction; their ids, in order."""
        if not rows:
            return []
        with conn.cursor() as cur:
            cur.executemany(self._INSERT, [self._values(r, vectors) for r in rows], returning=True)
            ids = []
            while True:
                ids.append(cur.fetchone()[0])
                if not cur.nextset():
                    break
        return ids

    def swap(self, conn: psycopg.Connection, document_id: int, rows: list[PassageRow], vectors: Vectors, *,
             summaries: bool = False, supersede: bool = False) -> list[int]:
        """Replace the document's live rows of one altitude (verbatim, or summaries) by
        `rows`, in the caller's transaction. `supersede` keeps the old rows, marked
        superseded, instead of deleting them."""
        level = "summary_level > 0" if summaries else "summary_level = 0"
        if supersede:
            conn.execute(f"UPDATE passages SET superseded = true WHERE document_id = %s AND {level} "
                         "AND NOT superseded", (document_id,))
        else:
            conn.execute(f"DELETE FROM passages WHERE document_id = %s AND {level}", (document_id,))
        return self.insert(conn, rows, vectors)

    def stale(self, conn: psycopg.Connection, where: str, params: tuple) -> int:
        """Rows matching `where` (over passages) that lack a current vector of either model."""
        sql = (f"SELECT count(*) FROM passages WHERE {where} AND (embed_model IS DISTINCT FROM %s"
               + (" OR embed_model_multi IS DISTINCT FROM %s)" if self.multi is not None else ")"))
        args = (*params, self.primary.name) + ((self.multi.name,) if self.multi is not None else ())
        return conn.execute(sql, args).fetchone()[0]


def build_vector_indexes(conn: psycopg.Connection) -> dict:
    """Every HNSW index of the library's models (settings.embed_model, embed_model_multi:
    recorded by the first writer of each) that does not exist yet, built over the rows in
    place - after a first sync, whose writers left the verbatim ones out. A no-op when
    they exist. Blocks writes to `passages` while it builds (CREATE INDEX), not reads.
    Returns {"built": [index names], "seconds": ..., "passages": rows indexed}."""
    started = time.perf_counter()
    with conn.transaction():
        before = _hnsw_indexes(conn)
        models = dict(conn.execute("SELECT key, value FROM settings "
                                   "WHERE key IN ('embed_model', 'embed_model_multi')").fetchall())
        # an HNSW graph that outgrows maintenance_work_mem is built on disk, many
        # times slower; the default 64 MB holds some tens of thousands of passages
        conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
        for key, fn in (("embed_model", "ensure_vector_indexes"), ("embed_model_multi", "ensure_multilingual_indexes")):
            if key in models:
                conn.execute(f"SELECT {fn}(%s, %s)", (models[key]["name"], models[key]["dims"]))
        built = sorted(_hnsw_indexes(conn) - before)
        rows = conn.execute("SELECT count(*) FROM passages WHERE summary_level = 0").fetchone()[0] if built else 0
    if built:
        log.info("built %d HNSW index(es) over %d passages in %.1fs", len(built), rows, time.perf_counter() - started)
    return {"built": built, "seconds": round(time.perf_counter() - started, 3), "passages": rows}


def _hnsw_indexes(conn: psycopg.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'passages' "
                                       "AND indexname LIKE 'passages_hnsw%'")}


def ensure_indexes(db, writer: PassageWriter) -> None:
    """`PassageWriter.ensure_indexes` on a connection of its own (`db`: serving.db.Database).
    Known indexes open no transaction: the transaction around the check alone cost ~1 ms a
    file in a range run of small files."""
    if writer.indexes_known(db.dsn):
        return
    with db.transaction() as conn:
        writer.ensure_indexes(conn, dsn=db.dsn)
