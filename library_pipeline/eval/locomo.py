"""Agent memory on LoCoMo (ACL 2024): does a question bring back the turns that answer it?

A LoCoMo-shaped folder (library_pipeline.eval.locomo_data: the format, and an audit of
the answer key) is research-use data: nothing of it is ever copied into this repository;
the command and the asset check read it from where the user keeps it.

Two units, both through the path agents use (`index_memory` - what the MCP tool
memory_index runs - and `search_memory` top_k 10 as the agent), each in a database of
its own (`library_eval_locomo`, `…_sessions`; emptied first; never the user's library):

- **turns**: each conversation is one agent; each turn one record, its `content`, with
  the context an agent's client would send beside it in `meta` (`thread`: the session,
  `speaker`, `date`). Every question is asked by its conversation's agent; evidence
  recall@5, recall@10 and all-evidence@10 (every evidence turn in the top 10), overall
  and per category. The anchors run on the same turns in the same process, with the
  BEIR harness's own code (library_pipeline.eval.harness): bm25s, each dense model
  alone, naive RRF (k 60) of bm25s with each.
- **sessions** (basic-memory's LoCoMo protocol): one record per session (its turns
  joined), every conversation in one agent's index, a question's evidence mapped to its
  sessions; R@5 and MRR over sessions.

Metrics from ir-measures (library_pipeline.eval.metrics): R@5, R@10, RR@10; all@10 is R@10 = 1.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from ir_measures import RR, R

from library_pipeline.eval.beir import BeirDataset
from library_pipeline.eval.locomo_data import CATEGORIES, LocomoSet, session_notes, session_of, turn_meta
from library_pipeline.eval.metrics import per_query, ranking_to_run
from serving.db import Database
from serving.embedding import Embedder
from serving.lexemes import refresh_lexeme_df
from serving.memory.store import MEMORY_SEARCH_CONFIG, index_memory, search_memory
from serving.search.types import SearchConfig, Viewer

log = logging.getLogger(__name__)

TOP_K = 10
TURN_MEASURES = {"recall@5": R @ 5, "recall@10": R @ 10}
SESSION_MEASURES = {"R@5": R @ 5, "MRR": RR @ 10}
SESSIONS_AGENT = "locomo-sessions"
CLIENTS = 5   # agents indexing at once: one per conversation of the dev half
# the agents' memory configuration, unlogged: eval questions are not real use
EVAL_CONFIG = dataclasses.replace(MEMORY_SEARCH_CONFIG, log_queries=False, label="memory-locomo")


# -- loading through index_memory ---------------------------------------------------

def reset_memories(conn: psycopg.Connection) -> None:
    conn.execute("DELETE FROM passages WHERE source = 'memory'")
    conn.execute("DELETE FROM memory_access_log")
    conn.execute("DELETE FROM memories")
    conn.commit()


def load_turns(db: Database, embedder: Embedder, lset: LocomoSet, *, clients: int = 1,
               tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """Every turn one record of its conversation's agent, in conversation order; `clients`
    agents write at once (one conversation each at a time, each on its own connection), as
    agents beside one server do."""
    started = time.perf_counter()
    statuses: dict[str, int] = {}
    embed_ms: list[float] = []
    write_ms: list[float] = []
    lock = threading.Lock()

    def agent(conv: str) -> None:
        viewer = Viewer(agent=conv)
        with db.connect() as conn:
            for t in lset.turns[conv]:
                r = index_memory(conn, embedder, viewer, artifact_id=t["id"], content=t["content"], scope="self",
                                 meta=turn_meta(t))
                conn.commit()
                with lock:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
                    embed_ms.append((r.timings or {}).get("embed", 0.0))
                    write_ms.append((r.timings or {}).get("write", 0.0))
                    if tick:
                        tick()

    with ThreadPoolExecutor(max_workers=max(1, clients)) as pool:
        for done in [pool.submit(agent, conv) for conv in lset.turns]:
            done.result()
    seconds = time.perf_counter() - started
    n = sum(statuses.values())
    return {"records": n, "statuses": statuses, "seconds": round(seconds, 1), "clients": clients,
            "records_per_s": round(n / seconds, 1) if seconds else 0.0,
            "embed_p50_ms": percentile(embed_ms, 0.5), "write_p50_ms": percentile(write_ms, 0.5)}


def load_sessions(conn: psycopg.Connection, embedder: Embedder, notes: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    viewer = Viewer(agent=SESSIONS_AGENT)
    for key, text in notes.items():
        index_memory(conn, embedder, viewer, artifact_id=key, content=text, scope="self",
                     meta={"type": "session"})
        conn.commit()
    return {"records": len(notes), "seconds": round(time.perf_counter() - started, 1)}


# -- asking through search_memory ---------------------------------------------------

def _artifact_ids(conn: psycopg.Connection, ids: list[int]) -> dict[int, list[str]]:
    """record id -> the artifact ids it stands for (a duplicate turn is merged into the
    first record with the same content, which then answers for both)."""
    rows = conn.execute("SELECT id, artifact_id, meta FROM memories WHERE id = ANY(%s)", (ids,)).fetchall()
    return {i: [aid, *(e["artifact_id"] for e in (meta or {}).get("also_indexed_as") or [])]
            for i, aid, meta in rows}


def ask(conn: psycopg.Connection, embedder: Embedder, questions: list[tuple[str, str, str]], *,
        config: SearchConfig | None = None, top_k: int = TOP_K, thread_share: float | None = None,
        tick: Callable[[], None] | None = None) -> tuple[dict[str, list[str]], list[float]]:
    """(qid, agent, question) -> qid: artifact ids best first; and each search's milliseconds.
    `thread_share`: search_memory's (None = the shipped rule, 0 = every record read alone)."""
    rankings: dict[str, list[str]] = {}
    ms: list[float] = []
    for qid, agent, text in questions:
        t = time.perf_counter()
        out = search_memory(conn, embedder, Viewer(agent=agent), text, top_k=top_k, config=config or EVAL_CONFIG,
                            thread_share=thread_share)
        ms.append((time.perf_counter() - t) * 1000)
        ids = [r["id"] for r in out["results"] if r["source"] == "memory"]
        aids = _artifact_ids(conn, ids)
        conn.commit()
        ranking: list[str] = []
        for i in ids:
            ranking.extend(a for a in aids.get(i, []) if a not in ranking)
        rankings[qid] = ranking
        if tick:
            tick()
    return rankings, ms


# -- scoring ---------------------------------------------------------------------------

def turn_qrels(lset: LocomoSet) -> dict[str, dict[str, int]]:
    return {q["qid"]: {f"{q['conversation']}/{e}": 1 for e in q["evidence"]} for q in lset.questions}


def session_qrels(lset: LocomoSet) -> dict[str, dict[str, int]]:
    return {q["qid"]: {f"{q['conversation']}:{session_of(e)}": 1 for e in q["evidence"]} for q in lset.questions}


def score_turns(lset: LocomoSet, run: dict[str, dict[str, float]]) -> dict[str, Any]:
    """recall@5, recall@10, all@10 overall, and recall@10 / recall@5 per category."""
    values = per_query(turn_qrels(lset), run, TURN_MEASURES)
    values["all@10"] = {q: float(v >= 1.0 - 1e-9) for q, v in values["recall@10"].items()}
    out: dict[str, Any] = {k: _mean(v.values()) for k, v in values.items()}
    out["categories"] = {}
    for cat, name in CATEGORIES.items():
        qids = [q["qid"] for q in lset.questions if int(q["category"]) == cat]
        if qids:
            out["categories"][name] = {k: _mean(values[k][q] for q in qids) for k in values} | {"questions": len(qids)}
    out["per_query"] = values
    return out


def _mean(xs) -> float:
    xs = list(xs)
    return round(sum(xs) / len(xs), 4) if xs else 0.0


def turn_run(lset: LocomoSet, rankings: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    conv = {q["qid"]: q["conversation"] for q in lset.questions}
    return {qid: ranking_to_run([f"{conv[qid]}/{a}" for a in ranked]) for qid, ranked in rankings.items()}


def anchor_turn_runs(lset: LocomoSet, dense_models: list, *, cache_dir: Path | None = None
                     ) -> dict[str, dict[str, dict[str, float]]]:
    """The BEIR harness's anchors (bm25s, each dense model, naive RRF k 60 with bm25s), each
    conversation ranked on its own turns' `content`, as one run per anchor."""
    from library_pipeline.eval.harness import anchor_runs

    merged: dict[str, dict[str, dict[str, float]]] = {}
    for conv, turns in lset.turns.items():
        qs = [q for q in lset.questions if q["conversation"] == conv]
        if not qs:
            continue
        dataset = BeirDataset(name=f"{lset.name}-{conv}",
                              corpus={t["id"]: {"title": "", "text": t["content"]} for t in turns},
                              queries={q["qid"]: q["question"] for q in qs},
                              qrels={q["qid"]: {e: 1 for e in q["evidence"]} for q in qs}, split="dev")
        runs, _ = anchor_runs(dataset, dense_models, cache_dir=cache_dir, language="en")
        for name, run in runs.items():
            target = merged.setdefault(name, {})
            for qid, docs in run.items():
                target[qid] = {f"{conv}/{d}": s for d, s in docs.items()}
    return merged


@dataclass
class LocomoResult:
    dataset: str
    conversations: list[str]
    questions: int
    systems: dict[str, dict[str, Any]]          # "memory" and the anchors -> score_turns()
    sessions: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    answer_key: dict[str, Any] = field(default_factory=dict)   # LocomoSet.answer_key: {} = as published

    def to_json(self, per_query: bool = False) -> dict[str, Any]:
        systems = {n: {k: v for k, v in m.items() if per_query or k != "per_query"} for n, m in self.systems.items()}
        sessions = {k: v for k, v in self.sessions.items() if per_query or k != "per_query"}
        return {"dataset": self.dataset, "conversations": self.conversations, "questions": self.questions,
                "answer_key": self.answer_key or "as published", "systems": systems, "sessions": sessions,
                "timings": self.timings}


def percentile(ms: list[float], q: float) -> float:
    s = sorted(ms)
    return round(s[min(int(len(s) * q), len(s) - 1)], 1) if s else 0.0


def loaded_as(conn: psycopg.Connection, want: dict[str, int]) -> bool:
    """Whether the database holds what a load would write (agent -> records; other agents'
    records are invisible to the set's questions and may stay)."""
    have = dict(conn.execute("SELECT agent, count(*) FROM memories WHERE NOT superseded GROUP BY agent").fetchall())
    conn.commit()
    return all(have.get(agent) == n for agent, n in want.items())


def evaluate_locomo(db: Database, embedder: Embedder, lset: LocomoSet, *, dense_models: list | None = None,
                    sessions: bool = True, sessions_db: Database | None = None, config: SearchConfig | None = None,
                    cache_dir: Path | None = None, progress: bool = False, reuse: bool = False,
                    thread_share: float | None = None, clients: int = CLIENTS) -> LocomoResult:
    """Load `lset` into `db` (emptied first) through index_memory, ask every question through
    search_memory, score it beside the anchors; and the session unit when `sessions`, in
    `sessions_db` (default: `db`, after the turns). `reuse`: keep what an earlier run loaded
    when it is this set (loading the dev half takes minutes). `clients`: agents at once."""
    from tqdm import tqdm

    timings: dict[str, Any] = {}
    questions = [(q["qid"], q["conversation"], q["question"]) for q in lset.questions]
    notes = session_notes(lset) if sessions else {}
    together = sessions and (sessions_db is None or sessions_db is db)
    with db.connect() as conn:
        want = {conv: len(turns) for conv, turns in lset.turns.items()}
        if reuse and loaded_as(conn, want | ({SESSIONS_AGENT: len(notes)} if together else {})):
            timings["index"] = {"reused": True}
        else:
            reset_memories(conn)
            total = sum(len(t) for t in lset.turns.values())
            with tqdm(total=total, desc="index turns", unit="rec", disable=not progress) as bar:
                timings["index"] = load_turns(db, embedder, lset, clients=clients, tick=lambda: bar.update(1))
            if together:
                timings["index_sessions"] = load_sessions(conn, embedder, notes)
            # the steady state of a live library, where the lexeme_df asset has run since
            refresh_lexeme_df(conn)
            conn.commit()
        with tqdm(total=len(questions), desc="ask", unit="q", disable=not progress) as bar:
            rankings, ms = ask(conn, embedder, questions, config=config, thread_share=thread_share,
                               tick=lambda: bar.update(1))
        timings["search"] = {"p50_ms": percentile(ms, 0.5), "p95_ms": percentile(ms, 0.95)}
    systems = {"memory": score_turns(lset, turn_run(lset, rankings))}
    session_scores: dict[str, Any] = {}
    if sessions:
        with (db if together else sessions_db).connect() as conn:
            if not together:
                if reuse and loaded_as(conn, {SESSIONS_AGENT: len(notes)}):
                    timings["index_sessions"] = {"reused": True}
                else:
                    reset_memories(conn)
                    timings["index_sessions"] = load_sessions(conn, embedder, notes)
                    refresh_lexeme_df(conn)
                    conn.commit()
            asked = [(qid, SESSIONS_AGENT, text) for qid, _, text in questions]
            srank, sms = ask(conn, embedder, asked, config=config, thread_share=thread_share)
        values = per_query(session_qrels(lset), {q: ranking_to_run(r) for q, r in srank.items()},
                           SESSION_MEASURES)
        session_scores = {k: _mean(v.values()) for k, v in values.items()}
        session_scores["categories"] = {
            name: {k: _mean(values[k][q["qid"]] for q in lset.questions if int(q["category"]) == cat)
                   for k in values}
            for cat, name in CATEGORIES.items() if any(int(q["category"]) == cat for q in lset.questions)}
        session_scores["records"] = len(notes)
        session_scores["per_query"] = values
        timings["search_sessions"] = {"p50_ms": percentile(sms, 0.5), "p95_ms": percentile(sms, 0.95)}
    t = time.perf_counter()
    for name, run in anchor_turn_runs(lset, list(dense_models or []), cache_dir=cache_dir).items():
        systems[name] = score_turns(lset, run)
    timings["anchors_seconds"] = round(time.perf_counter() - t, 1)
    return LocomoResult(dataset=lset.name, conversations=lset.conversations, questions=len(lset.questions),
                        systems=systems, sessions=session_scores, timings=timings, answer_key=lset.answer_key)


def run_locomo_eval(base: Database | None, embedder: Embedder, lset: LocomoSet, *, dsn: str | None = None,
                    **kw: Any) -> LocomoResult:
    """`evaluate_locomo` in `library_eval_locomo` beside `base` (or `dsn`), the session unit
    in `library_eval_locomo_sessions` (with `dsn` or LIBRARY_EVAL_DSN: in that one database).
    Apart because one unit's records move the other's figures (the calibrated fusion's
    background sample is the database's): turn recall@10 0.7588 alone, 0.7665 beside
    windowed session notes, 0.7576 beside line-cut ones, turn search unchanged."""
    from library_pipeline.eval.beir import eval_database, release

    db = eval_database("locomo", dsn=dsn, base=base)
    given = dsn or db.settings.eval_dsn     # eval_database would give that database again
    sessions_db = eval_database("locomo_sessions", base=db) if kw.get("sessions", True) and not given else None
    try:
        return evaluate_locomo(db, embedder, lset, sessions_db=sessions_db, **kw)
    finally:
        if sessions_db is not None:
            release(sessions_db)
        release(db)
