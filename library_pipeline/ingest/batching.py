"""Embedding across files: the texts of many small files encoded in one call per
vector lane, each file still embedded and swapped in its own transaction by
`store.embed_step` (its writer's models answer from the vectors encoded ahead)."""

from __future__ import annotations

import time

import numpy as np

from library_pipeline.ingest.store import ReusedConnection
from serving.db import Database
from serving.embedding import embed_text_for_passage, encode_passages_side_by_side, sha256
from serving.passage_writer import PassageWriter

# A short file has one to three passages: embedded file by file, the model ran
# batches of 1-3 texts and per-call overhead dominated (5,000 abstracts indexed at
# ~10 files/s while the raw model encoded the same texts several times faster).
# The texts of up to EMBED_GROUP_TEXTS passages, across files, are encoded in one
# call; each file is still written in its own transaction.

EMBED_GROUP_TEXTS = 2048

_PENDING_CHUNKS_SQL = """
SELECT d.partition_key, d.title, c.heading, c.content
FROM documents d JOIN chunks c ON c.document_id = d.id
WHERE d.source = 'library' AND d.partition_key = ANY(%(keys)s) AND d.status NOT IN ('failed', 'removed')
  AND (%(force)s OR d.indexed_hash IS NULL OR d.indexed_hash IS DISTINCT FROM d.content_hash)
ORDER BY d.partition_key, c.ordinal
"""


def embed_groups(db: Database, keys: list[str]) -> list[list[str]]:
    """Consecutive runs of keys holding at most ~EMBED_GROUP_TEXTS chunks to embed
    (a book alone may exceed it: then it is a group of its own)."""
    if len(keys) <= 1:
        return [list(keys)] if keys else []
    with db.connect() as conn:
        counts = dict(conn.execute(
            "SELECT d.partition_key, count(*) FROM documents d JOIN chunks c ON c.document_id = d.id "
            "WHERE d.source = 'library' AND d.partition_key = ANY(%s) GROUP BY d.partition_key",
            (list(keys),)).fetchall())
    groups: list[list[str]] = [[]]
    size = 0
    for key in keys:
        n = counts.get(key, 0)
        if groups[-1] and size + n > EMBED_GROUP_TEXTS:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += n
    return groups


def batched_writer(model) -> tuple[PassageWriter, list[tuple["BatchedEmbedder", str]]]:
    """A PassageWriter whose vector lanes (the primary model and, when on, the
    multilingual one) answer from vectors encoded ahead for a group of files, and the
    lanes as `prefetch` takes them: (batched model, vector column)."""
    # a range run leaves a missing verbatim HNSW index to build_vector_indexes, built
    # once after the sync (serving.passage_writer)
    writer = PassageWriter(BatchedEmbedder(model), verbatim_index=False)
    lanes = [(writer.primary, "embedding")]
    if writer.multi is not None:
        writer.multi = BatchedEmbedder(writer.multi)
        lanes.append((writer.multi, "embedding_multi"))
    return writer, lanes


# embed_hashes already stored under a lane's model, per vector column
_STORED_SQL = {
    "embedding": "SELECT DISTINCT embed_hash FROM passages "
                 "WHERE embed_model = %s AND embed_hash = ANY(%s) AND embedding IS NOT NULL",
    "embedding_multi": "SELECT DISTINCT embed_hash FROM passages "
                       "WHERE embed_model_multi = %s AND embed_hash = ANY(%s) AND embedding_multi IS NOT NULL",
}


def prefetch(db: Database | ReusedConnection, keys: list[str], lanes: list[tuple["BatchedEmbedder", str]],
             *, force: bool = False, writer: PassageWriter | None = None) -> float:
    """Encode the pending chunk texts of `keys` with each lane's model in one call, the
    two lanes side by side (vectors already stored under that model are reused by the
    step, not encoded). `lanes`: (batched model, vector column) per vector lane; `writer`:
    the PassageWriter they serve, whose primary model is given only the texts it reads.
    Returns the wall seconds spent encoding."""
    if len(keys) <= 1:
        return 0.0  # nothing to batch across
    with db.connect() as conn:
        rows = conn.execute(_PENDING_CHUNKS_SQL, {"keys": list(keys), "force": force}).fetchall()
        texts = list(dict.fromkeys(embed_text_for_passage(r[1], r[2], r[3]) for r in rows))
        if not texts:
            return 0.0
        hashes = [sha256(t) for t in texts]
        todo = []
        for batched, column in lanes:
            query = _STORED_SQL[column]
            stored = {r[0] for r in conn.execute(query, (batched.inner.name, hashes)).fetchall()}
            todo.append([t for t, h in zip(texts, hashes) if h not in stored
                         and (writer is None or column != "embedding" or writer.primary_reads(t))])
    started = time.perf_counter()
    encoded = encode_passages_side_by_side([(batched.inner, missing) for (batched, _), missing in zip(lanes, todo)],
                                           on_encoded=writer.on_encoded if writer is not None else None)
    for (batched, _), missing, (vectors, seconds) in zip(lanes, todo, encoded):
        batched.keep(missing, vectors, seconds)
    return time.perf_counter() - started


class BatchedEmbedder:
    """The model, answering `encode_passages` from vectors encoded ahead for a
    group of files (any text not prefetched goes to the model as before)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self._cache: dict[str, np.ndarray] = {}
        self.seconds = 0.0
        self.calls = 0
        # told (inner model, texts) when texts not encoded ahead are encoded now (progress)
        self.on_encoded = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def keep(self, texts: list[str], vectors: np.ndarray, seconds: float) -> None:
        """Vectors the model encoded ahead for `texts`, in `seconds`."""
        if not texts:
            return
        self.seconds += seconds
        self.calls += 1
        self._cache.update(zip(texts, vectors))

    def clear(self) -> None:
        self._cache.clear()

    def encoded_ahead(self, text: str) -> bool:
        """Whether `text` was encoded ahead (so `prefetch` found no stored vector for it)."""
        return text in self._cache

    def encode_passages(self, texts: list[str], *, threads: int | None = None) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vectors = (self.inner.encode_passages(missing, threads=threads) if threads
                       else self.inner.encode_passages(missing))
            self._cache.update(zip(missing, vectors))
            if self.on_encoded is not None:
                self.on_encoded(self.inner, len(missing))
        return np.stack([self._cache[t] for t in texts]) if texts else self.inner.encode_passages([])


