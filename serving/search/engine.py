"""search(): the one function agents (MCP), the CLI and the evaluation harness call.

Stage one runs the lanes (vector, keyword, title, structure) and fuses them (a
weighted sum of normalised lane scores, serving/search/fusion.py); stage two
reranks the entire fused pool with a cross-encoder when one is configured. Summaries (RAPTOR rows) are ranked in
their own lane and returned beside the passages: compared head to head,
agent-library's (github.com/CreateM1nd/agent-library) cross-encoder ranked every passage above every summary
(passages share the query's words, summaries are abstractive), so the caller
picks the altitude instead.

Reads happen in one transaction (one snapshot, and the transaction-local HNSW
settings); reranking runs after it commits; the log row and breaker counts
are written in a second, short transaction.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from psycopg import sql

from serving.embedding import Embedder, embed_text_for_passage, embedder_languages, multilingual_embedder
from serving.rerank import SKIPPED, Reranker, default_reranker, load_error
from serving.search import health
from serving.search.doclanes import structure_lane, title_lane
from serving.search.filters import passage_predicate, resolve_paths
from serving.search.fusion import Fused, fuse, lane_weight
from serving.search.keyword import corpus_configs, keyword_lane, query_lexemes
from serving.search.language import query_language, script
from serving.search.lanes import LaneHits
from serving.search.query import normalise_query, validate_top_k
from serving.search.titles import NAMES
from serving.search.types import SearchConfig, SearchFilters, SearchResponse, SearchResult
from serving.search.vector import is_uniform, set_scan_options, vector_lane

log = logging.getLogger(__name__)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def location(page_start: int | None, page_end: int | None, heading: str | None, summary_level: int) -> str:
    parts = []
    if page_start is not None:
        parts.append(f"p. {page_start}" if page_end in (None, page_start) else f"pp. {page_start}-{page_end}")
    if heading:
        parts.append(heading.strip())
    if summary_level > 0:
        parts.append(f"summary, level {summary_level}")
    return " · ".join(parts)


_HYDRATE = sql.SQL(
    "SELECT p.id, p.document_id, d.path, d.title, p.source, p.kind, p.summary_level, p.page_start, p.page_end, "
    "p.heading, p.content FROM passages p LEFT JOIN documents d ON d.id = p.document_id WHERE p.id = ANY(%s)")


def _hydrate(conn: psycopg.Connection, ids: list[int]) -> dict[int, tuple]:
    if not ids:
        return {}
    return {row[0]: row for row in conn.execute(_HYDRATE, (ids,))}


def _result(row: tuple, score: float, lanes: dict[str, int], fused: Fused | None = None) -> SearchResult:
    pid, doc_id, path, title, source, kind, level, p1, p2, heading, content = row
    return SearchResult(passage_id=pid, document_id=doc_id, path=path, title=title, source=source,
                        location=location(p1, p2, heading, level), kind=kind, score=score, lanes=lanes,
                        text=content, summary_level=level, page_start=p1, page_end=p2, heading=heading,
                        fused_score=fused.score if fused else 0.0, lane_scores=dict(fused.parts) if fused else {})


def _empty_pool_reason(conn: psycopg.Connection, model: str, predicate=None) -> str | None:
    """Why an unfiltered search found nothing; None when the library is simply empty.
    `predicate` (the viewer's visibility) keeps rows the caller may not see out of the answer."""
    pred = predicate.clause if predicate is not None else sql.SQL("true")
    params = {**(predicate.params if predicate is not None else {}), "model": model}
    row = conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM passages p WHERE p.embed_model = %(model)s AND {pred}), "
                               "EXISTS (SELECT 1 FROM passages p WHERE {pred})").format(pred=pred), params).fetchone()
    if not row[1]:
        return None
    if not row[0]:
        return f"empty pool: no passage is embedded with the query model {model!r}"
    return "empty pool: passages exist for this model but no lane returned any"


_DEFAULT: Any = object()


def _scripts(conn: psycopg.Connection, ids: list[int]) -> dict[int, str]:
    """passage id -> the script of its text (serving.search.language.script)."""
    if not ids:
        return {}
    return {pid: script(head) for pid, head in conn.execute(
        "SELECT id, left(content, 300) FROM passages WHERE id = ANY(%s)", (ids,))}


def search(conn: psycopg.Connection, embedder: Embedder, query: str, *, top_k: int = 10,
           filters: SearchFilters | dict[str, Any] | None = None, config: SearchConfig | None = None,
           reranker: Reranker | None = None, multilingual: Embedder | None = _DEFAULT) -> SearchResponse:
    """Hybrid search. Raises SearchError (a ValueError) for input the caller must fix.
    `multilingual`: the second vector lane's model (default: LIBRARY_EMBED_MULTILINGUAL's,
    serving.embedding.multilingual_embedder; None: no second lane)."""
    started = time.perf_counter()
    cfg = config or SearchConfig()
    text, warnings = normalise_query(query)
    k, more = validate_top_k(top_k)
    warnings += more
    if not isinstance(filters, SearchFilters):
        filters = SearchFilters.from_mapping(filters)
    filters = filters.validated()
    if reranker is None and cfg.rerank:
        reranker = default_reranker()
    resp = SearchResponse(query=text, results=[], warnings=warnings, config_label=cfg.label, score_kind=cfg.fusion)
    stages, timings = resp.stages, resp.timings
    health.ensure_serving_tables(conn)

    with conn.transaction():
        filters = resolve_paths(conn, filters)
        predicate = passage_predicate(filters)
        breaker = health.read_breaker(conn)
        set_scan_options(conn, cfg.ef_search, cfg.max_scan_tuples)

        multi = None
        if cfg.multilingual:
            multi = multilingual_embedder() if multilingual is _DEFAULT else multilingual
        if multi is not None and multi.name == embedder.name:
            multi = None   # the primary model is the multilingual one: one lane reads it
        # which lanes may speak for this query (serving/search/fusion.py trust_factors)
        qlang = query_language(text)
        resp.query_language = qlang
        languages = embedder_languages(embedder)
        primary_reads = languages is None or qlang in languages
        vector_bypassed = breaker.is_open("vector")
        lanes: list[tuple[LaneHits, float]] = []
        vec = kw = mvh = None
        qvec = mvec = None

        if not cfg.multilingual:
            stages["multilingual"] = "off"
        elif multi is None:
            stages["multilingual"] = ("off: the primary model is the multilingual one"
                                      if multilingual is _DEFAULT and multilingual_embedder() is not None
                                      else "off: LIBRARY_EMBED_MULTILINGUAL=off")
        elif vector_bypassed:
            stages["multilingual"] = "skipped: " + breaker.describe("vector")
        else:
            t = time.perf_counter()
            mvec = multi.encode_queries([text])[0]
            timings["embed_multilingual"] = _ms(t)
            mvh = vector_lane(conn, multi.name, multi.dims, mvec, predicate, depth=max(cfg.vector_depth, k),
                              exact=bool(filters.document_ids), column="multilingual", name="multilingual")
            lanes.append((mvh, lane_weight("multilingual", cfg)))

        # an English-only model is left out for a query it cannot read when the
        # multilingual lane found passages to stand in with (a library not yet embedded
        # by the second model keeps the primary lane)
        foreign = bool(mvh) and cfg.language_aware and not primary_reads
        primary_on = cfg.vector and (not foreign or cfg.vector_weight_foreign > 0)
        if (primary_on or (cfg.summaries and mvec is None)) and not vector_bypassed:
            t = time.perf_counter()
            qvec = embedder.encode_queries([text])[0]
            timings["embed"] = _ms(t)
        if not cfg.vector:
            stages["vector"] = "off"
        elif vector_bypassed:
            stages["vector"] = "skipped: " + breaker.describe("vector")
        elif not primary_on:
            stages["vector"] = (f"skipped: {embedder.name} reads {', '.join(languages or ())} only, the query "
                                f"is {qlang}; the multilingual lane stands in")
        else:
            vec = vector_lane(conn, embedder.name, embedder.dims, qvec, predicate, depth=max(cfg.vector_depth, k),
                              exact=bool(filters.document_ids))
            lanes.insert(0, (vec, lane_weight("vector", cfg, foreign=foreign)))

        stats = corpus_configs(conn) if cfg.keyword else []
        names = NAMES.get(conn) if (cfg.title or cfg.structure) else None
        configs = sorted({s.name for s in stats} | set(names.configs if names else ()))
        t = time.perf_counter()
        lexemes = query_lexemes(conn, text, configs)
        timings["lexemes"] = _ms(t)
        query_sets = {c: set(v) for c, v in lexemes.items()}
        if configs and not any(lexemes.values()):
            warnings.append("the query has no searchable words (only stopwords, punctuation or symbols): "
                            "results are the passages nearest in meaning, nothing more")

        if cfg.keyword:
            kw, resp.keyword_trace = keyword_lane(conn, lexemes, stats, predicate, cfg,
                                                   narrow=bool(filters.document_ids),
                                                   filtered=not filters.is_empty)
            lanes.append((kw, lane_weight("keyword", cfg)))
        else:
            stages["keyword"] = "off"
        if cfg.structure and names is not None:
            st = structure_lane(conn, text, names, query_sets, predicate, depth=cfg.structure_depth)
            if st is not None:
                lanes.append((st, cfg.structure_weight))
        if cfg.title and names is not None:
            tl = title_lane(conn, names, query_sets, predicate, filters, [h for h in (vec, mvh, kw) if h],
                            depth=cfg.title_depth, min_terms=cfg.title_min_terms,
                            min_query_share=cfg.title_query_share)
            lanes.append((tl, cfg.title_weight))
        elif not cfg.title:
            stages["title"] = "off"
        for hits, _ in lanes:
            stages[hits.name] = hits.status
            timings[hits.name] = hits.ms

        t = time.perf_counter()
        scripts: dict[int, str] = {}
        if cfg.language_aware and mvh:
            scripts = _scripts(conn, sorted({pid for h, _ in lanes if h.name in ("vector", "keyword", "multilingual")
                                             for pid in h.ids}))
        fused, lanes, stages["fusion"] = fuse(lanes, cfg, scripts=scripts, query_script=script(text),
                                              primary_reads=primary_reads, primary_monolingual=languages is not None)
        for hits, _ in lanes:
            stages[hits.name] = hits.status
        timings["fusion"] = _ms(t)
        resp.pool_size = len(fused)

        summaries = None
        if not cfg.summaries:
            stages["summaries"] = "off"
        elif mvec is not None and mvh and (not primary_reads or qvec is None):
            # a query the primary model cannot read: summaries by the multilingual model
            summaries = vector_lane(conn, multi.name, multi.dims, mvec, predicate, depth=cfg.summaries_k,
                                    summaries=True, exact=bool(filters.document_ids), column="multilingual")
            stages["summaries"], timings["summaries"] = summaries.status, summaries.ms
        elif qvec is None:
            stages["summaries"] = "skipped: vector lane unavailable"
        else:
            summaries = vector_lane(conn, embedder.name, embedder.dims, qvec, predicate, depth=cfg.summaries_k,
                                    summaries=True, exact=bool(filters.document_ids))
            stages["summaries"], timings["summaries"] = summaries.status, summaries.ms
            pending = conn.execute(
                "SELECT count(*) FILTER (WHERE b.document_id IS NULL OR b.version <> d.version), count(*) "
                "FROM documents d LEFT JOIN raptor_builds b ON b.document_id = d.id "
                "WHERE d.source = 'library' AND d.status = 'ingested'").fetchone()
            if pending[0]:
                # summaries follow each ingest by themselves; until then say so, not nothing
                stages["summaries"] += (f"; summary trees pending for {pending[0]} of {pending[1]} files "
                                        "(built automatically after ingest)")

        use_rerank = cfg.rerank and reranker is not None and not breaker.is_open("rerank") and len(fused) > 1
        t = time.perf_counter()
        wanted = [f.id for f in (fused if use_rerank else fused[:k])] + (summaries.ids if summaries else [])
        rows = _hydrate(conn, wanted)
        timings["hydrate"] = _ms(t)
        pool_reason = None
        if not fused and (vec is not None or mvh is not None) and filters.is_empty:
            pool_reason = _empty_pool_reason(conn, embedder.name, predicate)
            if pool_reason is None:
                warnings.append("the library has no passages yet")

    # -- stage two: rerank the whole fused pool (outside the read transaction) --
    ordered: list[tuple[Fused, float]] = [(f, f.score) for f in fused]
    rerank_reason = None
    if not cfg.rerank:
        stages["rerank"] = "off"
    elif reranker is None:
        stages["rerank"] = ("skipped: LIBRARY_RERANKER is set but the model failed to load (see server log)"
                            if load_error() else SKIPPED)
    elif breaker.is_open("rerank"):
        stages["rerank"] = "skipped: " + breaker.describe("rerank")
    elif use_rerank:
        t = time.perf_counter()
        pool = [f for f in fused if f.id in rows]
        texts = [embed_text_for_passage(rows[f.id][3], rows[f.id][9], rows[f.id][10]) for f in pool]
        try:
            scores = reranker.score(text, texts)
            ordered = sorted(zip(pool, scores), key=lambda fs: (-fs[1], -fs[0].score, fs[0].id))
            resp.score_kind = "cross-encoder"
            stages["rerank"] = f"ok: {reranker.name} reranked the whole pool of {len(pool)}"
            if is_uniform(scores):
                rerank_reason = f"uniform cross-encoder scores ({scores[0]:.4f}) over {len(scores)} passages"
        except Exception as exc:  # the fused order is still a good answer
            log.exception("cross-encoder %s failed; keeping the fused order", reranker.name)
            stages["rerank"] = f"failed: {type(exc).__name__}; fused order kept"
        timings["rerank"] = _ms(t)
    else:
        stages["rerank"] = "skipped: fewer than 2 candidates"

    resp.results = [_result(rows[f.id], score, f.lanes, f) for f, score in ordered if f.id in rows][:k]
    if summaries:
        resp.summaries = [_result(rows[pid], s, {"summaries": i})
                          for i, (pid, s) in enumerate(zip(summaries.ids, summaries.scores), start=1)
                          if pid in rows]

    # -- bookkeeping: breaker counts and the query log --------------------------
    observations: dict[str, str | None] = {}
    if vec is not None:
        observations["vector"] = (f"uniform vector similarities ({vec.scores[0]:.4f}) over {len(vec)} passages"
                                  if is_uniform(vec.scores) else None)
        if filters.is_empty:
            observations["pool"] = pool_reason
    if resp.score_kind == "cross-encoder":
        observations["rerank"] = rerank_reason
    timings["total"] = _ms(started)
    if breaker.available:
        try:
            with conn.transaction():
                resp.health = health.record(conn, breaker, observations, text)
                if cfg.log_queries:
                    health.log_search(conn, query=text, top_k=k, filters=filters.to_dict(), config=cfg.label,
                                      returned=len(resp.results), pool=len(fused),
                                      lanes={h.name: len(h) for h, _ in lanes}, timings=timings,
                                      degenerate="; ".join(r for r in observations.values() if r) or None,
                                      results=[{"id": r.passage_id, "lanes": r.lanes} for r in resp.results])
        except psycopg.Error as exc:
            log.warning("search bookkeeping failed (%s); results are unaffected", exc)
    for comp, info in resp.health.items():
        if info["state"] == "open":
            warnings.append(f"circuit breaker '{comp}' is open: {info['last_reason']}")
    return resp
