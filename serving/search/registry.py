"""The lanes of search. Each lane proposes candidates for fusion; this list says what
each one needs and runs it, and the engine (engine.py) runs whichever are switched on.

Adding a lane touches this file and the configuration: a `Lane` here (its function reads
what the call has prepared - the query vectors, the query's lexemes, the name index,
other lanes' hits - and returns its hits and weight, or None after saying why in
`call.stages`), and in SearchConfig (types.py) a switch named after it, a
`<name>_weight` field and its name in LANES. A ranked lane (its scores are match counts;
`LaneHits.graded` False) joins both fusion rules at once, (k + 1) / (k + rank) x its
weight. A graded lane joins the convex rule at once; the calibrated rule scores the pool
only under the models and BM25 (calibration.py), so a graded lane there proposes
candidates and needs its own evidence and refitted MODELS to count by its scores.

Phases: "vector" lanes need a query vector and run on the vector stage's connection
(beside the text lanes when the search has a second one); "text" lanes read words only;
"after" lanes read the other lanes' hits. Within a phase a lane runs after the lanes it
`needs`; fusion takes the lanes in this list's order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from serving.search.call import Call, ms_since
from serving.search.doclanes import structure_lane, title_lane
from serving.search.fusion import lane_weight
from serving.search.keyword import keyword_lane
from serving.search.lanes import LaneHits
from serving.search.titles import with_translit
from serving.search.vector import lane_ef, scans_exactly, vector_lane

Ran = tuple[LaneHits, float] | None


@dataclass(frozen=True)
class Lane:
    name: str                                   # its switch and weight in SearchConfig, its stage name
    phase: str                                  # "vector" | "text" | "after"
    run: Callable[[Call, psycopg.Connection], Ran]
    needs: tuple[str, ...] = ()                 # lanes of its phase whose hits it reads


def decide_exact(call: Call, conn: psycopg.Connection) -> bool:
    """Whether the vector lanes scan exactly (vector.py scans_exactly), decided once for both
    lanes: they read the same rows. The engine decides it before running the two at once."""
    if call.exact_passages is None:
        call.exact_passages = scans_exactly(conn, call.filters, call.predicate, summaries=False)
    return call.exact_passages


def _depth(call: Call, conn: psycopg.Connection) -> tuple[int, bool]:
    """Vector lanes' depth, and whether they scan exactly."""
    return max(call.cfg.vector_depth, call.k), decide_exact(call, conn)


def _bypassed(call: Call, name: str) -> bool:
    """The vector breaker is open (health.py): the vector lanes stand aside and say why."""
    if call.vector_bypassed:
        call.stages[name] = "skipped: " + call.breaker.describe("vector")
    return call.vector_bypassed


def _multilingual(call: Call, conn: psycopg.Connection) -> Ran:
    """The multilingual model over embedding_multi: it reads every passage whatever its
    language, so it runs first and the primary lane may stand aside on its hits."""
    multi = call.multi
    if multi is None:
        call.stages["multilingual"] = call.multi_off or "off"
        return None
    if _bypassed(call, "multilingual"):
        return None
    encode_multilingual(call)
    depth, exact = _depth(call, conn)
    hits = vector_lane(conn, multi.name, multi.dims, call.mvec, call.predicate, depth=depth, exact=exact,
                       column="multilingual", name="multilingual",
                       ef_search=lane_ef(conn, call.cfg, call.cfg.ef_search_multilingual),
                       one_pass_first=call.filters.is_empty)
    return hits, lane_weight("multilingual", call.cfg)


def encode_multilingual(call: Call) -> None:
    """The multilingual model's query vector, once (the engine may encode it before the lanes
    run, so that the two encoders never compete for the interpreter)."""
    if call.mvec is None:
        t = time.perf_counter()
        call.mvec = call.multi.encode_queries([call.text])[0]
        call.timings["embed_multilingual"] = ms_since(t)


def encode_primary(call: Call) -> None:
    """The primary model's query vector, once (the engine may encode it before its lane runs,
    for the summaries lane to start on another connection)."""
    if call.qvec is None:
        t = time.perf_counter()
        call.qvec = call.embedder.encode_queries([call.text])[0]
        call.timings["embed"] = ms_since(t)


def _vector(call: Call, conn: psycopg.Connection) -> Ran:
    """The primary model over embedding. An English-only model is left out for a query it
    cannot read when the multilingual lane found passages to stand in with (a library not
    yet embedded by the second model keeps the primary lane)."""
    cfg = call.cfg
    if _bypassed(call, "vector"):
        return None
    foreign = bool(call.mvh) and cfg.language_aware and not call.primary_reads
    if foreign and cfg.vector_weight_foreign <= 0:
        call.stages["vector"] = (f"skipped: {call.embedder.name} reads {', '.join(call.languages or ())} only, "
                                 f"the query is {call.resp.query_language}; the multilingual lane stands in")
        return None
    encode_primary(call)
    depth, exact = _depth(call, conn)
    hits = vector_lane(conn, call.embedder.name, call.embedder.dims, call.qvec, call.predicate, depth=depth,
                       exact=exact, ef_search=lane_ef(conn, cfg, cfg.ef_search), one_pass_first=call.filters.is_empty)
    return hits, lane_weight("vector", cfg, foreign=foreign)


def _keyword(call: Call, conn: psycopg.Connection) -> Ran:
    """BM25 over the postings (keyword.py), with the query's lexemes per configuration."""
    hits, call.resp.keyword_trace = keyword_lane(conn, call.lexemes, call.keyword_stats, call.predicate, call.cfg,
                                                 filters=call.filters, narrow=bool(call.filters.document_ids),
                                                 filtered=not call.filters.is_empty)
    return hits, lane_weight("keyword", call.cfg)


def _structure(call: Call, conn: psycopg.Connection) -> Ran:
    """Requests for a table of contents (doclanes.py); no hits unless the query asks for one."""
    if call.names is None:
        return None
    hits = structure_lane(conn, call.text, call.names, call.lexeme_sets, call.predicate,
                          depth=call.cfg.structure_depth)
    return (hits, lane_weight("structure", call.cfg)) if hits is not None else None


def _title(call: Call, conn: psycopg.Connection) -> Ran:
    """Known-item lookups by name (doclanes.py); it picks each document's passage among
    the graded lanes' hits, so it runs once they are all in."""
    if call.names is None:
        return None
    cfg = call.cfg
    hits = title_lane(conn, call.names, with_translit(call.lexeme_sets, call.text), call.predicate, call.filters,
                      [h for h in (call.vec, call.mvh, call.kw) if h], depth=cfg.title_depth,
                      min_terms=cfg.title_min_terms, min_query_share=cfg.title_query_share, text=call.text,
                      bridge=call.multi if call.mvh else None, bridge_vector=call.mvec)
    return hits, lane_weight("title", cfg)


LANES: tuple[Lane, ...] = (
    Lane("vector", "vector", _vector, needs=("multilingual",)),
    Lane("multilingual", "vector", _multilingual),
    Lane("keyword", "text", _keyword),
    Lane("structure", "text", _structure),
    Lane("title", "after", _title),
)
POSITION = {lane.name: i for i, lane in enumerate(LANES)}
BY_NAME = {lane.name: lane for lane in LANES}


def in_phase(phase: str) -> list[Lane]:
    """The phase's lanes in the order they must run: each after the lanes it needs."""
    todo = [lane for lane in LANES if lane.phase == phase]
    order: list[Lane] = []
    while todo:
        ready = next(lane for lane in todo if all(n not in {t.name for t in todo} for n in lane.needs))
        order.append(ready)
        todo.remove(ready)
    return order


_RUN_ORDER = {phase: in_phase(phase) for phase in ("vector", "text", "after")}


def run_phase(call: Call, phase: str, conn: psycopg.Connection, into: list[tuple[LaneHits, float]]) -> None:
    """Run the phase's lanes that are switched on, into `into` (in the order they ran; the
    engine joins the phases in the registry's order)."""
    for lane in _RUN_ORDER[phase]:
        run_lane(call, lane, conn, into)


def run_lane(call: Call, lane: Lane | str, conn: psycopg.Connection, into: list[tuple[LaneHits, float]]) -> None:
    """Run one lane if it is switched on, into `into`."""
    lane = BY_NAME[lane] if isinstance(lane, str) else lane
    if not getattr(call.cfg, lane.name):
        call.stages[lane.name] = "off"
        return
    ran = lane.run(call, conn)
    if ran is not None:
        call.hits[lane.name] = ran[0]
        into.append(ran)
