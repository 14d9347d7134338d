"""RAPTOR summary tree per file: cluster -> summarise -> embed -> repeat.

Figures from agent-library's RAPTOR (github.com/CreateM1nd/agent-library): target cluster size 16, files under 6 passages
skipped, at most 3 levels, stop when a level has 3 nodes or fewer. Clusters
come from k-means (scikit-learn, fixed random_state so a rebuild of unchanged
input gives the same tree) over the passages' own embeddings.

Summaries:
- offline (no LLM backend, the default here): extractive. The cluster's most
  central sentences by embedding (cosine to the cluster centroid), near
  duplicates dropped (overlapping windows repeat sentences), capped at 3
  sentences / 700 characters so a summary fits MiniLM's 256-token window
  with its title prefix. Only the sentences of the 4 passages nearest the
  centroid are embedded: embedding every sentence of a book costs ~5x the
  passages themselves, and the central passages hold the central sentences.
  Higher levels reuse the vectors of the sentences chosen below (no new
  sentence embeddings at all).
- with a generator: abstractive, from the children's text.

The tree is stored as `passages` rows (kind 'summary', summary_level >= 1,
`summarises` = ids one level down), replacing the file's previous tree in
one transaction, and only if the file's passages did not change meanwhile.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from psycopg import sql

from library_pipeline.documents import StepResult, ingested_document
from library_pipeline.ingest.passage_text import clip_heading
from serving.db import Database
from serving.embedding import Embedder, chunk_counter, embed_text_for_passage, sha256
from serving.generation import GenerationError, TextGenerator
from serving.passage_writer import PassageRow, PassageWriter, ensure_indexes

log = logging.getLogger(__name__)

TARGET_CLUSTER = 16
MIN_PASSAGES = 6
MAX_LEVELS = 3
STOP_AT = 3
MAX_SENTENCES = 3
MAX_CHARS = 700
CENTRAL_PASSAGES = 4
NEAR_DUPLICATE = 0.92

SUMMARY_SYSTEM = (
    "You write summaries for a search index of books and papers. Summarise the passages you are given "
    "in at most 5 sentences and 120 words. Keep the names of people, places, works, tools and terms "
    "exactly as written; state what happens or what is explained; no preamble, no opinions, no "
    "information that is not in the passages. Write in the language of the passages.")

_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"”»’)\]]*\s+(?=[\"“«‘'(\[]*[A-ZА-ЯЁ0-9])")


def split_sentences(text: str) -> list[str]:
    text = re.sub(r"\s+", " ", text).strip()
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


@dataclass
class Node:
    id: int | None                  # passage id once stored
    order: float                    # position in the document (ordinal of the first leaf)
    text: str
    vector: np.ndarray
    page_start: int | None = None
    page_end: int | None = None
    headings: list[str] = field(default_factory=list)
    sentences: list[tuple[str, np.ndarray]] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    level: int = 0


def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v)
    return v / n if n else v


def cluster(vectors: np.ndarray, target: int = TARGET_CLUSTER, seed: int = 0) -> list[list[int]]:
    """Indices grouped into ceil(n / target) k-means clusters, each cluster in
    input order, clusters ordered by their first member."""
    n = len(vectors)
    k = max(1, math.ceil(n / target))
    if k == 1:
        return [list(range(n))]
    from sklearn.cluster import KMeans

    labels = KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(vectors)
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(int(label), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def _candidates(members: list[Node], centroid: np.ndarray) -> list[Node]:
    ranked = sorted(members, key=lambda m: -float(m.vector @ centroid))
    return ranked[:CENTRAL_PASSAGES]


def _choose(sentences: list[tuple[float, int, str, np.ndarray]], centroid: np.ndarray
            ) -> list[tuple[float, int, str, np.ndarray]]:
    """Most central first, near duplicates skipped, then back in reading order."""
    chosen: list[tuple[float, int, str, np.ndarray]] = []
    seen: set[str] = set()
    total = 0
    for order, pos, text, vec in sorted(sentences, key=lambda s: -float(s[3] @ centroid)):
        key = re.sub(r"\W+", " ", text.lower()).strip()
        if not key or key in seen or len(text) < 25:
            continue
        if any(float(vec @ c[3]) >= NEAR_DUPLICATE for c in chosen):
            continue
        if total + len(text) > MAX_CHARS and chosen:
            continue
        if len(text) > MAX_CHARS:
            text = text[: MAX_CHARS - 1].rsplit(" ", 1)[0] + "…"
        chosen.append((order, pos, text, vec))
        seen.add(key)
        total += len(text) + 1
        if len(chosen) >= MAX_SENTENCES:
            break
    return sorted(chosen, key=lambda s: (s[0], s[1]))


def _heading(children: list[Node]) -> str | None:
    headings = [h for c in children for h in c.headings if h]
    if not headings:
        return None
    common = Counter(headings).most_common(1)[0][0]
    distinct = list(dict.fromkeys(headings))
    if len(distinct) == 1:
        return clip_heading(common)
    return clip_heading(f"{distinct[0]} … {distinct[-1]}")


@dataclass
class TreeStats:
    levels: int = 0
    nodes: int = 0
    per_level: dict[int, int] = field(default_factory=dict)
    sentences_embedded: int = 0
    summarise_seconds: float = 0.0


def build_levels(leaves: list[Node], embedder: Embedder, title: str | None,
                 generator: TextGenerator | None = None) -> tuple[list[list[Node]], TreeStats]:
    """The summary levels (1..3) above `leaves`; nothing when there are too few."""
    stats = TreeStats()
    levels: list[list[Node]] = []
    nodes = leaves
    if len(leaves) < MIN_PASSAGES:
        return levels, stats
    started = time.perf_counter()
    for level in range(1, MAX_LEVELS + 1):
        groups = cluster(np.stack([n.vector for n in nodes]))
        members = [[nodes[i] for i in g] for g in groups]
        centroids = [_unit(np.mean([m.vector for m in ms], axis=0)) for ms in members]
        if generator is None:
            texts = _extractive(level, members, centroids, embedder, stats)
        else:
            texts = [_abstractive(generator, title, ms) for ms in members]
        made = []
        for ms, (content, sentences) in zip(members, texts):
            made.append(Node(id=None, order=min(m.order for m in ms), text=content, vector=np.zeros(0),
                             page_start=min((m.page_start for m in ms if m.page_start is not None), default=None),
                             page_end=max((m.page_end for m in ms if m.page_end is not None), default=None),
                             headings=[h for m in ms for h in m.headings], sentences=sentences,
                             children=ms, level=level))
        vectors = embedder.encode_passages([embed_text_for_passage(title, _heading(n.children), n.text)
                                            for n in made])
        for node, vec in zip(made, vectors):
            node.vector = np.asarray(vec, dtype=np.float32)
        levels.append(made)
        stats.per_level[level] = len(made)
        nodes = made
        if len(made) <= STOP_AT:
            break
    stats.levels = len(levels)
    stats.nodes = sum(len(lv) for lv in levels)
    stats.summarise_seconds = time.perf_counter() - started
    return levels, stats


def _extractive(level: int, members: list[list[Node]], centroids: list[np.ndarray], embedder: Embedder,
                stats: TreeStats) -> list[tuple[str, list[tuple[str, np.ndarray]]]]:
    pools: list[list[tuple[float, int, str, np.ndarray | None]]] = []
    pending: list[tuple[int, int]] = []   # (cluster, index in its pool) needing a vector
    texts: list[str] = []
    for c, (ms, centroid) in enumerate(zip(members, centroids)):
        pool: list = []
        if level == 1:
            for node in _candidates(ms, centroid):
                for pos, sentence in enumerate(split_sentences(node.text)):
                    pending.append((c, len(pool)))
                    texts.append(sentence)
                    pool.append((node.order, pos, sentence, None))
        else:
            for node in ms:
                for pos, (sentence, vec) in enumerate(node.sentences):
                    pool.append((node.order, pos, sentence, vec))
        pools.append(pool)
    if texts:
        vectors = embedder.encode_passages(texts)
        stats.sentences_embedded += len(texts)
        for (c, i), vec in zip(pending, vectors):
            order, pos, sentence, _ = pools[c][i]
            pools[c][i] = (order, pos, sentence, np.asarray(vec, dtype=np.float32))
    out = []
    for pool, centroid, ms in zip(pools, centroids, members):
        chosen = _choose(pool, centroid)
        if not chosen:  # fragments only (a TOC, a table): keep the most central text, clipped
            best = max(ms, key=lambda m: float(m.vector @ centroid))
            text = re.sub(r"\s+", " ", best.text)[:MAX_CHARS]
            out.append((text, [(text, best.vector)]))
            continue
        out.append((" ".join(s[2] for s in chosen), [(s[2], s[3]) for s in chosen]))
    return out


def _abstractive(generator: TextGenerator, title: str | None, members: list[Node]
                 ) -> tuple[str, list[tuple[str, np.ndarray]]]:
    budget, parts = 8000, []
    for m in members:
        piece = re.sub(r"\s+", " ", m.text)[:1500]
        if budget - len(piece) < 0:
            break
        parts.append(piece)
        budget -= len(piece)
    prompt = (f"Document: {title or 'untitled'}\n\nPassages:\n\n" + "\n\n---\n\n".join(parts)
              + "\n\nSummary:")
    text = generator.generate(SUMMARY_SYSTEM, prompt, max_tokens=300).strip()
    if not text:
        raise GenerationError(f"{generator.name} returned an empty summary")
    return text[:2000], []


# -- the per-file step ----------------------------------------------------------------

# {vector}, {model}: the tree model's columns (embedding / embed_model for the primary
# model, embedding_multi / embed_model_multi for the multilingual one)
LEAVES_SQL = sql.SQL("""
SELECT id, ordinal, content, {vector}, page_start, page_end, heading
FROM passages WHERE document_id = %s AND summary_level = 0 AND NOT removed AND {model} = %s
  AND {vector} IS NOT NULL AND kind <> 'boilerplate'
ORDER BY ordinal
""")


def tree_model(writer: PassageWriter, language: str | None) -> tuple[Embedder, bool]:
    """The model a file's tree is clustered and summarised with, and whether it is the
    multilingual one: the model that reads the file's language (chunk_counter's rule).
    An English-only model's vectors of a Russian book are not stored at all (the passage
    writer gives that model only text it reads), and clustering by them grouped
    passages by their letters, not their sense."""
    chosen = chunk_counter(writer.primary, language)
    multi = writer.multi is not None and chosen is not writer.primary and chosen.name == writer.multi.name
    return (writer.multi, True) if multi else (writer.primary, False)

def raptor_step(db: Database, key: str, embedder: Embedder, generator: TextGenerator | None = None, *,
                force: bool = False) -> StepResult:
    started = time.perf_counter()
    summariser = generator.name if generator is not None else "extractive"
    # summaries only: a missing verbatim index is left to build_vector_indexes (built
    # once after a sync), not built here while a first sync is still writing
    writer = PassageWriter(embedder, verbatim_index=False)
    ensure_indexes(db, writer)
    with db.connect() as conn:
        doc, result = ingested_document(conn, key)
        if doc is None:
            return result
        version = conn.execute("SELECT version FROM documents WHERE id = %s", (doc["id"],)).fetchone()[0]
        built = conn.execute("SELECT version, embed_model, summariser FROM raptor_builds WHERE document_id = %s",
                             (doc["id"],)).fetchone()
        if not force and built == (version, embedder.name, summariser):
            result.status, result.reason = "skipped", "tree is current"
            return result
        model, multi = tree_model(writer, doc["language"])
        columns = ("embedding_multi", "embed_model_multi") if multi else ("embedding", "embed_model")
        rows = conn.execute(LEAVES_SQL.format(vector=sql.Identifier(columns[0]), model=sql.Identifier(columns[1])),
                            (doc["id"], model.name)).fetchall()
    leaves = [Node(id=r[0], order=r[1], text=r[2], vector=np.asarray(r[3].to_list(), dtype=np.float32),
                   page_start=r[4], page_end=r[5], headings=[r[6]] if r[6] else []) for r in rows]
    try:
        levels, stats = build_levels(leaves, model, doc["title"], generator)
    except GenerationError as exc:
        result.status, result.reason = "failed", f"summariser {summariser}: {exc}"
        return result

    # a summary's vector under the tree model is the tree's own (build_levels); the other
    # model embeds the summary's text like any passage's (if it reads it)
    texts = [embed_text_for_passage(doc["title"], _heading(node.children), node.text)
             for level in levels for node in level]
    own = {sha256(t): node.vector for t, node in zip(texts, (n for level in levels for n in level))}
    with db.connect() as conn:
        vectors = (writer.prepare(conn, texts, multi_given=own) if multi
                   else writer.prepare(conn, texts, primary_given=set(own)))

    with db.transaction() as conn:
        now = conn.execute("SELECT version, status FROM documents WHERE id = %s FOR UPDATE",
                           (doc["id"],)).fetchone()
        if now is None or now[0] != version:
            result.status, result.reason = "skipped", "passages changed during the build; the next run rebuilds"
            return result
        if now[1] == "removed":
            # marked removed while the tree was built: its summaries must not appear in
            # search after its passages left it
            result.status, result.reason = "skipped", "file removed during the build"
            return result
        writer.swap(conn, doc["id"], [], vectors, summaries=True)
        for level in levels:
            rows = [PassageRow(content=node.text,
                               embed_text=embed_text_for_passage(doc["title"], _heading(node.children), node.text),
                               document_id=doc["id"], ordinal=ordinal, kind="summary", summary_level=node.level,
                               summarises=[c.id for c in node.children], page_start=node.page_start,
                               page_end=node.page_end, heading=_heading(node.children),
                               ts_config=doc["ts_config"], vector=None if multi else node.vector)
                    for ordinal, node in enumerate(level)]
            for node, pid in zip(level, writer.insert(conn, rows, vectors)):
                node.id = pid
        conn.execute(
            "INSERT INTO raptor_builds (document_id, version, embed_model, summariser, levels, nodes) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (document_id) DO UPDATE SET version = EXCLUDED.version, "
            "embed_model = EXCLUDED.embed_model, summariser = EXCLUDED.summariser, levels = EXCLUDED.levels, "
            "nodes = EXCLUDED.nodes, built_at = now()",
            (doc["id"], version, embedder.name, summariser, stats.levels, stats.nodes))
    if not levels:
        result.reason = f"{len(leaves)} passages: under {MIN_PASSAGES}, no tree"
    result.figures = {"passages": len(leaves), "summaries": stats.nodes, "levels": stats.levels,
                      "sentences_embedded": stats.sentences_embedded,
                      "summarise_seconds": round(stats.summarise_seconds, 3), "summariser": summariser,
                      "seconds": round(time.perf_counter() - started, 3)}
    return result
