"""The `documents` row of a library file or a vault note, and what a step on one returns.

Both sources (ingest's files, the vault's notes) and the stages downstream of them
(summaries, the graph) move a row through the same life: registered `pending`,
`ingested` when its passages go live, `failed` with a reason, `removed` (passages
hidden, every row kept), and deleted for good only by `library purge`. Each
transition is written here once; the domain packages add their own columns around
it (ingest's extraction figures, a note's front matter and links).

No Dagster: `library_pipeline.defs` and the runners call these through the domain
packages.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from dataclasses import dataclass, field

import psycopg

from serving.db import Database

log = logging.getLogger(__name__)


@dataclass
class StepResult:
    """One file's (or note's) outcome of one step: what the asset reports per file."""

    key: str
    path: str | None = None
    status: str = "ok"          # ok | skipped | failed
    reason: str | None = None
    figures: dict = field(default_factory=dict)


# -- registering ----------------------------------------------------------------------

# A file's size and mtime are refreshed when it is registered again (`stat` given); a
# note has none. The format is written only with a new row (a note's swap sets it too).
REGISTER_SQL = """
INSERT INTO documents (source, path, partition_key, format, size_bytes, mtime, status)
VALUES (%(source)s, %(path)s, %(key)s, %(format)s, %(size)s, %(mtime)s, 'pending')
ON CONFLICT (source, path) DO UPDATE
   SET size_bytes = CASE WHEN %(stat)s THEN EXCLUDED.size_bytes ELSE documents.size_bytes END,
       mtime = CASE WHEN %(stat)s THEN EXCLUDED.mtime ELSE documents.mtime END,
       status = CASE WHEN documents.status = 'removed' THEN 'pending' ELSE documents.status END,
       updated_at = now()
RETURNING id, partition_key
"""


def register(conn: psycopg.Connection, source: str, path: str, key: str, *, file_format: str | None = None,
             stat: tuple[int | None, float | None] | None = None) -> tuple[int, str]:
    """Upsert the row of `path`: a new one `pending`, a removed one revived as `pending`,
    any other keeps its status. `stat` (size, mtime) is stored and refreshed;
    `file_format` is stored on insert. Returns (id, partition key as stored)."""
    size, mtime = stat if stat is not None else (None, None)
    row = conn.execute(REGISTER_SQL, {"source": source, "path": path, "key": key, "format": file_format,
                                      "size": size, "mtime": mtime, "stat": stat is not None}).fetchone()
    return row[0], row[1]


def move(conn: psycopg.Connection, source: str, old: str, new: str, key: str) -> int | None:
    """The row of `old` now stands for `new` (its passages and versions come along);
    None when no row holds `old`."""
    row = conn.execute("UPDATE documents SET path = %s, partition_key = %s, updated_at = now() "
                       "WHERE source = %s AND path = %s RETURNING id", (new, key, source, old)).fetchone()
    return row[0] if row else None


# -- reading ----------------------------------------------------------------------------

LIBRARY_COLUMNS = ("id", "path", "status", "content_hash", "indexed_hash", "title", "ts_config", "language")


def library_document(conn: psycopg.Connection, key: str) -> dict | None:
    """A library file's row by partition key (None when the key is unknown)."""
    row = conn.execute(
        "SELECT id, path, status, content_hash, indexed_hash, title, ts_config::text, language "
        "FROM documents WHERE source = 'library' AND partition_key = %s", (key,)).fetchone()
    return dict(zip(LIBRARY_COLUMNS, row)) if row is not None else None


def ingested_document(conn: psycopg.Connection, key: str) -> tuple[dict | None, StepResult]:
    """For the stages downstream of ingest (summaries, graph): the file's row when its
    passages are live, and the step result so far - failed when the key is unknown,
    skipped (doc None) when the file is failed, removed or not ingested yet."""
    doc = library_document(conn, key)
    if doc is None:
        return None, StepResult(key, status="failed", reason="no such file registered")
    result = StepResult(key, path=doc["path"])
    if doc["status"] != "ingested":
        result.status, result.reason = "skipped", f"file {doc['status']}"
        return None, result
    return doc, result


# -- transitions ------------------------------------------------------------------------

def mark_ingested(conn: psycopg.Connection, doc_id: int, *, content_hash: str | None = None,
                  error: str | None = None) -> int:
    """The last write of a swap, in its transaction: the passages now live are of the
    row's content (`content_hash` when the caller hashed it, else the one extraction
    stored), one version on. `error`: a warning kept beside the success. Returns the
    new version."""
    return conn.execute(
        "UPDATE documents SET content_hash = coalesce(%(hash)s, content_hash), "
        "indexed_hash = coalesce(%(hash)s, content_hash), status = 'ingested', error = %(error)s, "
        "version = version + 1, updated_at = now() WHERE id = %(id)s RETURNING version",
        {"hash": content_hash, "error": error, "id": doc_id}).fetchone()[0]


def record_failure(db: Database, doc_id: int, reason: str) -> None:
    """Own transaction, so a failure is recorded even when the work rolled back.
    Passages already live stay live: a corrupt new version must not erase the old."""
    with db.transaction() as conn:
        conn.execute("UPDATE documents SET status = 'failed', error = %s, updated_at = now() WHERE id = %s",
                     (reason[:2000], doc_id))


def record_failure_by_key(db: Database, key: str, reason: str) -> str | None:
    """record_failure for a library file's partition key; returns the file's path
    (None if unknown)."""
    try:
        with db.transaction() as conn:
            row = conn.execute("UPDATE documents SET status = 'failed', error = %s, updated_at = now() "
                               "WHERE source = 'library' AND partition_key = %s RETURNING path",
                               (reason[:2000], key)).fetchone()
    except Exception:  # the database itself is down: the run's own failure says so
        log.exception("could not record the failure of %s", key)
        return None
    return row[0] if row else None


def mark_removed(conn: psycopg.Connection, source: str, paths: list[str]) -> list[int]:
    """Hide the passages of rows whose file or note is gone; every row stays until
    `purge`. Returns the ids newly marked (rows already removed are left alone)."""
    ids = [r[0] for r in conn.execute(
        "UPDATE documents SET status = 'removed', updated_at = now() "
        "WHERE source = %s AND path = ANY(%s) AND status <> 'removed' RETURNING id", (source, paths)).fetchall()]
    if ids:
        conn.execute("UPDATE passages SET removed = true WHERE document_id = ANY(%s)", (ids,))
    return ids


def purge_removed(db: Database) -> list[tuple[str, str]]:
    """Delete removed library files' rows for good. Returns (path, partition key) pairs.

    The cascade from `documents` takes passages, summaries, mentions and relations;
    entities only those files mentioned are not rows of a file, so the graph's own
    deletion (kg_forget_documents) runs first, in the same transaction: an entity
    must not outlive its last source, found with no file behind it."""
    with db.transaction() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM documents WHERE source = 'library' "
                                          "AND status = 'removed' FOR UPDATE").fetchall()]
        if not ids:
            return []
        conn.execute("SELECT kg_forget_documents(%s::bigint[])", (ids,))
        return [(r[0], r[1]) for r in conn.execute(
            "DELETE FROM documents WHERE id = ANY(%s) RETURNING path, partition_key", (ids,)).fetchall()]


# -- partition keys ---------------------------------------------------------------
# Dagster rejects partition keys containing `...` or control characters, and commas or
# brackets confuse range selection in the UI; real file names hold all of these. The
# key is therefore derived from the path (readable slug + hash of the exact relative
# path, so two names that slug alike stay apart) and the real path lives in
# `documents.path`. Library files, vault notes and evaluation corpora share the rule.

_UNSAFE = re.compile(r"[^A-Za-z0-9._/-]+")
_MAX_SLUG = 80


def partition_key_for(relpath: str) -> str:
    """Stable, Dagster-safe partition key for a path relative to the library root."""
    digest = hashlib.sha1(relpath.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    ascii_name = unicodedata.normalize("NFKD", relpath).encode("ascii", "ignore").decode("ascii")
    slug = _UNSAFE.sub("_", ascii_name)
    slug = re.sub(r"\.{2,}", ".", slug)          # no '...' (nor '..')
    slug = re.sub(r"_{2,}", "_", slug).strip("._/-") or "file"
    if len(slug) > _MAX_SLUG:
        slug = slug[-_MAX_SLUG:].lstrip("._/-")
    return f"{slug}~{digest}"
