"""Keyword lane: BM25 over the `postings` inverted index (schema.sql).

Every query term contributes by its corpus IDF - none is dropped for being
common - and the lane returns the top `keyword_depth` passages by

    sum over terms  idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))

with idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)) (Lucene's, always positive).
The work is capped, not the terms: each term's postings are read in impact
order, at most `keyword_postings` rows of them (exact for a term in fewer
passages; for a common term its best rows, whose idf makes their weight small
anyway), and the query's total rows are held to `keyword_work` by lowering that
per-term bound for long queries.

Why this replaced the previous lane (AND the <= 6 rarest lexemes, relax rung by
rung, drop lexemes in > 10% of passages as noise): in a library about one subject
the core vocabulary is in more than 10% of passages, and dropping it lost to
plain BM25 (0.92x bm25s on a held-back engineering collection).

Languages: each passage is stemmed with its own text-search configuration
(passages.tsv); the query is parsed with every configuration present in the
corpus (`corpus_configs`) and each parse is matched only against the postings of
that configuration, with that configuration's document frequencies and average
length. A Russian query's lexemes are simply absent from the English postings.

Statistics: df, N and avgdl come from `lexeme_df` / `lexeme_df_totals`
(refreshed by the `lexeme_df` asset), summed over the sources the search reads
(a document search's statistics are the documents', a memory search's the
memories'; see schema.sql for the measurement). A query lexeme missing there (passages
ingested since the refresh) takes its df from the postings themselves, counted
up to a bound; never refreshed at all, N is the planner's row estimate and
avgdl the candidates' mean length.

Filters: the postings are kept in segments (schema.sql postings_segment: the
passage's source, scope, and whether a default search hides it), and each term's
walk reads only the segments the search's filters allow, merged in impact order. A
row whose segment proves the filters is taken as it is; any other (a viewer's
self / department rows, a filter on kind, agent or memory fields, hidden rows asked
for) is checked against the search's predicate on its passage through the narrow
covering index passages_filter_idx. So a memory search or a search of one scope
reads that part's postings only, and a filtered search still gets up to
FILTERED_POSTINGS matching rows per term (full k whenever k passages match). With a
document filter (`narrow`) the lane scores the filtered passages' tsvectors
directly: a few documents hold few rows, while a common term's postings walk would
have to skip the rest of the library.

User text never reaches to_tsquery: lexemes come from to_tsvector and travel as
bound parameters (the narrow path quotes each as a tsquery literal).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from serving.db import database_key
from serving.search.filters import Predicate, posting_segments
from serving.search.lanes import LaneHits
from serving.search.vector import planner_rows
from serving.search.types import SearchConfig, SearchFilters

log = logging.getLogger(__name__)

_CONFIG_CACHE: dict[str, tuple[float, list[str]]] = {}
_CONFIG_TTL = 60.0
# a lexeme missing from lexeme_df is counted in the postings up to this many rows:
# enough to tell rare from common, bounded for a term common in passages ingested
# since the last refresh
_DF_COUNT_CAP = 10_000


@dataclass(frozen=True)
class ConfigStats:
    name: str
    passages: int | None      # None: lexeme_df never refreshed for this configuration
    avg_length: float | None
    documents: int | None = None
    sources: tuple[str, ...] = ()   # whose counts these are (lexeme_df's rows to sum); () = every source
    searched: tuple[str, ...] = ()  # the search's sources: a lexeme's postings are counted among them


def corpus_configs(conn: psycopg.Connection, sources: Sequence[str]) -> list[ConfigStats]:
    """Text-search configurations present in the corpus, with their statistics summed over
    `sources` - or over every source when none of them has been counted yet: memories are
    written between refreshes of the statistics (which follow ingests), and until one has
    counted them the whole corpus's figures are the best estimate there is. A
    configuration counted for other sources only stays in the list without figures,
    estimated like a fresh one: the query is still parsed with it, and passages of
    `sources` may have been written in it since."""
    rows = conn.execute("SELECT ts_config::text, source, passages, avg_length, documents FROM lexeme_df_totals "
                        "ORDER BY 1, 2").fetchall()
    if rows:
        counted = {r[1] for r in rows}
        use = tuple(s for s in sources if s in counted) or tuple(sorted(counted))
        out: list[ConfigStats] = []
        for name in sorted({r[0] for r in rows}):
            mine = [r for r in rows if r[0] == name and r[1] in use]
            n = sum(int(r[2]) for r in mine)
            docs = sum(int(r[4] or 0) for r in mine)
            out.append(ConfigStats(name, n, sum(float(r[3]) * int(r[2]) for r in mine) / n, docs or None, use,
                                   tuple(sources))
                       if n else ConfigStats(name, None, None, None, use, tuple(sources)))
        return out
    # lexeme_df not refreshed yet: find the configurations by scanning (cached; one
    # seq scan, ~20 ms at 100k rows) and fall back to estimates.
    key = database_key(conn)
    cached = _CONFIG_CACHE.get(key)
    if cached is None or time.monotonic() - cached[0] > _CONFIG_TTL:
        names = [r[0] for r in conn.execute(
            "SELECT DISTINCT ts_config::text FROM passages WHERE summary_level = 0").fetchall()]
        _CONFIG_CACHE[key] = cached = (time.monotonic(), sorted(names))
        if names:
            log.warning("lexeme_df is empty: keyword lane estimates IDF from the postings until "
                        "serving.lexemes.refresh_lexeme_df runs")
    return [ConfigStats(name, None, None, searched=tuple(sources)) for name in cached[1]]


def query_lexemes(conn: psycopg.Connection, text: str, configs: list[str]) -> dict[str, list[str]]:
    """Distinct lexemes of `text` under each configuration, in one round trip."""
    if not configs:
        return {}
    rows = conn.execute(
        "SELECT c::text, tsvector_to_array(to_tsvector(c, %s)) FROM unnest(%s::regconfig[]) AS c",
        (text, configs)).fetchall()
    return {name: list(lexemes or []) for name, lexemes in rows}


def tsquery_literal(lexeme: str) -> str:
    """A lexeme as a quoted tsquery operand: '' for a quote, \\\\ for a backslash."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def idf(df: int, n: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def bm25(tf: dict[str, int], dl: int, df: dict[str, int], n: int, avgdl: float,
         k1: float = 1.2, b: float = 0.75) -> float:
    """BM25 of one passage (the lane computes the same sum in SQL)."""
    norm = k1 * (1.0 - b + b * dl / max(avgdl, 1e-9))
    return sum(idf(df.get(t, 0), n) * f * (k1 + 1.0) / (f + norm) for t, f in tf.items())


# df of lexemes missing from lexeme_df: each one's first _DF_COUNT_CAP postings, and (a
# search of some sources) of those the searched sources' own: a book's word in a memory
# search reads its rows once here and is then skipped, where its postings walk would have
# read them all to find none the predicate allows
_COUNT = ("SELECT u.c, u.lex, (SELECT count(*) FROM (SELECT 1 FROM postings po "
          "  WHERE po.ts_config = u.c::regconfig AND po.lexeme = u.lex LIMIT %(cap)s) x) "
          "FROM unnest(%(c)s::text[], %(lex)s::text[]) AS u(c, lex)")
_COUNT_OF_SOURCES = (
    "SELECT u.c, u.lex, (SELECT count(*) FILTER (WHERE p.source = ANY(%(src)s)) FROM (SELECT po.passage_id "
    "  FROM postings po WHERE po.ts_config = u.c::regconfig AND po.lexeme = u.lex LIMIT %(cap)s) x "
    "  JOIN passages p ON p.id = x.passage_id) "
    "FROM unnest(%(c)s::text[], %(lex)s::text[]) AS u(c, lex)")


@dataclass
class Term:
    config: str
    lexeme: str
    df: int
    idf: float
    cap: int = 0
    estimated: bool = False   # df counted in the postings (not in lexeme_df)


def _estimated_passages(conn: psycopg.Connection) -> int:
    return int(planner_rows(conn)) or 1000


def plan_terms(conn: psycopg.Connection, lexemes: dict[str, list[str]], stats: list[ConfigStats],
               cfg: SearchConfig, depth: int) -> tuple[list[Term], dict[str, tuple[int, float | None, float]]]:
    """The query's terms with df / idf / postings bound, and each configuration's (N, avgdl)."""
    by_name = {s.name: s for s in stats}
    wanted = {name: sorted(set(terms)) for name, terms in lexemes.items() if terms and name in by_name}
    if not wanted:
        return [], {}
    # a lexeme no row of these sources holds is unknown (counted below), not absent: the
    # searched sources' passages written since the refresh may hold it (a vault synced
    # since, memories written since)
    summed = list(stats[0].sources) if stats and stats[0].sources else None
    searched = list(stats[0].searched) if stats and stats[0].searched else None
    rows = conn.execute("SELECT ts_config::text, lexeme, sum(df) FROM lexeme_df "
                        "WHERE ts_config = ANY(%s::regconfig[]) AND lexeme = ANY(%s) "
                        "AND (%s::text[] IS NULL OR source = ANY(%s)) GROUP BY 1, 2",
                        (list(wanted), sorted({t for ts in wanted.values() for t in ts}), summed,
                         summed)).fetchall()
    known = {(c, lex): int(df) for c, lex, df in rows}
    unknown = [(c, t) for c, ts in wanted.items() for t in ts if (c, t) not in known]
    counted: dict[tuple[str, str], int] = {}
    if unknown:
        counted = {(c, lex): int(n) for c, lex, n in conn.execute(
            _COUNT_OF_SOURCES if searched else _COUNT,
            {"cap": _DF_COUNT_CAP, "src": searched, "c": [c for c, _ in unknown],
             "lex": [t for _, t in unknown]})}
    estimate = None
    totals: dict[str, tuple[int, float | None, float]] = {}
    terms: list[Term] = []
    for name, ts in wanted.items():
        st = by_name[name]
        n = st.passages
        if not n:
            estimate = estimate or _estimated_passages(conn)
            n = estimate
        for t in ts:
            df = known.get((name, t))
            est = df is None
            if est:
                df = counted.get((name, t), 0)
                if df == 0:
                    continue   # in no passage of this configuration
            n_t = max(n, df)   # a fresh term may be counted in passages newer than N
            terms.append(Term(name, t, df, idf(df, n_t), estimated=est))
        # passages per document (document-level BM25's average length); 1 when unknown
        per_doc = (st.passages / st.documents) if st.passages and st.documents else 1.0
        totals[name] = (n, st.avg_length, per_doc)
    # Cap the work, not the terms: every term reads min(df, per_term) postings, and
    # per_term shrinks for long queries so the total stays near keyword_work; never
    # below depth, so each term alone can still fill the lane.
    per_term = max(cfg.keyword_postings, depth)
    if terms and len(terms) * per_term > cfg.keyword_work:
        per_term = max(cfg.keyword_work // len(terms), depth)
    for term in terms:
        term.cap = per_term
    return terms, totals


# q: one row per query term; seg: the segments of the postings the filters allow
# (serving.search.filters.posting_segments); hits: each term's postings walk, segment by
# segment in impact order, merged, at most `cap` rows that the search's predicate allows.
# A row of a proven segment is taken as it is; any other is checked on its passage.
_HITS = (
    "q AS (SELECT * FROM unnest(%(cfg)s::regconfig[], %(lex)s::text[], %(idf)s::float8[], %(cap)s::int[], "
    "                          %(avgdl)s::float8[], %(perdoc)s::float8[]) "
    "      WITH ORDINALITY AS q(c, lexeme, idf, cap, avgdl, perdoc, i)), "
    "seg AS (SELECT postings_segment(a, b, h) AS s, bool_and(NOT h AND b = ANY(%(seg_proven)s::text[])) AS proven "
    "        FROM unnest(%(seg_sources)s::text[]) a, unnest(%(seg_scopes)s::text[]) b, "
    "             unnest(%(seg_hidden)s::bool[]) h GROUP BY 1), "
    "hits AS (SELECT q.i, q.idf, q.avgdl, q.perdoc, w.passage_id, w.document_id, w.tf, w.dl FROM q "
    "  CROSS JOIN LATERAL (SELECT x.* FROM seg CROSS JOIN LATERAL ("
    "      SELECT po.passage_id, po.document_id, po.tf, po.dl, po.impact FROM postings po "
    "      WHERE po.ts_config = q.c AND po.lexeme = q.lexeme AND po.segment = seg.s "
    "        AND (seg.proven OR EXISTS (SELECT 1 FROM passages p WHERE p.id = po.passage_id AND {pred})) "
    "      ORDER BY po.impact DESC, po.passage_id LIMIT q.cap) x "
    "    ORDER BY x.impact DESC, x.passage_id LIMIT q.cap) w) ")
_PASSAGE_BM25 = "sum(idf * tf * %(k1p1)s / (tf + %(k1)s * (1 - %(b)s + %(b)s * dl / avgdl)))"

_POSTINGS = sql.SQL(
    "WITH " + _HITS +
    "SELECT passage_id, document_id, " + _PASSAGE_BM25 + " AS score FROM hits "
    "GROUP BY passage_id, document_id ORDER BY 3 DESC, 1 LIMIT %(depth)s")

# With a document weight: each of the best `pool` passages also takes w x the BM25 of its
# whole document (term frequencies summed over the document's fetched postings, length =
# its passage count - last ordinal + 1, one backward step of passages_document_idx, where
# count(*) walked a whole book's index entries - against the corpus's passages per
# document). A constant per
# document, so it never reorders passages within one document; a passage without a
# document (a memory) is its own document.
_POSTINGS_DOC = sql.SQL(
    "WITH " + _HITS + ", "
    "pas AS (SELECT passage_id, document_id, " + _PASSAGE_BM25 + " AS s FROM hits "
    "        GROUP BY passage_id, document_id ORDER BY 3 DESC, 1 LIMIT %(pool)s), "
    "dtf AS (SELECT h.document_id, h.i, max(h.idf) AS idf, max(h.perdoc) AS perdoc, sum(h.tf) AS tf FROM hits h "
    "        WHERE h.document_id IN (SELECT document_id FROM pas) GROUP BY 1, 2), "
    # a document's length looked up per (document, term) row: as a separate CTE joined
    # back, the planner (one-row estimates for CTEs) chose a nested loop over both
    # sides, 24 ms of join filter for 150 documents on the 100k benchmark
    "doc AS (SELECT t.document_id, sum(t.idf * t.tf * %(k1p1)s / (t.tf + %(k1)s * (1 - %(bd)s + %(bd)s * l.n "
    "                                                               / t.perdoc))) AS s "
    "        FROM dtf t CROSS JOIN LATERAL (SELECT x.ordinal + 1 AS n FROM passages x "
    "             WHERE x.document_id = t.document_id AND x.summary_level = 0 ORDER BY x.ordinal DESC LIMIT 1) l "
    "        GROUP BY 1) "
    "SELECT pas.passage_id, pas.document_id, pas.s + %(w)s * coalesce(doc.s, pas.s) AS score, doc.s "
    "FROM pas LEFT JOIN doc USING (document_id) ORDER BY 3 DESC, 1 LIMIT %(depth)s")

# Narrow searches (a document filter): score the filtered passages' own tsvectors.
_NARROW = sql.SQL(
    "SELECT s.id, s.document_id, s.score FROM ("
    "  SELECT p.id, p.document_id, sum(q.idf * tf.n * %(k1p1)s "
    "         / (tf.n + %(k1)s * (1 - %(b)s + %(b)s * length(p.tsv) / q.avgdl))) AS score "
    "  FROM passages p "
    "  JOIN unnest(%(cfg)s::regconfig[], %(lex)s::text[], %(idf)s::float8[], %(avgdl)s::float8[]) "
    "       AS q(c, lexeme, idf, avgdl) ON q.c = p.ts_config "
    "  CROSS JOIN LATERAL (SELECT coalesce(array_length(u.positions, 1), 1) AS n "
    "                      FROM unnest(p.tsv) u WHERE u.lexeme = q.lexeme) tf "
    "  WHERE p.summary_level = 0 AND p.tsv @@ %(tsq)s::tsquery AND {pred} "
    "  GROUP BY p.id, p.document_id) s "
    "ORDER BY s.score DESC, s.id LIMIT %(depth)s")


def _avgdl(conn: psycopg.Connection, totals: dict[str, tuple[int, float | None, float]]) -> dict[str, float]:
    out = {name: avg for name, (_, avg, _) in totals.items() if avg}
    missing = [name for name in totals if name not in out]
    if missing:  # never refreshed: a sample of the configuration's passages
        for name, avg in conn.execute(
                "SELECT c, (SELECT avg(length(p.tsv)) FROM (SELECT tsv FROM passages p "
                "           WHERE p.ts_config = c::regconfig AND p.summary_level = 0 LIMIT 1000) p) "
                "FROM unnest(%s::text[]) AS c", (missing,)):
            out[name] = float(avg) if avg else 1.0
    return out


# Filtered searches read at most this many matching rows per term (never fewer than the
# lane's depth). Measured before the postings had segments, when a filter passing 2% of
# rows read ~50 rows for each it kept: on the 100k-passage benchmark
# (benchmarks/keyword_scale.py, box under load ~18) the lane's p50 was 201 ms unfiltered
# and 959 ms filtered at 1,000 rows per term, 583 ms at 200 (100/100 filtered searches
# still returned k = 10). A filter on scope or source now reads its own segments only; a
# filter on kind, agent or memory fields still reads past the rows it rejects.
FILTERED_POSTINGS = 200


def keyword_lane(conn: psycopg.Connection, lexemes: dict[str, list[str]], stats: list[ConfigStats],
                 predicate: Predicate, cfg: SearchConfig, *, narrow: bool = False,
                 filters: SearchFilters, filtered: bool = False) -> tuple[LaneHits, list[dict]]:
    started = time.perf_counter()
    depth = cfg.keyword_depth
    terms, totals = plan_terms(conn, lexemes, stats, cfg, depth)
    if filtered:
        for term in terms:
            term.cap = min(term.cap, max(FILTERED_POSTINGS, depth))
    avgdl = _avgdl(conn, totals) if terms else {}
    trace: list[dict] = [{"config": name, "passages": n, "avg_length": round(avgdl.get(name, 1.0), 3),
                          "terms": [{"lexeme": t.lexeme, "df": t.df, "idf": round(t.idf, 3), "cap": t.cap,
                                     **({"estimated": True} if t.estimated else {})}
                                    for t in terms if t.config == name]}
                         for name, (n, _, _) in totals.items()]
    rows: list[tuple] = []
    if terms:
        params = {**predicate.params, "k1": cfg.bm25_k1, "k1p1": cfg.bm25_k1 + 1.0, "b": cfg.bm25_b,
                  "cfg": [t.config for t in terms], "lex": [t.lexeme for t in terms],
                  "idf": [t.idf for t in terms], "avgdl": [avgdl[t.config] for t in terms], "depth": depth}
        if narrow:
            params["tsq"] = " | ".join(sorted({tsquery_literal(t.lexeme) for t in terms}))
            query = _NARROW.format(pred=predicate.clause)
        else:
            segments = posting_segments(filters)
            params.update(cap=[t.cap for t in terms], perdoc=[totals[t.config][2] for t in terms],
                          seg_sources=segments.sources, seg_scopes=segments.scopes, seg_hidden=segments.hidden,
                          seg_proven=segments.proven_scopes)
            if cfg.keyword_doc_weight > 0:
                params.update(w=cfg.keyword_doc_weight, bd=cfg.keyword_doc_b, pool=max(3 * depth, 150))
                query = _POSTINGS_DOC.format(pred=predicate.clause)
            else:
                query = _POSTINGS.format(pred=predicate.clause)
        rows = conn.execute(query, params).fetchall()
    hits = LaneHits("keyword", [r[0] for r in rows], [float(r[2]) for r in rows], graded=True)
    hits.doc_ids = [r[1] for r in rows]
    hits.doc_scores = {r[1]: float(r[3]) for r in rows if len(r) > 3 and r[1] is not None and r[3] is not None}
    hits.ms = (time.perf_counter() - started) * 1000
    if hits.ids:
        hits.status = (f"ok: {len(hits)} by BM25 over {len(terms)} terms"
                       + (" (document filter: scored in place)" if narrow else ""))
    elif terms:
        hits.status = f"empty: no passage the filters allow holds any of {len(terms)} terms"
    else:
        hits.status = "empty: no query term occurs in the corpus" if any(lexemes.values()) else \
            "empty: no searchable terms"
    return hits, trace
