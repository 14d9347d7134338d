"""Calibrated fusion: every candidate scored by every lane that can read it, each lane's
score made comparable across queries, and one probability of relevance per candidate.
(~400 lines, one responsibility: the evidence, the fitted models and the rule that joins
them are read together when the models are refitted.)

Why not min-max: it gives each lane's best hit 1.0 whatever its absolute similarity, so a
weak best counts as much as a strong one, and a passage only one lane returned gets
nothing from the others however close it is to the query. In a mixed library that made
the weakest reader decide alone: English questions over English and Russian books put a
Russian passage first on the multilingual lane's say-so ("Who is Irene Adler?" answered
from «Капитанская дочка»).

Here the lanes only propose candidates. Every candidate in the pool is then scored

- under each embedding model from its stored vector (`pool_vectors`), as a z-score
  against the query's similarity to a fixed sample of the library (`Background`): how
  far above a random passage it stands, comparable across queries and models;
- by BM25 in the passage and its context (its neighbours and its document, `pool_bm25`,
  `keyword_evidence`), as a share of the best score the query's terms could give (terms
  the corpus lacks count at the corpus's top idf: "Кто такая Ирен Адлер?" over a Russian
  book that never names her must not look like a full match on «такая»);

and a logistic model maps whichever of those the candidate has to P(relevant). Which
evidence a candidate has follows from who can read it: the English-only model neither a
Russian query nor a Russian passage, BM25 nothing in a script none of the query's words
is written in, the multilingual model everything. So a passage in another script is judged on the
multilingual model's evidence alone, by a model fitted on exactly such candidates, and
must beat same-language candidates on a common scale, not just top its own lane.

The coefficients (`MODELS`) were fitted on the pool candidates of BEIR SciFact TRAIN,
XQuAD mixed (English and Russian questions over one half-English, half-Russian corpus),
XQuAD ru->ru and the MS MARCO passage subset (benchmarks/eval_calibration.py --fit;
docs/evaluation.md has the figures, on held-out halves and leaving each collection out).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import psycopg
from pgvector import HalfVector
from psycopg import sql

from serving.db import database_key
from serving.search.fusion import Fused, _ordered
from serving.search.keyword import tsquery_literal
from serving.search.language import script
from serving.search.lanes import LaneHits
from serving.search.vector import planner_rows

# evidence -> (coefficient per evidence in EVIDENCE order, bias): P = sigmoid(sum + bias).
# Fitted (benchmarks/eval_calibration.py --fit) on every pool candidate of the training
# sets, one model per set of evidence a candidate can have (slopes shared across
# collections, the bias from where kinds compete: see `fit` there); a set not listed falls
# back to the largest listed subset of it (`probability`).
EVIDENCE = ("vector", "multilingual", "keyword")
MODELS: dict[tuple[str, ...], tuple[tuple[float, ...], float]] = {
    ("vector", "multilingual", "keyword"): ((0.824, 0.083, 10.539), -6.452),
    ("vector", "keyword"): ((0.851, 10.768), -6.357),
    ("vector", "multilingual"): ((1.177, 0.345), -6.777),
    ("vector",): ((1.329,), -6.365),
    ("multilingual", "keyword"): ((0.65, 23.217), -6.661),
    ("multilingual",): ((1.717,), -6.841),
    ("keyword",): ((19.26,), -5.29),
}

# text-search configurations whose passages are written in Cyrillic (schema.sql's map of
# languages to configurations)
CYRILLIC_CONFIGS = frozenset({"russian"})

BACKGROUND_SIZE = 256
MIN_SAMPLE = 8         # fewer sampled passages give no spread worth standing against
# a sample is taken again when the library has grown or shrunk by this share, or is this old
BACKGROUND_DRIFT = 0.25
BACKGROUND_SECONDS = 3600.0
BACKGROUND_CHECK_SECONDS = 60.0


@dataclass
class _Sample:
    vectors: np.ndarray      # unit rows
    rows: float              # passages (planner estimate) when taken
    taken: float
    checked: float           # when the library's size was last compared with `rows`


def sample_sql(column: str, dims: int) -> sql.Composed:
    """The background sample of one vector column: (model, sources or None, sources or None,
    size). Every n-th passage by a multiplicative hash of its id, the same sample on every
    call (a TABLESAMPLE would move each query's z-scores at random), read in the order of
    schema.sql's passages_sample_idx, whose expression the ORDER BY repeats."""
    model_col = "embed_model" if column == "embedding" else "embed_model_multi"
    return sql.SQL(
        "SELECT {col}::vector({dims})::text FROM passages WHERE {model_col} = %s AND summary_level = 0 "
        "AND {col} IS NOT NULL AND (%s::text[] IS NULL OR source = ANY(%s::text[])) "
        "ORDER BY (id * 2654435761::numeric) %% 4294967296 LIMIT %s").format(
            col=sql.Identifier(column), dims=sql.SQL(str(int(dims))), model_col=sql.Identifier(model_col))


class Background:
    """A fixed sample of each model's passage vectors per database and set of sources (the
    search's: engine.DOCUMENT_SOURCES or memories), kept in the process: the query's
    similarity to it (mean, spread) is what a z-score stands against."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, str, str, tuple[str, ...] | None], _Sample] = {}

    def stats(self, conn: psycopg.Connection, column: str, model: str, dims: int,
              qvec: np.ndarray, sources: tuple[str, ...] | None = None) -> tuple[float, float] | None:
        """(mean, spread) of the query's similarity to the sample of `sources`' passages (all
        passages when None, or when those sources hold too few)."""
        sample = self._sample(conn, column, model, dims, tuple(sorted(sources)) if sources else None)
        if sources and (sample is None or len(sample.vectors) < MIN_SAMPLE):
            sample = self._sample(conn, column, model, dims, None)
        if sample is None or len(sample.vectors) < MIN_SAMPLE:
            return None
        q = np.asarray(qvec, dtype=np.float32)
        sims = sample.vectors @ (q / (np.linalg.norm(q) or 1.0))
        sd = float(sims.std())
        return float(sims.mean()), (sd if sd > 1e-6 else 1e-6)

    def _sample(self, conn: psycopg.Connection, column: str, model: str, dims: int,
                sources: tuple[str, ...] | None) -> _Sample | None:
        key = (database_key(conn), column, model, sources)
        now = time.monotonic()
        with self._lock:
            have = self._samples.get(key)
        if have is not None and now - have.checked < BACKGROUND_CHECK_SECONDS:
            return have   # the library's size is looked up at most once a minute, not per search
        rows = planner_rows(conn)
        if have is not None and now - have.taken < BACKGROUND_SECONDS and \
                abs(rows - have.rows) <= BACKGROUND_DRIFT * max(have.rows, 1.0):
            have.checked = now
            return have
        query = sample_sql(column, dims)
        chosen = list(sources) if sources else None
        found = conn.execute(query, (model, chosen, chosen, BACKGROUND_SIZE)).fetchall()
        if not found and sources is None:
            return None
        # an empty sample of some sources is kept like any other (stats falls back to every
        # passage): else a memory search before the first memory re-ran this scan of the
        # whole table on every call
        vectors = np.array([[float(x) for x in text.strip("[]").split(",")] for (text,) in found],
                           dtype=np.float32).reshape(len(found), int(dims))
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)
        sample = _Sample(vectors, rows, now, now)
        with self._lock:
            self._samples[key] = sample
        return sample


BACKGROUND = Background()


@dataclass
class Probe:
    """One embedding model's view of the query: which lane it is, its query vector and
    where its passage vectors live."""
    lane: str
    column: str         # passages.embedding | passages.embedding_multi
    model: str
    dims: int
    qvec: np.ndarray


@dataclass
class PoolEvidence:
    """What the fusion stage reads of the pool (`pool_vectors`, `pool_bm25`)."""
    zscores: dict[str, dict[int, float]]    # lane -> passage -> z-score under that lane's model
    configs: dict[int, str]                 # passage -> its text-search configuration
    scripts: dict[int, str]                 # passage -> script of its first 300 characters
    bm25: dict[int, float]                  # passage -> BM25 of the query's terms in it
    documents: dict[int, int | None]        # passage -> its document
    window: dict[int, float] = field(default_factory=dict)  # passage -> BM25 of its window


def bm25_terms(trace: list[dict]) -> list[tuple[str, str, float, float]]:
    """(configuration, lexeme, idf, average length) of each query term the keyword lane
    scored with, from its trace."""
    return [(entry["config"], term["lexeme"], float(term["idf"]), float(entry.get("avg_length") or 1.0))
            for entry in trace for term in entry.get("terms", [])]


# BM25 of the query's terms in each pool passage (`own`) and in the window of its document's
# (or its memory record's: a long report is chunked like a document) passages within
# `window` ordinals of it (`ctx`: term counts and lengths summed over the
# window, against `window`-wide average length), from their own tsvectors - the keyword
# lane's sum, exact (the lane reads a common term's postings only down to a bound). Each
# window passage's tsvector is read from its TOAST once (`|| ''` makes a copy in memory; a
# materialized toasted column is decompressed again at every use, four times here), cut
# to the query's lexemes before it is unnested (setweight + ts_filter: unnesting every
# lexeme of an abstract cost 31 us a passage), then joined to the terms (MATERIALIZED:
# inlined, the planner joined the terms first and unnested each tsvector once per term, 23
# ms for 134 candidates on the example library). At 100k passages the two cuts took the
# statement from 8-12 ms to 5-6 ms, same sums.
_POOL_BM25 = (
    "WITH q AS (SELECT * FROM unnest(%(tcfg)s::regconfig[], %(tlex)s::text[], %(tidf)s::float8[], "
    "                                %(tavg)s::float8[]) AS q(c, lexeme, idf, avgdl)), "
    "pool AS (SELECT id, document_id, memory_id, ordinal, tsv, ts_config FROM passages WHERE id = ANY(%(ids)s)), "
    "win AS MATERIALIZED (SELECT pool.id AS pid, w.id AS wid, w.tsv || ''::tsvector AS tsv, w.ts_config "
    "                     FROM pool JOIN passages w "
    "          ON w.document_id = pool.document_id AND w.summary_level = 0 "
    "         AND w.ordinal BETWEEN pool.ordinal - %(win)s AND pool.ordinal + %(win)s "
    "        UNION ALL SELECT pool.id, w.id, w.tsv || ''::tsvector, w.ts_config FROM pool JOIN passages w "
    "          ON pool.document_id IS NULL AND w.memory_id = pool.memory_id "
    "         AND w.ordinal BETWEEN pool.ordinal - %(win)s AND pool.ordinal + %(win)s "
    "        UNION ALL SELECT id, id, tsv || ''::tsvector, ts_config FROM pool "
    "                  WHERE document_id IS NULL AND memory_id IS NULL), "
    "len AS (SELECT pid, sum(length(tsv)) AS dl, count(*) AS n FROM win GROUP BY pid), "
    "lex AS MATERIALIZED (SELECT win.pid, win.wid, win.ts_config, length(win.tsv) AS dl, u.lexeme, "
    "                            coalesce(array_length(u.positions, 1), 1) AS n "
    "                     FROM win, unnest(ts_filter(setweight(setweight(win.tsv, 'D'), 'A', %(tlex)s), '{a}')) u "
    "                     WHERE win.tsv @@ %(tsq)s::tsquery AND u.lexeme = ANY(%(tlex)s)), "
    "tf AS (SELECT lex.pid, lex.wid, q.lexeme, q.idf, q.avgdl, lex.dl, lex.n "
    "       FROM lex JOIN q ON q.c = lex.ts_config AND q.lexeme = lex.lexeme), "
    "own AS (SELECT pid, sum(idf * n * %(k1p1)s / (n + %(k1)s * (1 - %(b)s + %(b)s * dl / avgdl))) AS s "
    "        FROM tf WHERE wid = pid GROUP BY pid), "
    "ctx AS (SELECT t.pid, sum(t.idf * t.n * %(k1p1)s / (t.n + %(k1)s * (1 - %(b)s + %(b)s * len.dl "
    "                                                                  / (t.avgdl * len.n)))) AS s "
    "        FROM (SELECT pid, lexeme, max(idf) AS idf, max(avgdl) AS avgdl, sum(n) AS n FROM tf "
    "              GROUP BY pid, lexeme) t JOIN len USING (pid) GROUP BY t.pid) "
    "SELECT ctx.pid, coalesce(own.s, 0), ctx.s FROM ctx LEFT JOIN own USING (pid)")


def pool_evidence(conn: psycopg.Connection, ids: list[int], probes: list[Probe],
                  terms: list[tuple[str, str, float, float]] | None = None, k1: float = 1.2,
                  b: float = 0.75, window: int = 1) -> PoolEvidence:
    """Every pool passage scored: `pool_vectors`, then `pool_bm25` when `terms` are given
    (the engine runs the two on two connections at once)."""
    out = pool_vectors(conn, ids, probes)
    if terms:
        out.bm25, out.window = pool_bm25(conn, ids, terms, k1, b, window)
    return out


def pool_vectors(conn: psycopg.Connection, ids: list[int], probes: list[Probe],
                 sources: tuple[str, ...] | None = None) -> PoolEvidence:
    """Each pool passage's configuration, script and document, and its z-score under each
    probe's model (only passages that model embedded) against the background sample of the
    sources the search reads (`sources`; None: every passage)."""
    out = PoolEvidence({p.lane: {} for p in probes}, {}, {}, {}, {})
    if not ids:
        return out
    cols = [sql.SQL("p.ts_config::text"), sql.SQL("substr(p.content, 1, 300)"), sql.SQL("p.document_id")]
    params: dict = {"ids": ids}
    stats: list[tuple[float, float] | None] = []
    for i, probe in enumerate(probes):
        model_col = "embed_model" if probe.column == "embedding" else "embed_model_multi"
        cast = sql.SQL(f"halfvec({int(probe.dims)})")
        cols.append(sql.SQL("CASE WHEN p.{mc} = %(m{i})s THEN 1 - (p.{col}::{cast} <=> %(q{i})s::{cast}) END").format(
            mc=sql.Identifier(model_col), col=sql.Identifier(probe.column), cast=cast, i=sql.SQL(str(i))))
        params[f"m{i}"] = probe.model
        params[f"q{i}"] = HalfVector(np.asarray(probe.qvec, dtype=np.float32))
        stats.append(BACKGROUND.stats(conn, probe.column, probe.model, probe.dims, probe.qvec, sources))
    rows = conn.execute(sql.SQL("SELECT p.id, {cols} FROM passages p WHERE p.id = ANY(%(ids)s)").format(
        cols=sql.SQL(", ").join(cols)), params).fetchall()
    for pid, config, head, document, *sims in rows:
        out.configs[pid], out.scripts[pid], out.documents[pid] = config, script(head), document
        for probe, st, sim in zip(probes, stats, sims):
            if sim is not None and st is not None:
                out.zscores[probe.lane][pid] = (float(sim) - st[0]) / st[1]
    return out


def pool_bm25(conn: psycopg.Connection, ids: list[int], terms: list[tuple[str, str, float, float]],
              k1: float, b: float, window: int) -> tuple[dict[int, float], dict[int, float]]:
    """passage -> BM25 of `terms` (bm25_terms) in it, and in its window of +-`window`
    passages of its document; passages holding none of the terms in their window are left
    out."""
    own: dict[int, float] = {}
    ctx: dict[int, float] = {}
    if not ids or not terms:
        return own, ctx
    for pid, in_passage, in_window in conn.execute(_POOL_BM25, {
            "ids": ids, "win": window, "k1": k1, "k1p1": k1 + 1.0, "b": b,
            "tsq": " | ".join(sorted({tsquery_literal(t[1]) for t in terms})),
            "tcfg": [t[0] for t in terms], "tlex": [t[1] for t in terms], "tidf": [t[2] for t in terms],
            "tavg": [max(t[3], 1e-9) for t in terms]}):
        own[pid], ctx[pid] = float(in_passage), float(in_window)
    return own, ctx


def bm25_ceiling(trace: list[dict], lexemes: dict[str, set[str]], k1: float) -> dict[str, float]:
    """config -> the BM25 a passage would score holding every query term of that
    configuration many times ((k1 + 1) x the sum of their idf). Terms the corpus lacks
    count at the configuration's top idf."""
    out: dict[str, float] = {}
    for entry in trace:
        n = max(int(entry.get("passages") or 0), 1)
        top = math.log(1.0 + (n + 0.5) / 0.5)
        idfs = {t["lexeme"]: float(t["idf"]) for t in entry.get("terms", [])}
        terms = lexemes.get(entry["config"]) or set(idfs)
        total = sum(idfs.get(lexeme, top) for lexeme in terms)
        if total > 0:
            out[entry["config"]] = total * (k1 + 1.0)
    return out


def keyword_evidence(pool: PoolEvidence, ceiling: dict[str, float], context_weight: float,
                     doc_scores: dict[int, float] | None = None) -> dict[int, float]:
    """passage -> its BM25 plus context_weight x the BM25 of its context, over the most its
    query terms could give (the ceiling of its configuration, times 1 + context_weight; 0
    for a document-filtered search, which scores passages alone). Every pool candidate gets
    it, not only the keyword lane's hits: a short OCR page close in meaning to the question
    had counted 0 when the lane's top 50 were passages of long books.

    The context is half the passage's window (its document's passages within
    `keyword_window` ordinals, pool_bm25) and half its whole document's BM25 as the
    keyword lane computed it (`doc_scores`; the window again for a document the lane did not
    score). The whole document alone, as the lane ranks: a book holds nearly every word, so
    its BM25 saturates and any passage of a long book outscored a one-page scan on the same
    words (the example library's Huck Finn page lost 3 of 4 questions). The window alone:
    a long book's Russian passages lost the "this book has the question's words" evidence,
    and Holmes came first for «С кем Гринёв дрался на дуэли?». Fitted and replayed
    (benchmarks/eval_calibration.py, leave one collection out, nDCG@10) document / window
    +-2 / half each with +-2 / half each with +-1: SciFact train 0.7444 / 0.7433 / 0.7433 /
    0.7428, MS MARCO subset 0.7936 / 0.7994 / 0.7976 / 0.7977, XQuAD ru 0.9638 / 0.9644 /
    0.9620 / 0.9636, mixed en 0.9265 / 0.9247 / 0.9249 / 0.9247, mixed ru 0.9201 / 0.9163 /
    0.9158 / 0.9184 (all within about one standard error of each other); example library
    right file at 1: 90.9% / 90.9% / 95.5% / 95.5%. +-1 reads 3 passages per candidate
    where +-2 reads 5 (8.6 ms for the pool at 100k passages with +-2).

    One share, not the passage's and its context's apart: fitted apart on XQuAD the
    passage's own weight came out negative (-8.5 beside +16.4 for its document's, which
    moves with it), which would rank a book's passages upside down."""
    out: dict[int, float] = {}
    for pid, own in pool.bm25.items():
        top = ceiling.get(pool.configs.get(pid, ""))
        if top:
            ctx = pool.window.get(pid, own)
            if doc_scores is not None:
                doc = pool.documents.get(pid)
                ctx = (ctx + (doc_scores.get(doc, ctx) if doc is not None else ctx)) / 2.0
            out[pid] = min((own + context_weight * ctx) / (top * (1.0 + context_weight)), 1.0)
    return out


def probability(evidence: dict[str, float], prior: float = 0.0) -> tuple[float, dict[str, float]]:
    """P(relevant) from the evidence a candidate has (`prior` added to the logit), and each
    lane's term of the logit."""
    names = tuple(n for n in EVIDENCE if n in evidence)
    while names and names not in MODELS:
        names = next((k for k in sorted(MODELS, key=len, reverse=True) if set(k) < set(names)), ())
    if not names:
        return 0.0, {}
    coefs, bias = MODELS[names]
    terms = {n: c * evidence[n] for n, c in zip(names, coefs)}
    logit = bias + prior + sum(terms.values())
    return 1.0 / (1.0 + math.exp(-max(min(logit, 50.0), -50.0))), terms


def calibrated_fusion(lanes: list[tuple[LaneHits, float]], *, zscores: dict[str, dict[int, float]],
                      keyword_share: dict[int, float], readers: dict[int, set[str]], k: int,
                      graded_weight: float, cross_prior: float = 0.0) -> list[Fused]:
    """`zscores`: lane -> passage -> z (pool_evidence); `keyword_share`: passage ->
    keyword_evidence's share (0 for a passage that holds none of the query's terms); `readers`: passage ->
    the lanes that can read it (others give it no evidence, for or against).
    Score = graded_weight x P(relevant) plus the ranked lanes (title, structure) as under
    the convex rule, (k + 1) / (k + rank) x their weight, so "title weight 2 = the graded
    lanes certain" still holds.

    `cross_prior`: added to the logit of a passage only the multilingual lane can read (in
    another script than the query's): log(share of the library in that script / share in
    the query's). The models were fitted where each script holds half the corpus; in a
    library of four English books and one Russian, an English question is four times less
    likely to be answered in Russian (`script_prior`)."""
    pool: dict[int, Fused] = {}
    cross: dict[int, float] = {}   # passage only the multilingual model reads -> its P
    same: list[tuple[float, float]] = []   # (P, P under the multilingual model alone) of the others
    for hits, weight in lanes:
        for rank, pid in enumerate(hits.ids, start=1):
            if hits.graded and hits.name not in readers.get(pid, ()):
                continue
            item = pool.setdefault(pid, Fused(pid))
            if hits.name in item.lanes:
                continue
            item.lanes[hits.name] = rank
            if not hits.graded and weight > 0:
                item.parts[hits.name] = weight * (k + 1) / (k + rank)
                item.score += item.parts[hits.name]
    for pid, item in pool.items():
        can = readers.get(pid, set())
        evidence = {lane: z[pid] for lane, z in zscores.items() if lane in can and pid in z}
        if "keyword" in can:
            evidence["keyword"] = keyword_share.get(pid, 0.0)
        p, terms = probability(evidence, cross_prior if can == {"multilingual"} else 0.0)
        # each lane's part of graded_weight x P in proportion to its positive term of the
        # logit (evenly when none is positive), so the parts still add up to the score
        shares = {lane: t for lane, t in terms.items() if t > 0} or {lane: 1.0 for lane in terms}
        total = sum(shares.values())
        for lane, share in shares.items():
            item.parts[lane] = graded_weight * p * share / total
        item.score += graded_weight * p
        if can == {"multilingual"}:
            cross[pid] = p
        else:
            mz = evidence.get("multilingual")
            same.append((p, probability({"multilingual": mz})[0] if mz is not None else 0.0))
    share = cross_script_share(cross_prior)
    # the bar: the same-script candidates a cross-script one would push off the first page,
    # each by its P and by its P under the one model that reads both scripts
    best_same = max((max(pp) for pp in sorted(same, reverse=True)[:DISPLACED]), default=0.0)
    for pid, p in cross.items():
        pool[pid].demoted = p < share * best_same
    floor = min((f.score for f in pool.values() if not f.demoted), default=0.0)
    for item in pool.values():
        if item.demoted and item.score > floor:
            # scores stay in rank order for a caller that sorts by them; parts still add up
            scale = floor / item.score
            item.parts = {lane: v * scale for lane, v in item.parts.items()}
            item.score = floor
    return _ordered(pool)


# same-script candidates a cross-script passage is held against: a first page
DISPLACED = 5


def cross_script_share(cross_prior: float) -> float:
    """The share of the same-script bar (below) a passage only the multilingual model
    reads must reach to rank among same-script candidates at all: 1 - (passages in
    its script / passages in the query's), from `script_prior`; 0 on a library as much
    in one script as in the other.

    A Russian passage the multilingual model half-matched filled ranks 2-5 of English
    questions about the example library's English books (8 passages in the top 5 of 36
    such questions) although the prior lowers its odds: its P was small, but so was that
    of the English passages it passed. This share against the best same-script P left 2
    (one question, whose Russian passage beat every English one) and cost the
    half-and-half XQuAD sets 0 and 0.002 nDCG@10. A fixed share instead: 0.25 left 4,
    0.5 left 2 and cost those sets 0.005 and 0.006, 1.0 left 1 and cost 0.020 and 0.009 -
    there an answer in the other script is as likely as one in the question's.

    The bar is the best of the first DISPLACED same-script candidates by P and by P under
    the multilingual model alone (`calibrated_fusion`): the one model that reads both
    scripts must rank the passage near the candidates it would push down. By P alone, a
    Pushkin passage (multilingual P 0.082 after the prior) still topped "Who was sitting in
    the kitchen door when Huck and Tom tiptoed past?" over the answering page, whose low
    BM25 share (OCR spelling: "setting", "tip-toeing") kept its P at 0.055 though the
    multilingual model put it at 0.134. The bar over the whole pool instead of its first
    DISPLACED put the Holmes book first for an English question about Pushkin's (a
    passage far down the pool had a higher multilingual P than any Pushkin one): right file
    at rank 1 95.5% -> 93.2%. With the first 3, 5 or 10 alike: 0 other-script passages in
    the top 5, 95.5% at rank 1, mixed XQuAD -0.0015 (Russian questions) and 0 (English)."""
    return max(0.0, 1.0 - math.exp(cross_prior))


def script_prior(trace: list[dict], query_script: str) -> float:
    """log(passages in the other script / passages in the query's script), from the keyword
    lane's per-configuration passage counts (a Russian configuration's passages are
    Cyrillic, every other's Latin), never above 0; 0 when either side is empty or the
    query is in neither script.

    Never above 0: the models were fitted where the same questions were asked in both
    languages over a half-and-half corpus, so the query's language said nothing there of
    where its answer is. In a user's library it does - people ask in the language of what
    they read - so a minority script lowers the odds of a cross-script answer, but a
    majority in the other script must not raise them: on the example library (four
    English books, one Russian) a prior of +1.07 for English passages put Holmes above
    «Капитанская дочка» for «С кем Гринёв дрался на дуэли?»."""
    counts = {"latin": 0, "cyrillic": 0}
    for entry in trace:
        side = "cyrillic" if entry["config"] in CYRILLIC_CONFIGS else "latin"
        counts[side] += int(entry.get("passages") or 0)
    if query_script not in counts:
        return 0.0
    other = counts["cyrillic" if query_script == "latin" else "latin"]
    same = counts[query_script]
    return min(math.log(other / same), 0.0) if other and same else 0.0


def readers_of(pids: list[int], scripts: dict[int, str], query_script: str, *, primary_reads: bool,
               primary_monolingual: bool, word_scripts: set[str] | None = None,
               named: set[int] | frozenset[int] = frozenset()) -> dict[int, set[str]]:
    """passage -> the graded lanes that can read it beside the query (the trust rules of
    serving/search/fusion.py, as evidence rather than weights): the multilingual model
    every passage; the primary model, when it reads the query, passages in the query's
    script (any, when it is multilingual itself); BM25 passages in the script of any of the
    query's words (`word_scripts`; default the query's script), and the passages in `named`:
    those in another script holding one of the query's names as the library spells them
    there (serving/search/lexicon.py). The others stay unread, no evidence either way:
    counted as read, every Russian passage without the name lost to the English ones
    («Grinyov» asked of the example library put Holmes first)."""
    comparable = query_script in ("latin", "cyrillic")
    words = (word_scripts or set()) | {query_script}
    out: dict[int, set[str]] = {}
    for pid in pids:
        own = scripts.get(pid, query_script)
        lanes = {"multilingual"}
        if not comparable or own in words or own == "none" or pid in named:
            lanes.add("keyword")
        if primary_reads and (not comparable or not primary_monolingual or own in (query_script, "none")):
            lanes.add("vector")
        out[pid] = lanes
    return out
