"""search(): the one function agents (MCP), the CLI and the evaluation harness call.
(~400 lines, one responsibility: the stages of one search in order; each lane, the
fusion rules and the row loading live in their own modules.)

Stage one runs the lanes (serving/search/registry.py: vector, multilingual, keyword,
structure, title) and fuses them (by default calibrated fusion, one probability of
relevance per candidate, serving/search/calibration.py; or a weighted sum of normalised
lane scores, serving/search/fusion.py); stage two reranks the entire fused pool with a
cross-encoder when one is configured. Summaries (RAPTOR rows) are ranked in
their own lane and returned beside the passages: compared head to head,
agent-library's (github.com/CreateM1nd/agent-library) cross-encoder ranked every passage above every summary
(passages share the query's words, summaries are abstractive), so the caller
picks the altitude instead.

Reads happen in a read transaction (it holds the transaction-local HNSW
settings); reranking runs after it commits; the log row and breaker counts are
written in a second, short transaction. Given a second connection (`side`), the
vector stage (query embeddings, both vector lanes, summaries) runs on it in a
thread, in its own read transaction, while the keyword and structure lanes run
on `conn`: the keyword lane needs no query vector, and at 1M passages the two
sides each took about half of the lanes' time (keyword 49 ms; embeddings 19 ms
and vector lanes 48 ms). Given a third, the primary vector lane runs there beside the
multilingual one (`_vector_lanes_apart`). All sides read committed data as a serial
search's statements do (READ COMMITTED takes a snapshot per statement either way), and a
hit whose row vanished before hydration is dropped in both cases.

`search` reads as its stages, in order: `_parse` → `_plan` → `_vector_stage`
(the vector lanes, `_summaries`; on `side` when given) beside `_text_lanes` and
`_trees_pending` → `_note_trees_pending` → `_start_pool_evidence` (on the spare
connections) beside `_late_lanes` → `_fuse` → `_hydrate_pool` (inside the read
transaction) → `_rerank` → `_assemble` → `_log`.
Each stage fills its part of one call's state (`Call`) and says in its docstring what
it owns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import psycopg

from serving.embedding import Embedder, embed_text_for_passage, embedder_languages, multilingual_embedder
from serving.rerank import SKIPPED, Reranker, default_reranker, load_error
from serving.search import health
from serving.search.calibration import (Probe, bm25_ceiling, bm25_terms, calibrated_fusion, keyword_evidence,
                                       pool_bm25, pool_vectors, readers_of, script_prior)
from serving.search.call import Call
from serving.search.call import ms_since as _ms
from serving.search.filters import passage_predicate, resolve_paths
from serving.search.fusion import fuse
from serving.search.keyword import corpus_configs, query_lexemes
from serving.search.lanes import LaneHits
from serving.search.language import query_language, script, word_scripts
from serving.search.lexicon import other_script_names
from serving.search.query import normalise_query, validate_top_k
from serving.search.registry import (POSITION, decide_exact, encode_multilingual, encode_primary, run_lane,
                                     run_phase)
from serving.search.rows import CONTENT, HEADING, TITLE, empty_pool_reason, hydrate, passage_scripts, to_result
from serving.search.titles import NAMES
from serving.search.types import SearchConfig, SearchFilters, SearchResponse
from serving.search.vector import is_uniform, scans_exactly, set_scan_options, vector_lane
from serving.threads import adopt_torch_threads, torch_threads

log = logging.getLogger(__name__)

_DEFAULT: Any = object()

# The z-scores and the BM25 statistics of a search that names no sources stand against the
# documents (library and vault), those of a memory search against the memories: the
# passages each can return. With LoCoMo's 2,960 conversation turns stored as five agents'
# private memories beside the example library's 3,918 passages, one sample of every passage
# put books in memory search's background: its evidence recall@10 was 0.7962 there against
# 0.8031 in a database of the turns alone; a memories-only background gives 0.8010.
DOCUMENT_SOURCES = ("library", "vault")


def _searched_sources(call: Call) -> tuple[str, ...]:
    """The sources whose statistics and background a search stands against (DOCUMENT_SOURCES)."""
    return tuple(call.filters.sources or DOCUMENT_SOURCES)


# the vector stages of searches given a second connection; a search waits for its own,
# so the pool only bounds how many run at once
_SIDE = ThreadPoolExecutor(max_workers=8, thread_name_prefix="search-vector")
# the primary vector lanes of searches given a third connection; a pool of its own, since
# a vector stage (on _SIDE) waits for its lane here
_LANE = ThreadPoolExecutor(max_workers=8, thread_name_prefix="search-lane")


def search(conn: psycopg.Connection, embedder: Embedder, query: str, *, top_k: int = 10,
           filters: SearchFilters | dict[str, Any] | None = None, config: SearchConfig | None = None,
           reranker: Reranker | None = None, multilingual: Embedder | None = _DEFAULT,
           side: psycopg.Connection | Sequence[psycopg.Connection] | None = None) -> SearchResponse:
    """Hybrid search. Raises SearchError (a ValueError) for input the caller must fix.
    `multilingual`: the second vector lane's model (default: LIBRARY_EMBED_MULTILINGUAL's,
    serving.embedding.multilingual_embedder; None: no second lane).
    `side`: an idle second connection to the same database, or two; the vector stage runs on
    the first beside the keyword lane, the primary vector lane on the second beside the
    multilingual one, and fusion's look-ups on both beside the title lane (same results,
    less wall time). Without it the stages run in turn."""
    call = _parse(conn, embedder, query, top_k, filters, config, reranker)
    sides = (side,) if isinstance(side, psycopg.Connection) else tuple(side or ())
    call.side = sides[0] if sides else None
    call.lane_side = sides[1] if len(sides) > 1 else None
    health.ensure_serving_tables(conn)
    with conn.transaction():
        _plan(call, multilingual)
        job: Future | None = None
        if call.side is not None and _needs_vectors(call):
            job = _SIDE.submit(_vector_stage_in_transaction, call, call.side, torch_threads())
        else:
            _vector_stage(call, conn)
        try:
            _text_lanes(call)
            _trees_pending(call)
        finally:
            if job is not None:
                # never leave `side` in use past this call, even when the text lanes failed
                job.result()
        _note_trees_pending(call)
        _start_pool_evidence(call)
        try:
            _late_lanes(call)
            _fuse(call)
        finally:
            wait(list(call.pool_jobs.values()))   # never leave a spare connection in use past this call
        _hydrate_pool(call)
    _rerank(call)          # outside the read transaction: the model may take a while
    _assemble(call)
    _log(call)
    return call.resp


def _parse(conn: psycopg.Connection, embedder: Embedder, query: str, top_k: int,
           filters: SearchFilters | dict[str, Any] | None, config: SearchConfig | None,
           reranker: Reranker | None) -> Call:
    """Owns the caller's input: the query text and top_k normalised (warnings for what was
    changed), the filters validated, the configuration and its default reranker chosen."""
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
    return Call(conn=conn, embedder=embedder, text=text, k=k, cfg=cfg, filters=filters, reranker=reranker,
                 resp=resp, started=started)


def _plan(call: Call, multilingual: Embedder | None) -> None:
    """Owns what the lanes share: path filters resolved to documents, the visibility predicate,
    the breaker's state, the vector scan options, the second vector model, and which models
    can read the query's language (serving/search/fusion.py trust_factors)."""
    conn, cfg = call.conn, call.cfg
    call.filters = resolve_paths(conn, call.filters)
    call.predicate = passage_predicate(call.filters)
    call.breaker = health.read_breaker(conn)
    if cfg.multilingual:
        call.multi = multilingual_embedder() if multilingual is _DEFAULT else multilingual
        call.multi_off = None if call.multi is not None else "off: LIBRARY_EMBED_MULTILINGUAL=off"
    if call.multi is not None and call.multi.name == call.embedder.name:
        call.multi = None   # the primary model is the multilingual one: one lane reads it
        call.multi_off = "off: the primary model is the multilingual one"
    qlang = query_language(call.text)
    call.resp.query_language = qlang
    call.languages = embedder_languages(call.embedder)
    call.primary_reads = call.languages is None or qlang in call.languages
    call.vector_bypassed = call.breaker.is_open("vector")


def _needs_vectors(call: Call) -> bool:
    """Whether the vector stage will query the database (else a second connection buys nothing)."""
    cfg = call.cfg
    return not call.vector_bypassed and (cfg.vector or cfg.summaries or (cfg.multilingual and call.multi is not None))


def _on_side(side: psycopg.Connection, fn: Any, *args: Any) -> Any:
    """fn(side, *args) in a read transaction of its own on the second connection."""
    with side.transaction():
        return fn(side, *args)


def _vector_stage_in_transaction(call: Call, side: psycopg.Connection, threads: int | None) -> None:
    adopt_torch_threads(threads)   # the query vectors of the caller's thread, bit for bit
    with side.transaction():
        _vector_stage(call, side)


def _vector_stage(call: Call, conn: psycopg.Connection) -> None:
    """Owns everything that needs a query vector, on `conn` (the search's connection, or the
    second one): the HNSW scan options of that transaction, the vector lanes (registry.py:
    the multilingual one first, its hits decide whether an English-only primary model may
    stand aside), the summaries."""
    set_scan_options(conn, call.cfg.ef_search, call.cfg.max_scan_tuples)
    if call.lane_side is not None and _lanes_apart(call):
        _vector_lanes_apart(call, conn, call.lane_side)
    else:
        run_phase(call, "vector", conn, call.vector_lanes)
        _summaries(call, conn)


def _lanes_apart(call: Call) -> bool:
    """Whether the two vector lanes may run at once: both on, and the primary model reads the
    query (else the primary lane reads the multilingual lane's hits to decide whether it runs)."""
    cfg = call.cfg
    return (cfg.vector and cfg.multilingual and call.multi is not None and call.primary_reads
            and not call.vector_bypassed)


def _vector_lanes_apart(call: Call, conn: psycopg.Connection, other: psycopg.Connection) -> None:
    """The multilingual lane and then the summaries on `conn`, the primary lane on `other`,
    at once. The multilingual query vector is encoded first and alone: two encoders at once
    share one interpreter, and side by side both slowed (USE-m3 4.3 -> 10.7 ms), so the
    primary model encodes while the multilingual lane's statement runs in the server. At a
    million passages (benchmarks/search.py, same hour) this took the p50 from 87-93 ms to
    77-79 ms, and a search filtered to 2% of rows, whose two graph walks are long, from 160
    to 110 ms; at 100k, where the two cores are already busy with the keyword lane and both
    encoders, it changed nothing. The summaries wait for the primary query vector only, not
    for its lane."""
    decide_exact(call, conn)   # here, not in both threads at once
    encode_multilingual(call)
    encoded = threading.Event()
    job = _LANE.submit(_primary_lane, call, other, torch_threads(), encoded)
    try:
        run_lane(call, "multilingual", conn, call.vector_lanes)
        encoded.wait()
        _summaries(call, conn)
    finally:
        job.result()   # never leave `other` in use past this call


def _primary_lane(call: Call, conn: psycopg.Connection, threads: int | None, encoded: threading.Event) -> None:
    try:
        adopt_torch_threads(threads)
        encode_primary(call)
    finally:
        encoded.set()   # also when encoding failed: the summaries go on, this job raises
    with conn.transaction():
        set_scan_options(conn, call.cfg.ef_search, call.cfg.max_scan_tuples)
        run_lane(call, "vector", conn, call.vector_lanes)


def _text_lanes(call: Call) -> None:
    """Owns what the lanes that read words share - the query's lexemes per text-search
    configuration in use, the name index - and runs them (registry.py: keyword, structure)."""
    conn, cfg = call.conn, call.cfg
    stats = call.keyword_stats = corpus_configs(conn, _searched_sources(call)) if cfg.keyword else []
    names = call.names = NAMES.get(conn) if (cfg.title or cfg.structure) else None
    configs = sorted({s.name for s in stats} | set(names.configs if names else ()))
    t = time.perf_counter()
    lexemes = call.lexemes = query_lexemes(conn, call.text, configs)
    if cfg.keyword and cfg.cross_script_names:
        keyword_configs = {s.name for s in stats}
        named = names.name_keys if names is not None else frozenset()
        call.cross_names = {c: v for c, v in other_script_names(conn, call.text, skip=named).items()
                            if c in keyword_configs}
        for config, extra in call.cross_names.items():
            lexemes[config] = list(dict.fromkeys([*lexemes.get(config, []), *sorted(extra)]))
    call.timings["lexemes"] = _ms(t)
    call.lexeme_sets = {c: set(v) for c, v in lexemes.items()}
    if configs and not any(lexemes.values()):
        call.warnings.append("the query has no searchable words (only stopwords, punctuation or symbols): "
                             "results are the passages nearest in meaning, nothing more")
    run_phase(call, "text", conn, call.text_lanes)


def _late_lanes(call: Call) -> None:
    """Owns the lanes that read the other lanes' hits (registry.py: the title lane picks
    titles among them, so it runs once they are all in) and the joined lane list with each
    lane's status and time."""
    run_phase(call, "after", call.conn, call.text_lanes)
    call.lanes = sorted(call.vector_lanes + call.text_lanes, key=lambda hw: POSITION.get(hw[0].name, len(POSITION)))
    for hits, _ in call.lanes:
        call.stages[hits.name] = hits.status
        call.timings[hits.name] = hits.ms
    # the two sides fill these dicts in whichever order their threads ran: callers show
    # them in dict order, so give them one
    call.resp.stages = _in_order(call.stages)
    call.resp.timings = _in_order(call.timings)


_STAGE_ORDER = ("embed_multilingual", "multilingual", "embed", "vector", "lexemes", "keyword", "structure",
                "title", "summaries")


def _in_order(entries: dict[str, Any]) -> dict[str, Any]:
    rank = {name: i for i, name in enumerate(_STAGE_ORDER)}
    return dict(sorted(entries.items(), key=lambda kv: rank.get(kv[0], len(rank))))


def _fuse(call: Call) -> None:
    """Owns fusion's input (each hit's script when the multilingual lane ran) and its output:
    the fused pool, and each lane's status as fusion left it."""
    cfg, stages = call.cfg, call.stages
    t = time.perf_counter()
    if _calibrates(call, call.lanes):
        _calibrated(call)
    else:
        scripts: dict[int, str] = {}
        if cfg.language_aware and call.mvh:
            scripts = passage_scripts(call.conn, sorted({pid for h, _ in call.lanes
                                                         if h.name in ("vector", "keyword", "multilingual")
                                                         for pid in h.ids}))
        call.fused, call.lanes, stages["fusion"] = fuse(call.lanes, cfg, scripts=scripts,
                                                        query_script=script(call.text),
                                                        primary_reads=call.primary_reads,
                                                        primary_monolingual=call.languages is not None)
    for hits, _ in call.lanes:
        stages[hits.name] = hits.status
    call.timings["fusion"] = _ms(t)
    call.resp.pool_size = len(call.fused)


def _calibrates(call: Call, lanes: list[tuple[LaneHits, float]]) -> bool:
    # one graded lane (a lane alone, as the evaluation runs each): nothing to calibrate
    # against, its own order stands (the convex rule keeps it; the calibrated rule's BM25
    # context differs from the keyword lane's document term and would reorder the lane)
    return call.cfg.fusion == "calibrated" and sum(1 for h, _ in lanes if h.graded) > 1


def _pool_inputs(call: Call, lanes: list[tuple[LaneHits, float]]) -> tuple[list[int], list[Probe], tuple]:
    """Calibrated fusion's pool (the graded lanes' hits), the models' query vectors to score it
    under, and pool_bm25's arguments."""
    cfg = call.cfg
    pool = sorted({pid for h, _ in lanes if h.graded for pid in h.ids})
    probes = []
    if call.qvec is not None and cfg.vector:
        probes.append(Probe("vector", "embedding", call.embedder.name, call.embedder.dims, call.qvec))
    if call.mvec is not None and call.multi is not None:
        probes.append(Probe("multilingual", "embedding_multi", call.multi.name, call.multi.dims, call.mvec))
    terms = bm25_terms(call.resp.keyword_trace) if call.kw is not None and cfg.keyword else []
    return pool, probes, (pool, terms, cfg.bm25_k1, cfg.bm25_b, cfg.keyword_window)


def _start_pool_evidence(call: Call) -> None:
    """Owns starting calibrated fusion's two look-ups on the spare connections, beside the
    title lane (the pool is the graded lanes' hits; the title lane is ranked, not graded):
    the pool's BM25 on the second connection, its vectors on the third. At 100k passages
    (window +-2) the two had taken 8.6 and 3.7 ms in turn; side by side they wait on
    whichever is longer, and now beside the title lane's 3.5 ms too."""
    lanes = call.vector_lanes + call.text_lanes
    if call.side is None or not _calibrates(call, lanes):
        return
    pool, probes, bm25_args = _pool_inputs(call, lanes)
    if bm25_args[1]:
        call.pool_jobs["bm25"] = _SIDE.submit(_on_side, call.side, pool_bm25, *bm25_args)
    if call.lane_side is not None:
        call.pool_jobs["vectors"] = _LANE.submit(_on_side, call.lane_side, pool_vectors, pool, probes,
                                                 _searched_sources(call))


def _calibrated(call: Call) -> None:
    """Calibrated fusion (serving/search/calibration.py): every candidate of the graded lanes
    scored under each model from its stored vector and by BM25, then one P(relevant) each."""
    cfg = call.cfg
    pool, probes, bm25_args = _pool_inputs(call, call.lanes)
    scored_by_bm25 = call.kw is not None and cfg.keyword
    vectors, bm25_job = call.pool_jobs.get("vectors"), call.pool_jobs.get("bm25")
    try:
        evidence = (vectors.result() if vectors is not None
                    else pool_vectors(call.conn, pool, probes, sources=_searched_sources(call)))
    finally:
        bm25 = bm25_job.result() if bm25_job is not None else None   # never leave `side` in use past this call
    evidence.bm25, evidence.window = bm25 if bm25 is not None else pool_bm25(call.conn, *bm25_args)
    # who reads what matters only beside the multilingual lane, the one reader of every
    # passage: without it each lane speaks for whatever it returned, as under the convex rule
    aware, query_script = cfg.language_aware and bool(call.mvh), script(call.text)
    if aware:
        readers = readers_of(pool, evidence.scripts, query_script,
                             primary_reads=call.primary_reads and call.qvec is not None,
                             primary_monolingual=call.languages is not None,
                             word_scripts=word_scripts(call.text),
                             named=set(evidence.bm25) if call.cross_names else frozenset())
    else:
        readers = {pid: {"vector", "keyword", "multilingual"} for pid in pool}
    shares: dict[int, float] = {}
    if scored_by_bm25:
        # a configuration the query reached only through its names in the other script
        # (an English question of a Russian library) holds no other word of it: the names
        # found there are all the evidence its passages can show
        ceiling = bm25_ceiling(call.resp.keyword_trace, {**call.lexeme_sets, **call.cross_names}, cfg.bm25_k1)
        # a document-filtered search's keyword lane scores passages alone (no context share)
        context = 0.0 if call.filters.document_ids else cfg.keyword_doc_weight
        shares = keyword_evidence(evidence, ceiling, context, call.kw.doc_scores)
    else:
        readers = {pid: lanes - {"keyword"} for pid, lanes in readers.items()}
    graded = cfg.vector_weight + cfg.keyword_weight
    prior = script_prior(call.resp.keyword_trace, query_script) if aware else 0.0
    call.fused = calibrated_fusion(call.lanes, zscores=evidence.zscores, keyword_share=shares, readers=readers,
                                   k=cfg.rrf_k, graded_weight=graded, cross_prior=prior)
    call.stages["fusion"] = (f"ok: calibrated P(relevant) from every lane that reads each candidate, x {graded:g}, "
                             f"plus ranked lanes (k+1)/(k+rank), k={cfg.rrf_k}, over {len(call.fused)} candidates")


def _summaries(call: Call, conn: psycopg.Connection) -> None:
    """Owns the summaries lane (RAPTOR rows, ranked apart from passages)."""
    cfg, stages, timings = call.cfg, call.stages, call.timings
    exact = cfg.summaries and scans_exactly(conn, call.filters, call.predicate, summaries=True)
    if cfg.summaries and call.qvec is None and call.mvec is None and not call.vector_bypassed:
        t = time.perf_counter()
        call.qvec = call.embedder.encode_queries([call.text])[0]
        timings["embed"] = _ms(t)
    if not cfg.summaries:
        stages["summaries"] = "off"
    elif call.mvec is not None and call.mvh and (not call.primary_reads or call.qvec is None):
        # a query the primary model cannot read: summaries by the multilingual model
        multi = call.multi
        call.summaries = vector_lane(conn, multi.name, multi.dims, call.mvec, call.predicate,
                                     depth=cfg.summaries_k, summaries=True, exact=exact, column="multilingual",
                                     ef_search=cfg.ef_search_summaries, one_pass_first=call.filters.is_empty)
        stages["summaries"], timings["summaries"] = call.summaries.status, call.summaries.ms
    elif call.qvec is None:
        stages["summaries"] = "skipped: vector lane unavailable"
    else:
        embedder = call.embedder
        call.summaries = vector_lane(conn, embedder.name, embedder.dims, call.qvec, call.predicate,
                                     depth=cfg.summaries_k, summaries=True, exact=exact,
                                     ef_search=cfg.ef_search_summaries, one_pass_first=call.filters.is_empty)
        if len(call.summaries) < cfg.summaries_k and call.mvec is not None and call.multi is not None:
            # the primary model has no vector of a summary it cannot read (a Russian book's
            # under an English-only model): an English question of a Russian library found
            # none. The multilingual model's nearest fill the rest, after the primary's.
            more = vector_lane(conn, call.multi.name, call.multi.dims, call.mvec, call.predicate,
                               depth=cfg.summaries_k, summaries=True, exact=exact, column="multilingual",
                               ef_search=cfg.ef_search_summaries, one_pass_first=call.filters.is_empty)
            for pid, score, doc in zip(more.ids, more.scores, more.doc_ids):
                if pid not in call.summaries.ids and len(call.summaries) < cfg.summaries_k:
                    call.summaries.ids.append(pid)
                    call.summaries.scores.append(score)
                    call.summaries.doc_ids.append(doc)
            call.summaries.ms += more.ms
            if more.ids:
                call.summaries.status = f"ok: {len(call.summaries)} nearest (both models)"
        stages["summaries"], timings["summaries"] = call.summaries.status, call.summaries.ms


def _trees_pending(call: Call) -> None:
    """Owns the note that summary trees are still being built: on the search's connection,
    beside the vector stage (at a million passages the count took 2.5 ms of that stage)."""
    if not call.cfg.summaries or call.vector_bypassed:
        return
    call.trees_pending = call.conn.execute(
        "SELECT count(*) FILTER (WHERE b.document_id IS NULL OR b.version <> d.version), count(*) "
        "FROM documents d LEFT JOIN raptor_builds b ON b.document_id = d.id "
        "WHERE d.source = 'library' AND d.status = 'ingested'").fetchone()


def _note_trees_pending(call: Call) -> None:
    pending = call.trees_pending
    if pending and pending[0] and call.summaries is not None:
        # summaries follow each ingest by themselves; until then say so, not nothing
        call.stages["summaries"] += (f"; summary trees pending for {pending[0]} of {pending[1]} files "
                                     "(built automatically after ingest)")


def _hydrate_pool(call: Call) -> None:
    """Owns loading the rows to return (the whole fused pool when it will be reranked, else the
    top k, plus the summaries), and why an unfiltered search found nothing."""
    cfg, fused = call.cfg, call.fused
    call.use_rerank = (cfg.rerank and call.reranker is not None and not call.breaker.is_open("rerank")
                       and len(fused) > 1)
    t = time.perf_counter()
    wanted = [f.id for f in (fused if call.use_rerank else fused[:call.k])] + (
        call.summaries.ids if call.summaries else [])
    call.rows = hydrate(call.conn, wanted)
    call.timings["hydrate"] = _ms(t)
    if not fused and (call.vec is not None or call.mvh is not None) and call.filters.is_empty:
        call.pool_reason = empty_pool_reason(call.conn, call.embedder.name, call.predicate)
        if call.pool_reason is None:
            call.warnings.append("the library has no passages yet")


def _rerank(call: Call) -> None:
    """Owns stage two: the cross-encoder reorders the whole fused pool; when it is off, open,
    unloaded or fails, the fused order stands and the stage says why."""
    cfg, stages, reranker, rows = call.cfg, call.stages, call.reranker, call.rows
    call.ordered = [(f, f.score) for f in call.fused]
    if not cfg.rerank:
        stages["rerank"] = "off"
    elif reranker is None:
        stages["rerank"] = ("skipped: LIBRARY_RERANKER is set but the model failed to load (see server log)"
                            if load_error() else SKIPPED)
    elif call.breaker.is_open("rerank"):
        stages["rerank"] = "skipped: " + call.breaker.describe("rerank")
    elif call.use_rerank:
        t = time.perf_counter()
        pool = [f for f in call.fused if f.id in rows]
        texts = [embed_text_for_passage(rows[f.id][TITLE], rows[f.id][HEADING], rows[f.id][CONTENT]) for f in pool]
        try:
            scores = reranker.score(call.text, texts)
            call.ordered = sorted(zip(pool, scores), key=lambda fs: (-fs[1], -fs[0].score, fs[0].id))
            call.resp.score_kind = "cross-encoder"
            stages["rerank"] = f"ok: {reranker.name} reranked the whole pool of {len(pool)}"
            if is_uniform(scores):
                call.rerank_reason = f"uniform cross-encoder scores ({scores[0]:.4f}) over {len(scores)} passages"
        except Exception as exc:  # the fused order is still a good answer
            log.exception("cross-encoder %s failed; keeping the fused order", reranker.name)
            stages["rerank"] = f"failed: {type(exc).__name__}; fused order kept"
        call.timings["rerank"] = _ms(t)
    else:
        stages["rerank"] = "skipped: fewer than 2 candidates"


def _assemble(call: Call) -> None:
    """Owns the answer's lists: the top k passages in their final order, and the summaries."""
    rows = call.rows
    call.resp.results = [to_result(rows[f.id], score, f.lanes, f) for f, score in call.ordered if f.id in rows][:call.k]
    if call.summaries:
        call.resp.summaries = [to_result(rows[pid], s, {"summaries": i})
                               for i, (pid, s) in enumerate(zip(call.summaries.ids, call.summaries.scores), start=1)
                               if pid in rows]


def _log(call: Call) -> None:
    """Owns the bookkeeping, in its own short transaction: what was degenerate, the breaker
    counts, the query log row, and a warning for each open breaker."""
    resp, vec, filters = call.resp, call.vec, call.filters
    observations: dict[str, str | None] = {}
    if vec is not None:
        observations["vector"] = (f"uniform vector similarities ({vec.scores[0]:.4f}) over {len(vec)} passages"
                                  if is_uniform(vec.scores) else None)
        if filters.is_empty:
            observations["pool"] = call.pool_reason
    if resp.score_kind == "cross-encoder":
        observations["rerank"] = call.rerank_reason
    call.timings["total"] = _ms(call.started)
    if call.breaker.available:
        try:
            with call.conn.transaction():
                resp.health = health.record(call.conn, call.breaker, observations, call.text)
                if call.cfg.log_queries:
                    health.log_search(call.conn, query=call.text, top_k=call.k, filters=filters.to_dict(),
                                      config=call.cfg.label, returned=len(resp.results), pool=len(call.fused),
                                      lanes={h.name: len(h) for h, _ in call.lanes}, timings=call.timings,
                                      degenerate="; ".join(r for r in observations.values() if r) or None,
                                      results=[{"id": r.passage_id, "lanes": r.lanes} for r in resp.results])
        except psycopg.Error as exc:
            log.warning("search bookkeeping failed (%s); results are unaffected", exc)
    for comp, info in resp.health.items():
        if info["state"] == "open":
            call.warnings.append(f"circuit breaker '{comp}' is open: {info['last_reason']}")
