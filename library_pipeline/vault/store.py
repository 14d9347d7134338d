"""Indexing vault notes: parse, chunk, embed, and swap in one note per transaction.

The previous version's passages are marked superseded (kept, searchable on
request), the new sections inserted, links and the version record written,
the documents row bumped — all in one transaction, so a crash before its
commit leaves the previous version live and whole. Notes of a run are
embedded together, reusing vectors of unchanged sections.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from library_pipeline import documents
from library_pipeline.documents import StepResult
from library_pipeline.ingest.chunking import chunk_pages
from library_pipeline.ingest.extract import ExtractionError, Page, decode_text, detect_language
from library_pipeline.ingest.passage_text import clip_heading, prefix_budget
from library_pipeline.vault.git import Entry, GitError, GitRepo
from library_pipeline.vault.parser import NoteError, ParsedNote, parse_note, split_subsections
from serving.db import Database
from serving.embedding import Embedder, chunk_counter, embed_text_for_passage, sha256
from serving.passage_writer import PassageRow, PassageWriter, Vectors, ensure_indexes, ts_config_for_language

log = logging.getLogger(__name__)

VAULT_AGENT = "vault"

# -- one note -----------------------------------------------------------------------------

@dataclass
class NoteChunk:
    ordinal: int
    heading: str | None
    content: str


def note_chunks(note: ParsedNote, embedder: Embedder) -> list[NoteChunk]:
    """One chunk per section while the section (with its title/heading prefix)
    fits the embedder's window; a longer one is split at its deeper headings,
    and a part still too long goes through the library's prose chunker (the
    same windows, measured in benchmarks/chunk_size.py)."""
    out: list[NoteChunk] = []
    budget = prefix_budget(embedder, note.title)
    for section in note.sections:
        whole = embed_text_for_passage(note.title, section.heading, section.text)
        if embedder.count_tokens(whole) <= embedder.max_tokens:
            out.append(NoteChunk(len(out), clip_heading(section.heading), section.text))
            continue
        for heading, text in split_subsections(section):
            if embedder.count_tokens(embed_text_for_passage(note.title, heading, text)) <= embedder.max_tokens:
                out.append(NoteChunk(len(out), clip_heading(heading), text))
                continue
            for c in chunk_pages([Page(page_no=1, text=text, heading=heading)],
                                 count_tokens=embedder.count_tokens, max_tokens=budget):
                out.append(NoteChunk(len(out), clip_heading(heading), c.content))
    return out


def _doc(conn: psycopg.Connection, key: str, lock: bool = False) -> dict | None:
    row = conn.execute(
        "SELECT id, path, status, vault_blob, version FROM documents WHERE source = 'vault' AND partition_key = %s"
        + (" FOR UPDATE" if lock else ""), (key,)).fetchone()
    return dict(zip(("id", "path", "status", "vault_blob", "version"), row)) if row else None


def _current(conn: psycopg.Connection, doc: dict, blob: str, writer: PassageWriter) -> bool:
    if doc["vault_blob"] != blob or doc["status"] != "ingested":
        return False
    return writer.stale(conn, "document_id = %s AND NOT superseded", (doc["id"],)) == 0


@dataclass
class _Prepared:
    result: StepResult
    doc: dict
    entry: Entry
    note: ParsedNote
    chunks: list[NoteChunk]
    texts: list[str]
    hashes: list[str]
    text: str
    size: int
    language: str | None
    started: float


def _prepare(db: Database, conn: psycopg.Connection, repo: GitRepo, commit: str, key: str, writer: PassageWriter, *,
             max_bytes: int, force: bool) -> _Prepared | StepResult:
    """Everything before the embedder: find, read, decode, parse, chunk. A
    StepResult means the note is done (skipped or failed, with the reason)."""
    started = time.perf_counter()
    doc = _doc(conn, key)
    if doc is None:
        return StepResult(key, status="skipped", reason="not a vault note (renamed or never registered)")
    result = StepResult(key, path=doc["path"])
    entry = repo.entry(commit, doc["path"])
    if entry is None:
        # deleted after the sync that asked for it; the next sync marks it removed
        result.status, result.reason = "skipped", f"not in commit {commit[:12]}"
        return result
    if doc["status"] == "removed":
        result.status, result.reason = "skipped", "note removed"
        return result
    if not force and _current(conn, doc, entry.blob, writer):
        result.status, result.reason = "skipped", "unchanged"
        return result
    try:
        if entry.size is not None and entry.size > max_bytes:
            raise NoteError(f"note is {entry.size / 1048576:.1f} MB, over the {max_bytes / 1048576:.0f} MB "
                            "limit for a note (LIBRARY_VAULT_MAX_NOTE_MB)")
        data = repo.read_blob(entry.blob)
        warnings = []
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = decode_text(data)  # the library's detection (cp1251, KOI8-R, …); refuses binary
            warnings.append("not UTF-8: decoded by charset detection")
        note = parse_note(text, doc["path"])
        note.warnings[:0] = warnings
        language = detect_language(note.body or note.properties_text)
        chunks = note_chunks(note, chunk_counter(writer.primary, language))
    except (NoteError, ExtractionError, GitError) as exc:
        reason = str(exc)
        log.warning("%s: %s", doc["path"], reason)
        documents.record_failure(db, doc["id"], reason)
        result.status, result.reason = "failed", reason
        return result
    texts = [embed_text_for_passage(note.title, c.heading, c.content) for c in chunks]
    return _Prepared(result, doc, entry, note, chunks, texts, [sha256(t) for t in texts], text, len(data),
                     language, started)


def _store(db: Database, p: _Prepared, key: str, commit: str, vectors: Vectors, writer: PassageWriter, *,
           force: bool, embedded: int, embed_seconds: float, crash_hook=None) -> StepResult:
    """The swap: one transaction per note. The previous version's rows are
    superseded, never deleted; a crash before the commit leaves it live."""
    doc, note, chunks, result = p.doc, p.note, p.chunks, p.result
    with db.transaction() as conn:
        locked = _doc(conn, key, lock=True)
        if locked is None or locked["id"] != doc["id"]:
            result.status, result.reason = "skipped", "renamed while indexing; the next sync indexes it"
            return result
        if not force and _current(conn, locked, p.entry.blob, writer):
            result.status, result.reason = "skipped", "unchanged (indexed concurrently)"
            return result
        version = locked["version"] + 1
        ts_config = ts_config_for_language(conn, p.language)
        writer.swap(conn, doc["id"], [
            PassageRow(content=c.content, embed_text=t, document_id=doc["id"], source="vault", kind="note",
                       ordinal=c.ordinal, heading=c.heading, content_hash=sha256(c.content), ts_config=ts_config,
                       scope="global", agent=VAULT_AGENT, note_version=version)
            for c, t in zip(chunks, p.texts)], vectors, supersede=True)
        with conn.cursor() as cur:
            conn.execute("DELETE FROM note_links WHERE from_document = %s", (doc["id"],))
            cur.executemany(
                "INSERT INTO note_links (from_document, ordinal, target, alias, heading, kind, property) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(doc["id"], n, link.target, link.alias, link.heading, link.kind, link.property)
                 for n, link in enumerate(note.links)])
        if crash_hook is not None:
            crash_hook("inside_swap")
        conn.execute(
            """UPDATE documents SET title = %s, format = 'md', language = %s, ts_config = %s::regconfig,
                      front_matter = %s, vault_blob = %s, size_bytes = %s, pages = %s
               WHERE id = %s""",
            (note.title, p.language, ts_config, Jsonb(note.front_matter), p.entry.blob, p.size,
             len(note.sections), doc["id"]))
        # the row is locked (above), so its version moves to the one the passages carry
        documents.mark_ingested(conn, doc["id"], content_hash=sha256(p.text),
                                error="; ".join(note.warnings) or None)
        conn.execute(
            "INSERT INTO vault_note_versions (document_id, version, path, commit_sha, blob, title, front_matter, "
            "tags, aliases, callouts, sections, passages, warnings) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (doc["id"], version, doc["path"], commit, p.entry.blob, note.title, Jsonb(note.front_matter),
             note.tags, note.aliases, Jsonb([c.__dict__ for c in note.callouts]), len(note.sections),
             len(chunks), note.warnings))
    result.figures = {"passages": len(chunks), "embedded": embedded, "reused": len(chunks) - embedded,
                      "sections": len(note.sections), "links": len(note.links), "version": version,
                      "embed_seconds": round(embed_seconds, 3), "seconds": round(time.perf_counter() - p.started, 3)}
    if note.warnings:
        result.reason = "; ".join(note.warnings)
    return result


# Notes embedded together: one encode call over all their new sections. Measured
# with benchmarks/vault.py (50 notes, 510 sections, load ~8 on 2 cores): one call
# per note ran at 7.6 sections/s; batches across notes let the model fill its
# batches and sort by length.
EMBED_GROUP_NOTES = 64


def index_notes(db: Database, repo: GitRepo, commit: str, keys: list[str], embedder: Embedder, *,
                max_bytes: int, force: bool = False, crash_hook=None,
                on_result=None) -> list[StepResult]:
    """Parse, chunk, embed and upsert notes (by partition key) as of `commit`,
    each in its own transaction; a bad note fails alone."""
    writer = PassageWriter(embedder)
    ensure_indexes(db, writer)
    results: list[StepResult] = []
    for g in range(0, len(keys), EMBED_GROUP_NOTES):
        group = keys[g:g + EMBED_GROUP_NOTES]
        prepared: list[tuple[str, _Prepared | StepResult]] = []
        with db.connect() as conn:
            for key in group:
                prepared.append((key, _prepare(db, conn, repo, commit, key, writer, max_bytes=max_bytes,
                                               force=force)))
            # any passage with the same embedded text under the same model will do
            vectors = writer.prepare(conn, [t for _, p in prepared if isinstance(p, _Prepared) for t in p.texts])
        fresh = vectors.fresh
        if crash_hook is not None:
            crash_hook("before_swap")
        for key, p in prepared:
            if isinstance(p, StepResult):
                result = p
            else:
                embedded = sum(1 for h in set(p.hashes) if h in fresh)
                share = vectors.embed_seconds * embedded / vectors.embedded if vectors.embedded else 0.0
                result = _store(db, p, key, commit, vectors, writer, force=force, embedded=embedded,
                                embed_seconds=share, crash_hook=crash_hook)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def index_note(db: Database, repo: GitRepo, commit: str, key: str, embedder: Embedder, *,
               max_bytes: int, force: bool = False, crash_hook=None) -> StepResult:
    """One note; see `index_notes`."""
    return index_notes(db, repo, commit, [key], embedder, max_bytes=max_bytes, force=force,
                       crash_hook=crash_hook)[0]
