"""Resumable re-embed migration: move every passage (verbatim chunks, summaries,
vault notes, memories) to a new embedding model without a search outage. (~450
lines, one state machine: record, batches, switch and the second lane's fill share
the runner lock and the eligibility rule; the CLI is library_pipeline/cli/migrate.py.)

agent-library (github.com/CreateM1nd/agent-library)'s reembed_library.py, shaped by this schema:

- **Storage.** New vectors go to `passage_embeddings (model, passage_id)`, a side
  table (schema.sql explains why not extra rows or columns). Passages, their
  indexes and `settings.embed_model` are untouched until the switch, so search
  keeps answering from the old model all along and never compares rows of two
  models (every vector query filters on the active `embed_model`).
- **Progress** is the side table itself: a batch commits its vectors in one
  transaction, so a SIGKILL loses at most the batch in flight and `resume`
  continues with the passages that have no vector for the target yet. The
  migration's own record (target spec, state, counters) is the `settings` row
  `embed_migration`.
- **One runner at a time**: a session advisory lock, which Postgres releases
  when a killed runner's connection drops - no stale lock file to clear.
- **The switch** is one transaction: lock out writers to `passages`, embed the
  few passages that arrived since the last batch (files ingested meanwhile with
  the old model), keep the old vectors in the side table (switching back is then
  a migration with nothing to embed), copy the new ones in, build the new
  model's HNSW indexes over the rows, and set `settings.embed_model` to the new
  spec. A crash at any point before COMMIT leaves the old model whole.

After the switch every process must embed with the new model: the spec is in
`settings.embed_model`, and `serving.migration.load_active_embedder` loads it
(LIBRARY_EMBED_* then only choose the first model of an empty library).

The second, multilingual lane (`passages.embedding_multi`, serving.passage_writer)
is not switched: it has one model (LIBRARY_EMBED_MULTILINGUAL). `fill_multilingual`
(`library migrate embedder multilingual`, and the reembed_migration asset after any
primary migration) embeds the passages that lack its vector - a library ingested
before the lane existed - in committed batches, resumable the same way: the rows
still lacking a vector are the progress.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from pgvector import HalfVector
from psycopg.types.json import Jsonb

from serving.db import Database
from serving.embedding import Embedder, embed_text_for_row, multilingual_embedder, sha256
from serving.passage_writer import embed_missing, stored_vectors
from serving.migration import ACTIVE_KEY, EmbedderSpec, active_model  # noqa: F401 - EmbedderSpec re-exported

log = logging.getLogger(__name__)

STATE_KEY = "embed_migration"
MULTI_KEY = "embed_model_multi"   # written by serving.passage_writer: {name, dims}
RUNNER_LOCK_ID = 7_301_210     # pg_try_advisory_lock: one migration runner at a time
DEFAULT_BATCH = 256
# catch-up inside the switch holds the writers' lock while it embeds; beyond this
# many stragglers the switch gives up and the runner does more batches first
MAX_SWITCH_CATCHUP = 2_000


class MigrationError(RuntimeError):
    """A migration command that cannot proceed; the message says why and what to do."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _setting(conn: psycopg.Connection, key: str) -> dict[str, Any] | None:
    row = conn.execute("SELECT value FROM settings WHERE key = %s", (key,)).fetchone()
    return row[0] if row else None


def _put(conn: psycopg.Connection, key: str, value: dict[str, Any]) -> None:
    conn.execute("INSERT INTO settings (key, value) VALUES (%s, %s) "
                 "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, Jsonb(value)))


# -- the record --------------------------------------------------------------------

def _eligible_sql(alias: str = "p") -> str:
    # every passage not yet in the target model, embedded or not (a summary written
    # without a vector is embedded too)
    return f"{alias}.embed_model IS DISTINCT FROM %(target)s"


def counts(conn: psycopg.Connection, target: str) -> dict[str, int]:
    row = conn.execute(
        f"SELECT count(*), count(e.passage_id) FROM passages p LEFT JOIN passage_embeddings e "
        f"ON e.model = %(target)s AND e.passage_id = p.id WHERE {_eligible_sql()}", {"target": target}).fetchone()
    by_source = dict(conn.execute(
        f"SELECT p.source, count(*) FROM passages p WHERE {_eligible_sql()} AND NOT EXISTS "
        f"(SELECT 1 FROM passage_embeddings e WHERE e.model = %(target)s AND e.passage_id = p.id) "
        f"GROUP BY p.source", {"target": target}).fetchall())
    return {"total": row[0], "done": row[1], "remaining": row[0] - row[1],
            **{f"remaining_{k}": v for k, v in sorted(by_source.items())}}


def multilingual_counts(conn: psycopg.Connection, model: str | None = None) -> dict[str, Any]:
    """The second lane: its model (as recorded by the writers, or `model`), passages
    embedded by it and passages still lacking its vector."""
    recorded = (_setting(conn, MULTI_KEY) or {}).get("name")
    model = model or recorded
    if model is None:
        return {"model": None, "done": 0, "remaining": conn.execute("SELECT count(*) FROM passages").fetchone()[0]}
    done, total = conn.execute("SELECT count(*) FILTER (WHERE embed_model_multi = %s), count(*) FROM passages",
                               (model,)).fetchone()
    return {"model": model, "done": done, "remaining": total - done}


def status(conn: psycopg.Connection) -> dict[str, Any]:
    """The migration record with live counts; {'state': 'none'} if none was ever started.
    `multilingual`: the second lane's coverage (multilingual_counts)."""
    state = _setting(conn, STATE_KEY)
    active = active_model(conn)
    if not state:
        return {"state": "none", "active": (active or {}).get("name"), "multilingual": multilingual_counts(conn)}
    out = dict(state)
    out["multilingual"] = multilingual_counts(conn)
    out["active"] = (active or {}).get("name")
    if state.get("state") == "running":
        out.update(counts(conn, state["target"]["name"]))
    return out


def start(db: Database, spec: EmbedderSpec, *, batch_size: int = DEFAULT_BATCH,
          embedder: Embedder | None = None) -> dict[str, Any]:
    """Record a migration to `spec` (loads the model once to learn its name and dims)."""
    embedder = embedder or spec.load()
    with db.transaction() as conn:
        conn.execute("LOCK TABLE settings IN SHARE ROW EXCLUSIVE MODE")
        current = _setting(conn, STATE_KEY)
        if current and current.get("state") == "running":
            if current["target"]["name"] == embedder.name:
                raise MigrationError(f"a migration to {embedder.name} is already running: "
                                     "`library migrate embedder resume` continues it")
            raise MigrationError(f"a migration to {current['target']['name']} is running; "
                                 "abort it first (`library migrate embedder abort`)")
        active = active_model(conn) or {}
        if active.get("name") == embedder.name:
            raise MigrationError(f"{embedder.name} is already the active model")
        record = {"state": "running", "source": active.get("name"),
                  "target": {**spec.to_dict(), "name": embedder.name, "dims": embedder.dims},
                  "batch_size": int(batch_size), "started_at": _now(), "updated_at": _now(),
                  "batches": 0, "embedded": 0, "reused": 0, "text_mismatches": 0, "runs": 0}
        _put(conn, STATE_KEY, record)
    log.info("migration to %s recorded (from %s)", embedder.name, active.get("name"))
    return record


def abort(db: Database) -> dict[str, Any]:
    """Stop a running migration and drop the vectors it made. Search never saw them."""
    with db.transaction() as conn:
        current = _setting(conn, STATE_KEY)
        if not current or current.get("state") != "running":
            raise MigrationError("no migration is running")
        dropped = conn.execute("DELETE FROM passage_embeddings WHERE model = %s",
                               (current["target"]["name"],)).rowcount
        current.update(state="aborted", updated_at=_now(), dropped_vectors=dropped)
        _put(conn, STATE_KEY, current)
    return current


# -- the work ----------------------------------------------------------------------

_BATCH_SQL = f"""
SELECT p.id, p.source, p.heading, p.content, p.embed_hash, d.title
FROM passages p LEFT JOIN documents d ON d.id = p.document_id
WHERE {_eligible_sql()} AND NOT EXISTS
      (SELECT 1 FROM passage_embeddings e WHERE e.model = %(target)s AND e.passage_id = p.id)
ORDER BY p.id LIMIT %(limit)s
"""


passage_text = embed_text_for_row  # the text each writer embedded (serving.embedding)


@dataclass
class BatchResult:
    passages: int = 0
    embedded: int = 0
    reused: int = 0
    text_mismatches: int = 0
    seconds: float = 0.0


def _embed_rows(conn: psycopg.Connection, embedder: Embedder, rows: list[tuple]) -> tuple[list[tuple], BatchResult]:
    """(passage_id, model, vector, embed_hash) per row; identical texts embedded once,
    and texts already embedded for the target (the same book twice, a file re-ingested
    mid-migration) reused."""
    res = BatchResult(passages=len(rows))
    texts = [passage_text(r[1], r[5], r[2], r[3]) for r in rows]
    hashes = [sha256(t) for t in texts]
    # a stored embed_hash that our reconstruction does not reproduce means a writer
    # embeds differently from passage_text; counted so status shows it, never hidden
    res.text_mismatches = sum(1 for r, h in zip(rows, hashes) if r[4] and r[4] != h)
    known = dict(conn.execute(
        "SELECT DISTINCT ON (embed_hash) embed_hash, embedding FROM passage_embeddings "
        "WHERE model = %s AND embed_hash = ANY(%s)", (embedder.name, list(set(hashes)))).fetchall())
    todo = {h: t for h, t in zip(hashes, texts) if h not in known}
    if todo:
        vectors = embedder.encode_passages(list(todo.values()))
        for h, v in zip(todo, vectors):
            known[h] = HalfVector(np.asarray(v, dtype=np.float32))
    res.embedded = len(todo)
    res.reused = len(rows) - len(todo)
    return [(r[0], embedder.name, known[h], h) for r, h in zip(rows, hashes)], res


_INSERT_SQL = ("INSERT INTO passage_embeddings (passage_id, model, embedding, embed_hash) "
               "SELECT %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM passages WHERE id = %s) "
               "ON CONFLICT (model, passage_id) DO NOTHING")


def _insert(conn: psycopg.Connection, items: list[tuple]) -> None:
    with conn.cursor() as cur:
        cur.executemany(_INSERT_SQL, [(*item, item[0]) for item in items])


def step(db: Database, embedder: Embedder, target: str, batch_size: int) -> BatchResult:
    """One batch: read, embed (no transaction open), write the vectors and the
    counters in one transaction."""
    started = time.perf_counter()
    with db.connect() as conn:
        rows = conn.execute(_BATCH_SQL, {"target": target, "limit": batch_size}).fetchall()
        if not rows:
            return BatchResult()
        items, res = _embed_rows(conn, embedder, rows)
    for attempt in range(2):
        try:
            with db.transaction() as conn:
                _insert(conn, items)
                state = _setting(conn, STATE_KEY) or {}
                if state.get("state") != "running" or state["target"]["name"] != target:
                    raise MigrationError("the migration was aborted or replaced while this batch ran")
                for key in ("embedded", "reused", "text_mismatches"):
                    state[key] = state.get(key, 0) + getattr(res, key)
                state["batches"] = state.get("batches", 0) + 1
                state["updated_at"] = _now()
                _put(conn, STATE_KEY, state)
            break
        except psycopg.errors.ForeignKeyViolation:
            # a passage was deleted (its file re-ingested) between the EXISTS and the
            # FK check; the batch is retried without it
            if attempt:
                raise
    res.seconds = time.perf_counter() - started
    return res


class _RunnerLock:
    """Session advisory lock on a dedicated connection; dies with the process."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.conn: psycopg.Connection | None = None

    def __enter__(self) -> _RunnerLock:
        self.conn = psycopg.connect(self.db.dsn, autocommit=True)
        if not self.conn.execute("SELECT pg_try_advisory_lock(%s)", (RUNNER_LOCK_ID,)).fetchone()[0]:
            self.conn.close()
            raise MigrationError("another process is running this migration (advisory lock held)")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()


def run(db: Database, *, embedder: Embedder | None = None, max_batches: int | None = None,
        max_seconds: float | None = None, switch_at_end: bool = True, pause_seconds: float = 0.0,
        on_batch: Callable[[BatchResult, dict[str, int]], None] | None = None) -> dict[str, Any]:
    """Run (or resume) the recorded migration: batches until nothing remains, then the
    switch. `max_batches` / `max_seconds` stop early (progress is kept); the result
    says where it stands. `pause_seconds` between batches throttles a migration on a
    machine that also serves (2 cores here: a batch of MiniLM takes both)."""
    with db.connect() as conn:
        state = _setting(conn, STATE_KEY)
    if not state or state.get("state") != "running":
        raise MigrationError("no migration is running: `library migrate embedder start` records one")
    target = state["target"]
    embedder = embedder or EmbedderSpec.from_dict(target).load()
    if embedder.name != target["name"]:
        raise MigrationError(f"the target model loads as {embedder.name}, but the migration was started "
                             f"for {target['name']}; abort and start again")
    started = time.perf_counter()
    batches = 0
    exhausted = False
    with _RunnerLock(db):
        with db.transaction() as conn:
            state = _setting(conn, STATE_KEY)
            state["runs"] = state.get("runs", 0) + 1
            _put(conn, STATE_KEY, state)
        while True:
            res = step(db, embedder, target["name"], int(state.get("batch_size") or DEFAULT_BATCH))
            if not res.passages:
                exhausted = True
                break
            batches += 1
            if on_batch is not None:
                with db.connect() as conn:
                    on_batch(res, counts(conn, target["name"]))
            # limits are checked after a batch: every run makes progress
            if max_batches is not None and batches >= max_batches:
                break
            if max_seconds is not None and time.perf_counter() - started >= max_seconds:
                break
            if pause_seconds > 0:
                time.sleep(pause_seconds)
        switched = False
        if switch_at_end and exhausted:
            switch(db, embedder)
            switched = True
    with db.connect() as conn:
        out = status(conn)
    out.update(batches_this_run=batches, switched=switched, seconds=round(time.perf_counter() - started, 2))
    return out


def switch(db: Database, embedder: Embedder) -> dict[str, Any]:
    """Make the target the active model, in one transaction (see the module docstring)."""
    started = time.perf_counter()
    with db.transaction() as conn:
        state = _setting(conn, STATE_KEY)
        if not state or state.get("state") != "running" or state["target"]["name"] != embedder.name:
            raise MigrationError("no running migration to this model to switch to")
        target = embedder.name
        # readers go on (ACCESS SHARE does not conflict); ingest, memory writes and
        # curation wait for the few seconds this takes, then see the new model
        conn.execute("LOCK TABLE passages IN SHARE ROW EXCLUSIVE MODE")
        stragglers = conn.execute(_BATCH_SQL, {"target": target, "limit": MAX_SWITCH_CATCHUP + 1}).fetchall()
        if len(stragglers) > MAX_SWITCH_CATCHUP:
            raise MigrationError(f"more than {MAX_SWITCH_CATCHUP} passages still lack a {target} vector; "
                                 "resume the migration before switching")
        if stragglers:
            items, res = _embed_rows(conn, embedder, stragglers)
            _insert(conn, items)
            state["embedded"] = state.get("embedded", 0) + res.embedded
            state["text_mismatches"] = state.get("text_mismatches", 0) + res.text_mismatches
        source = state.get("source")
        kept = 0
        if source:
            kept = conn.execute(
                "INSERT INTO passage_embeddings (passage_id, model, embedding, embed_hash) "
                "SELECT id, embed_model, embedding, embed_hash FROM passages "
                "WHERE embed_model = %s AND embedding IS NOT NULL "
                "ON CONFLICT (model, passage_id) DO NOTHING", (source,)).rowcount
        moved = conn.execute(
            "UPDATE passages p SET embedding = e.embedding, embed_model = e.model, embed_hash = e.embed_hash "
            "FROM passage_embeddings e WHERE e.model = %s AND e.passage_id = p.id "
            "AND p.embed_model IS DISTINCT FROM %s", (target, target)).rowcount
        left = conn.execute("SELECT count(*) FROM passages WHERE embed_model IS DISTINCT FROM %s",
                            (target,)).fetchone()[0]
        if left:
            raise MigrationError(f"{left} passages would stay on another model; nothing was switched")
        # built after the copy: one bulk HNSW build instead of row-by-row inserts
        conn.execute("SELECT ensure_vector_indexes(%s, %s)", (target, embedder.dims))
        conn.execute("DELETE FROM passage_embeddings WHERE model = %s", (target,))
        _put(conn, ACTIVE_KEY, {**state["target"], "previous": source, "switched_at": _now()})
        state.update(state="done", finished_at=_now(), updated_at=_now(), switched_passages=moved,
                     kept_previous_vectors=kept, switch_seconds=round(time.perf_counter() - started, 2))
        _put(conn, STATE_KEY, state)
    log.info("switched the library to %s: %d passages in %.1fs", target, moved, time.perf_counter() - started)
    return state


# -- the multilingual lane: fill the passages that lack its vector -------------------

_MULTI_BATCH_SQL = """
SELECT p.id, p.source, p.heading, p.content, p.embed_hash, d.title
FROM passages p LEFT JOIN documents d ON d.id = p.document_id
WHERE p.embed_model_multi IS DISTINCT FROM %(model)s
ORDER BY p.id LIMIT %(limit)s
"""


def fill_multilingual(db: Database, embedder: Embedder | None = None, *, batch_size: int = DEFAULT_BATCH,
                      max_seconds: float | None = None, pause_seconds: float = 0.0,
                      on_batch: Callable[[BatchResult, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Embed every passage without a multilingual vector, in committed batches (identical
    texts once, vectors already stored for the same text reused), then build the lane's
    indexes. Resumable: a killed run loses at most its batch in flight. Search uses each
    row's multilingual vector as soon as its batch commits."""
    embedder = embedder if embedder is not None else multilingual_embedder()
    if embedder is None:
        raise MigrationError("the multilingual lane is off (LIBRARY_EMBED_MULTILINGUAL=off)")
    started = time.perf_counter()
    total = BatchResult()
    batches = 0
    with _RunnerLock(db):
        while True:
            t = time.perf_counter()
            with db.connect() as conn:
                rows = conn.execute(_MULTI_BATCH_SQL, {"model": embedder.name, "limit": batch_size}).fetchall()
                if not rows:
                    break
                texts = [passage_text(r[1], r[5], r[2], r[3]) for r in rows]
                hashes = [sha256(x) for x in texts]
                distinct = list(dict.fromkeys(hashes))
                known = stored_vectors(conn, embedder, distinct, multilingual=True)
            todo, _ = embed_missing(embedder, distinct, dict(zip(hashes, texts)), known)
            res = BatchResult(passages=len(rows), embedded=len(todo), reused=len(rows) - len(todo),
                              text_mismatches=sum(1 for r, h in zip(rows, hashes) if r[4] and r[4] != h))
            with db.transaction() as conn, conn.cursor() as cur:
                cur.executemany("UPDATE passages SET embedding_multi = %s, embed_model_multi = %s WHERE id = %s",
                                [(known[h], embedder.name, r[0]) for r, h in zip(rows, hashes)])
            res.seconds = time.perf_counter() - t
            for key in ("passages", "embedded", "reused", "text_mismatches"):
                setattr(total, key, getattr(total, key) + getattr(res, key))
            batches += 1
            if on_batch is not None:
                with db.connect() as conn:
                    on_batch(res, multilingual_counts(conn, embedder.name))
            if max_seconds is not None and time.perf_counter() - started >= max_seconds:
                break
            if pause_seconds > 0:
                time.sleep(pause_seconds)
        # built after the bulk of the rows: one HNSW build instead of row-by-row inserts
        with db.transaction() as conn:
            conn.execute("SELECT ensure_multilingual_indexes(%s, %s)", (embedder.name, embedder.dims))
            _put(conn, MULTI_KEY, {"name": embedder.name, "dims": embedder.dims})
            left = multilingual_counts(conn, embedder.name)
    return {"model": embedder.name, "batches": batches, "passages": total.passages, "embedded": total.embedded,
            "reused": total.reused, "text_mismatches": total.text_mismatches, **{k: left[k] for k in ("done", "remaining")},
            "seconds": round(time.perf_counter() - started, 2)}


def describe(st: dict[str, Any]) -> str:
    """One line for `library status`."""
    multi = st.get("multilingual") or {}
    second = (f"; multilingual lane: {multi['model']} ({multi['done']} passages, {multi['remaining']} without "
              f"its vector{': `library migrate embedder multilingual` fills them' if multi['remaining'] else ''})"
              if multi.get("model") else "; multilingual lane: none")
    if st["state"] == "none":
        return f"embedder: {st.get('active') or 'none yet'}; no migration" + second
    target = st["target"]["name"]
    if st["state"] == "running":
        return (f"embedder: {st.get('active')}; migration to {target} running: {st['done']}/{st['total']} "
                f"passages done, {st['remaining']} remaining (batches {st.get('batches', 0)}, "
                f"updated {st.get('updated_at')})" + second)
    return f"embedder: {st.get('active')}; last migration to {target} {st['state']} ({st.get('updated_at')})" + second

