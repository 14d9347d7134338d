"""Keyword lane: AND the rarest query lexemes, relax by dropping the commonest,
rank the matched set with BM25 computed from the stored tsvectors.

Why not `plainto_tsquery`: it ANDs every term, so nothing matched unless one
passage held every word typed. In the reference system that was true for 10
of 19 real queries: more than half of all searches ran on the vector lane
alone while looking hybrid. The fix is RAGflow's minimum_should_match idea
expressed with a corpus-frequency table (`lexeme_df`, serving/lexemes.py):

1. the query is parsed with every text-search configuration present in the
   corpus, and each parse is matched only against passages of that
   configuration (English and Russian queries both work; a Russian query's
   lexemes are simply unknown to the English statistics and drop out);
2. a lexeme in more than 10% of passages is noise (reference figure: one
   query's common term was in 5,887 passages, its rare term in 206);
3. at most 6 of the rarest remaining terms are ANDed; then one term is
   dropped and the query retried (the relaxation ladder), rung by rung, until
   `keyword_pool` passages are matched or the single-term rung ran. Which
   one: any. Rung s matches passages holding any s of the n terms (an OR of
   the C(n, s) ANDs, one GIN scan), so a rare term that happens not to
   co-occur does not block the others - first version dropped the commonest
   term and so lost "sherlock & holmes" to a rare "adventures" that only one
   passage shared. Within a rung BM25's idf still puts rare-term passages
   first. The last rung (s = 1) queries each term alone, rarest first, each
   capped separately, so a common term's thousands of rows cannot crowd the
   rare term's few out of the capped set;
4. a lexeme missing from `lexeme_df` counts as rare (df = 0) - it may come
   from passages ingested since the last refresh. One GIN probe per such
   term checks it exists at all, so a typo cannot zero every rung.

User text never reaches to_tsquery: the tsquery is assembled from lexemes
that Postgres itself produced, each quoted as a tsquery literal, so `!&|:*()<->`
in a query are just punctuation the parser discards.

Ranking is BM25 (k1 = 1.2, b = 0.5: SearchConfig.bm25_b) over the matched
set, from the tsvectors' term frequencies (`unnest(tsv)` positions), the
lexeme_df document frequencies and the passage length. Length is `length(tsv)` - distinct
lexemes - the same measure `lexeme_df_totals.avg_length` averages. ts_rank
has no corpus IDF, so a rare term and a common one weigh the same in it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations

import psycopg
from psycopg import sql

from serving.search.filters import Predicate
from serving.search.lanes import LaneHits
from serving.search.types import SearchConfig

log = logging.getLogger(__name__)

_CONFIG_CACHE: dict[str, tuple[float, list[str]]] = {}
_CONFIG_TTL = 60.0


@dataclass(frozen=True)
class ConfigStats:
    name: str
    passages: int | None      # None: lexeme_df never refreshed for this configuration
    avg_length: float | None


def corpus_configs(conn: psycopg.Connection) -> list[ConfigStats]:
    """Text-search configurations present in the corpus, with their statistics."""
    rows = conn.execute("SELECT ts_config::text, passages, avg_length FROM lexeme_df_totals "
                        "ORDER BY ts_config::text").fetchall()
    if rows:
        return [ConfigStats(r[0], int(r[1]), float(r[2])) for r in rows]
    # lexeme_df not refreshed yet: find the configurations by scanning (cached; one
    # seq scan, ~20 ms at 100k rows) and treat every lexeme as unknown.
    key = conn.info.dsn
    cached = _CONFIG_CACHE.get(key)
    if cached is None or time.monotonic() - cached[0] > _CONFIG_TTL:
        names = [r[0] for r in conn.execute(
            "SELECT DISTINCT ts_config::text FROM passages WHERE summary_level = 0").fetchall()]
        _CONFIG_CACHE[key] = cached = (time.monotonic(), sorted(names))
        if names:
            log.warning("lexeme_df is empty: keyword lane treats every term as rare until "
                        "serving.lexemes.refresh_lexeme_df runs")
    return [ConfigStats(name, None, None) for name in cached[1]]


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


def and_query(terms: list[str]) -> str:
    return " & ".join(tsquery_literal(t) for t in terms)


@dataclass
class _Plan:
    config: ConfigStats
    selected: list[str]       # rarest first, <= max_terms
    scoring: list[str]        # selected + noise terms: all contribute to BM25
    df: dict[str, int]
    noise: list[str]
    absent: list[str]


def _plan(conn: psycopg.Connection, lexemes: dict[str, list[str]], stats: list[ConfigStats],
          cfg: SearchConfig, trace: list[dict], predicate: Predicate | None = None) -> list[_Plan]:
    by_name = {s.name: s for s in stats}
    wanted = {name: terms for name, terms in lexemes.items() if terms and name in by_name}
    if not wanted:
        return []
    all_terms = sorted({t for terms in wanted.values() for t in terms})
    df_rows = conn.execute("SELECT ts_config::text, lexeme, df FROM lexeme_df "
                           "WHERE ts_config = ANY(%s::regconfig[]) AND lexeme = ANY(%s)",
                           (list(wanted), all_terms)).fetchall()
    known = {(c, lex): int(df) for c, lex, df in df_rows}
    unknown = [(c, t) for c, terms in wanted.items() for t in terms if (c, t) not in known]
    exists: set[tuple[str, str]] = set()
    if unknown:
        # the probe sees only rows the search may return (the viewer's visibility included):
        # a term present only in another agent's private memories must not shape this search
        pred = predicate.clause if predicate is not None else sql.SQL("NOT p.removed AND NOT p.superseded "
                                                                      "AND NOT p.archived")
        rows = conn.execute(sql.SQL(
            "SELECT t.c, t.lex FROM unnest(%(u_c)s::text[], %(u_lex)s::text[], %(u_q)s::tsquery[]) AS t(c, lex, q) "
            "WHERE EXISTS (SELECT 1 FROM passages p WHERE p.tsv @@ t.q AND p.ts_config = t.c::regconfig "
            "AND p.summary_level = 0 AND {pred})").format(pred=pred),
            {**(predicate.params if predicate is not None else {}), "u_c": [c for c, _ in unknown],
             "u_lex": [t for _, t in unknown], "u_q": [tsquery_literal(t) for _, t in unknown]},
        ).fetchall()
        exists = {(c, t) for c, t in rows}
    plans = []
    for name, terms in wanted.items():
        st = by_name[name]
        df = {t: known.get((name, t), 0) for t in terms}
        absent = [t for t in terms if (name, t) not in known and (name, t) not in exists]
        present = [t for t in terms if t not in absent]
        noise: list[str] = []
        if st.passages and st.passages >= cfg.keyword_noise_min_passages:
            limit = cfg.keyword_noise_ratio * st.passages
            noise = [t for t in present if df[t] > limit]
        usable = sorted((t for t in present if t not in noise), key=lambda t: (df[t], t))
        if not usable:
            reason = ("all terms are noise (in > {:.0%} of passages)".format(cfg.keyword_noise_ratio)
                      if noise else "no term occurs in the corpus")
            trace.append({"config": name, "terms": [], "matched": 0, "note": reason,
                          "noise": noise, "absent": absent})
            continue
        selected = usable[: cfg.keyword_max_terms]
        # At most `keyword_max_terms` terms are ANDed (matching), but every usable term
        # scores: a 12-word claim's 7th-rarest word still tells two matched passages
        # apart. Measured (benchmarks/eval_tune.py, SciFact TRAIN, first 400 queries,
        # keyword lane alone, nDCG@10, with the ladder filling every rung): scoring the
        # 6 selected terms 0.6088, every usable term 0.6315; with the shipped ladder
        # rule 0.5930 -> 0.6085 (all 809 train queries: 0.6098). TEST: 0.5882
        # (docs/evaluation.md; test was run once, after both keyword changes).
        scoring = usable + sorted(noise, key=lambda t: df[t])[: cfg.keyword_max_terms]
        plans.append(_Plan(st, selected, scoring, df, noise, absent))
    return plans


def any_of(terms: list[str], need: int) -> str:
    """tsquery text matching passages that contain at least `need` of `terms`."""
    if need >= len(terms):
        return and_query(terms)
    return " | ".join(f"({and_query(list(group))})" for group in combinations(terms, need))


def _match(conn: psycopg.Connection, plan: _Plan, tsquery: str, predicate: Predicate,
           cap: int, seen: Iterable[int] = ()) -> dict[int, tuple[int | None, int, dict[str, int]]]:
    """passage id -> (document id, length, {lexeme: tf}) for at most `cap` passages
    matching `tsquery`, none of them in `seen` (a looser rung matches everything the
    stricter ones did: fetching those again would spend the cap on known rows)."""
    query = sql.SQL(
        "SELECT m.id, m.document_id, m.dl, u.lexeme, coalesce(array_length(u.positions, 1), 1) "
        "FROM (SELECT p.id, p.document_id, p.tsv, length(p.tsv) AS dl FROM passages p "
        "      WHERE p.ts_config = %(cfg)s::regconfig AND p.summary_level = 0 "
        "        AND p.tsv @@ %(tsq)s::tsquery AND p.id <> ALL(%(seen)s::bigint[]) AND {pred} "
        "      LIMIT %(cap)s) m "
        "CROSS JOIN LATERAL unnest(m.tsv) AS u WHERE u.lexeme = ANY(%(scoring)s)"
    ).format(pred=predicate.clause)
    params = {**predicate.params, "cfg": plan.config.name, "tsq": tsquery, "cap": int(cap),
              "scoring": plan.scoring, "seen": list(seen)}
    out: dict[int, tuple[int | None, int, dict[str, int]]] = {}
    for pid, doc_id, dl, lexeme, tf in conn.execute(query, params):
        entry = out.setdefault(pid, (doc_id, int(dl), {}))
        entry[2][lexeme] = int(tf)
    return out


def bm25(tf: dict[str, int], dl: int, df: dict[str, int], n: int, avgdl: float,
         k1: float = 1.2, b: float = 0.75) -> float:
    score = 0.0
    norm = k1 * (1.0 - b + b * dl / max(avgdl, 1e-9))
    for term, freq in tf.items():
        d = df.get(term, 0)
        idf = math.log(1.0 + (n - d + 0.5) / (d + 0.5))
        score += idf * freq * (k1 + 1.0) / (freq + norm)
    return score


def _estimated_passages(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'passages'::regclass").fetchone()
    return max(int(row[0]) if row and row[0] and row[0] > 0 else 1000, 1)


def keyword_lane(conn: psycopg.Connection, lexemes: dict[str, list[str]], stats: list[ConfigStats],
                 predicate: Predicate, cfg: SearchConfig) -> tuple[LaneHits, list[dict]]:
    started = time.perf_counter()
    trace: list[dict] = []
    scored: list[tuple[float, int, int | None]] = []
    pool = max(cfg.keyword_pool, cfg.keyword_depth)
    for plan in _plan(conn, lexemes, stats, cfg, trace, predicate):
        matched: dict = {}
        terms = plan.selected
        for need in range(len(terms), 0, -1):   # the relaxation ladder
            if need > 1 or len(terms) == 1:
                limit = pool - len(matched)
                found = _match(conn, plan, any_of(terms, need), predicate, limit, matched)
                capped = len(found) >= limit
                matched.update(found)
            else:  # each term alone, rarest first, each with its share of the room left
                capped = False
                for i, term in enumerate(terms):
                    room = pool - len(matched)
                    if room <= 0:   # the pool is a bound, not a target per term
                        break
                    share = max(room // (len(terms) - i), 1)
                    found = _match(conn, plan, and_query([term]), predicate, share, matched)
                    capped |= len(found) >= share
                    matched.update(found)
            trace.append({"config": plan.config.name, "terms": terms, "need": need, "matched": len(matched),
                          "capped": capped, "noise": plan.noise, "absent": plan.absent})
            # Fill, don't stop at the first rung that matches anything: BM25 ranks the
            # union, so the pool must hold the passages BM25 would put first, not just
            # the ones holding the most rare terms. Stopping at the first match left
            # SciFact claims (6 rare terms, ANDed 6-, 5-, 4-...) with 1-10 passages for
            # 48 of 60 train queries. Measured (benchmarks/eval_tune.py, SciFact TRAIN,
            # keyword lane alone, nDCG@10 / R@100; first 400 queries unless noted):
            #   stop at the first rung that matches             0.5150 / 0.566
            #   fill to 50 passages, never to single terms      0.6471 / 0.791
            #     once a stricter rung matched (the old rule; all 809: 0.6512)
            #   fill to 1,000, same single-term rule            0.6577 / 0.830
            #   fill to 1,000, single terms allowed             0.6684 / 0.873
            # (those three with the title in the tsvector, b = 0.5.) A 2-of-3 match still
            # outranks single terms through BM25's idf, which the ladder test holds.
            # Pool size (all 809 train queries; keyword alone / fused): 300 0.6670 /
            # 0.7351, 150 0.6689 / 0.7347, 50 0.6490 / 0.7208 (fused -0.0139 +- 0.0038).
            # Each rung fetches only rows no stricter rung returned, up to the room left,
            # so the pool bounds the rows unnested: on the 1M-passage benchmark
            # (benchmarks/search.py, idle box, warm) the lane's p50 is 19.9 ms at 150, 44.9
            # at 300; 94 at 1,000 before rungs skipped known rows; the old code (pool 50,
            # a 5,000-row cap per rung) 25.3 ms, p95 283 ms (now 63.8).
            if len(matched) >= pool:
                break
        if not matched:
            continue
        n = plan.config.passages or _estimated_passages(conn)
        avgdl = plan.config.avg_length or (sum(v[1] for v in matched.values()) / len(matched))
        # Tried and dropped: scoring each passage with its neighbours' words too (same
        # document and heading, +-1 passage at half weight). SciFact TRAIN (809), keyword
        # lane alone 0.6689 -> 0.6830 (whole abstracts are the judged unit), but fused
        # 0.7347 -> 0.7353 (+0.0007 +- 0.0031), and on the example library's regression
        # set it cost the passage-level questions MRR@10 0.796 -> 0.700: the answer's
        # neighbours share its words and pushed it from rank 1 to 3 (qa-04, qa-05) or out
        # of the top 10 (qa-06). Agents need the passage, so passages score alone.
        for pid, (doc_id, dl, tf) in matched.items():
            scored.append((bm25(tf, dl, plan.df, n, avgdl, cfg.bm25_k1, cfg.bm25_b), pid, doc_id))
    scored.sort(key=lambda s: (-s[0], s[1]))
    scored = scored[: cfg.keyword_depth]
    hits = LaneHits("keyword", [s[1] for s in scored], [s[0] for s in scored], graded=True)
    hits.doc_ids = [s[2] for s in scored]
    hits.ms = (time.perf_counter() - started) * 1000
    rungs = "; ".join(f"{t['config']}: " + (f"{t['need']} of [{', '.join(t['terms'])}] -> {t['matched']}"
                                             if t["terms"] else t["note"]) for t in trace)
    hits.status = (f"ok: {len(hits)} by BM25" if hits.ids else "empty") + (f"; ladder {rungs}" if rungs else
                                                                         "; no searchable terms")
    return hits, trace
