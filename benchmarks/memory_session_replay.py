"""The session unit's ranking rules scored in seconds (the companion of memory_replay.py):
each question's fused passage pool is captured once from the real `search_memory` over the
session notes (`library_eval_locomo_sessions`, agent `locomo-sessions`), with each passage's
record, position and text; then a note's score from its passages is replayed per variant.

    LIBRARY_HOME=... PYTHONPATH=. .venv/bin/python benchmarks/memory_session_replay.py \
        ../shared/data/locomo_dev --cache /tmp/memory_session_replay.pkl [--corrections errors.json]

The last rows add whole-note signals to the shipped score: a BM25 over whole notes (each
note one document; its constants picked leave one conversation out), the note's centroid,
and a logistic regression over all of them trained leave one conversation out.

The notes must already be loaded (`library eval memory ../shared/data/locomo_dev`); the
capture is kept in --cache and reused. The "shipped" row is what `library eval memory
--reuse` reports for the session unit (ties in score aside). Rows: R@5 and MRR@10 over
sessions, R@5 per category and per conversation.
"""

from __future__ import annotations

import math
import pickle
import statistics
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.memory_replay import answer_key, parse_args
from library_pipeline.eval.beir import eval_database
from library_pipeline.eval.locomo import EVAL_CONFIG, SESSIONS_AGENT
from library_pipeline.eval.locomo_data import CATEGORIES, load_locomo, session_of
from serving.memory import context as ctx
from serving.memory import store
from serving.search import engine
from serving.search.types import MAX_TOP_K, Viewer


def capture(folder: str, cache: Path) -> dict:
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    from library_pipeline.eval.cli import _embedder

    lset = load_locomo(folder)
    embedder = _embedder()
    db = eval_database("locomo_sessions")
    seen: list = []
    real = engine.search

    def spy(*a, **kw):
        resp = real(*a, **kw)
        seen.append(resp)
        return resp

    engine.search = spy
    pools, shipped = {}, {}
    try:
        with db.connect() as conn:
            rows = conn.execute(
                "SELECT m.id, m.artifact_id, m.chunks FROM memories m WHERE m.agent = %s AND NOT m.superseded",
                (SESSIONS_AGENT,)).fetchall()
            records = {rid: {"aid": aid, "chunks": chunks} for rid, aid, chunks in rows}
            passages = {pid: (mid, ordinal, content, heading) for pid, mid, ordinal, content, heading in conn.execute(
                "SELECT p.id, p.memory_id, p.ordinal, p.content, p.heading FROM passages p JOIN memories m "
                "ON m.id = p.memory_id WHERE m.agent = %s AND NOT p.superseded", (SESSIONS_AGENT,)).fetchall()}
            conn.commit()
            for q in lset.questions:
                seen.clear()
                out = store.search_memory(conn, embedder, Viewer(agent=SESSIONS_AGENT), q["question"],
                                          top_k=MAX_TOP_K, config=EVAL_CONFIG)
                conn.rollback()
                resp = seen[0]
                pools[q["qid"]] = {"query": resp.query, "pool": [(r.passage_id, r.score) for r in resp.results
                                                                  if r.source == "memory"]}
                shipped[q["qid"]] = [r["id"] for r in out["results"] if r["source"] == "memory"]
    finally:
        engine.search = real
    data = {"questions": lset.questions, "pools": pools, "records": records, "passages": passages,
            "shipped": shipped}
    cache.write_bytes(pickle.dumps(data))
    return data


def note_signals(data: dict, cache: Path) -> dict:
    """Added to the capture once: each note's lexeme counts (its passages' tsvectors added
    up) and each question's lexemes under the English configuration, for a BM25 over whole
    notes; each note's centroid (its passages' MiniLM vectors averaged) and each question's
    MiniLM vector."""
    if "centroids" not in data:
        from library_pipeline.eval.cli import _embedder

        db = eval_database("locomo_sessions")
        with db.connect() as conn:
            counts: dict[int, Counter] = {}
            for mid, lexeme, n in conn.execute(
                    "SELECT p.memory_id, (u).lexeme, coalesce(array_length((u).positions, 1), 1) FROM passages p "
                    "JOIN memories m ON m.id = p.memory_id, LATERAL unnest(p.tsv) u WHERE m.agent = %s "
                    "AND NOT p.superseded", (SESSIONS_AGENT,)):
                counts.setdefault(mid, Counter())[lexeme] += n
            data["lexemes"] = counts
            data["query_lexemes"] = {
                qid: conn.execute("SELECT coalesce(array_agg(lexeme), '{}') FROM unnest(to_tsvector('english', %s))",
                                  (p["query"],)).fetchone()[0] for qid, p in data["pools"].items()}
            vectors: dict[int, list] = {}
            for mid, vec in conn.execute(
                    "SELECT p.memory_id, p.embedding::text FROM passages p JOIN memories m ON m.id = p.memory_id "
                    "WHERE m.agent = %s AND NOT p.superseded AND p.embedding IS NOT NULL", (SESSIONS_AGENT,)):
                vectors.setdefault(mid, []).append(np.array([float(v) for v in vec.strip("[]").split(",")]))
        data["centroids"] = {mid: (c := np.mean(vs, axis=0)) / np.linalg.norm(c) for mid, vs in vectors.items()}
        qids = list(data["pools"])
        data["query_vectors"] = dict(zip(qids, _embedder().encode_queries([data["pools"][q]["query"] for q in qids])))
        cache.write_bytes(pickle.dumps(data))
    return data


def z_scores(scores: dict[int, float]) -> dict[int, float]:
    mean, sd = statistics.fmean(scores.values()), statistics.pstdev(scores.values()) or 1.0
    return {m: (s - mean) / sd for m, s in scores.items()}


def note_centroid(data: dict) -> dict[str, dict[int, float]]:
    """qid -> note id -> z-score (over every note) of the question's cosine to the note's centroid."""
    return {qid: z_scores({m: float(c @ qv) for m, c in data["centroids"].items()})
            for qid, qv in data["query_vectors"].items()}


def whole_note_bm25(data: dict, k1: float, b: float) -> dict[str, dict[int, float]]:
    """qid -> note id -> z-score (over every note) of the question's BM25 against the whole
    note, the notes as the documents (df, N and average length counted over notes)."""
    counts = data["lexemes"]
    df = Counter(lex for c in counts.values() for lex in c)
    size = {m: sum(c.values()) for m, c in counts.items()}
    avg = sum(size.values()) / len(size)
    out = {}
    for qid, lexemes in data["query_lexemes"].items():
        scores = {}
        for m, c in counts.items():
            norm = k1 * (1 - b + b * size[m] / avg)
            scores[m] = sum(math.log(1 + (len(counts) - df[x] + 0.5) / (df[x] + 0.5)) * c[x] * (k1 + 1)
                            / (c[x] + norm) for x in lexemes if c[x])
        out[qid] = z_scores(scores)
    return out


def with_note_signal(data: dict, note_score, z: dict[str, dict[int, float]], weight: float) -> dict[str, list[int]]:
    """rank() with each pooled note's score raised by weight x 0.1 x the best note's score
    x its z-score under a whole-note signal (whole_note_bm25, note_centroid)."""
    def raise_by(qid: str, scores: dict[int, float]) -> dict[int, float]:
        top = max(scores.values(), default=1.0)
        return {rid: s + weight * 0.1 * top * z[qid].get(rid, 0.0) for rid, s in scores.items()}
    return rank(data, note_score, raise_by)


def learned(data: dict, bm25_z: dict, centroid_z: dict, c: float) -> dict[str, list[int]]:
    """The pooled notes ordered by a logistic regression (regularisation C = c) over the
    note's three best weighed passages and the rest summed (each against the question's best
    note), its best unweighed passage, its passage count, the shipped score, the whole-note
    BM25 and centroid z-scores; trained on four conversations, ranking the fifth's questions."""
    from sklearn.linear_model import LogisticRegression

    passages, records = data["passages"], data["records"]
    rows: dict[str, list] = {}
    for q in data["questions"]:
        qid, p = q["qid"], data["pools"][q["qid"]]
        gold = {f"{q['conversation']}:{session_of(e)}" for e in q["evidence"]}
        per: dict[int, list] = {}
        for pid, s in p["pool"]:
            per.setdefault(passages[pid][0], []).append((passages[pid][2], s))
        named = ctx.named_speaker(p["query"], ctx.line_speakers([passages[pid][2] for pid, _ in p["pool"]]))
        shipped_scores = {rid: store.record_score([s * ctx.lines_weight(t, named) for t, s in ps])
                          for rid, ps in per.items()}
        top = max(shipped_scores.values())
        rows[qid] = []
        for rid, ps in per.items():
            w = sorted((s * ctx.lines_weight(t, named) for t, s in ps), reverse=True) + [0.0] * 3
            rows[qid].append((rid, [w[0] / top, w[1] / top, w[2] / top, sum(w[3:]) / top,
                                    max(s for _, s in ps) / top, len(ps) / 10, shipped_scores[rid] / top,
                                    bm25_z[qid].get(rid, 0.0), centroid_z[qid].get(rid, 0.0)],
                              records[rid]["aid"] in gold))
    out: dict[str, list[int]] = {}
    for conv in sorted({q["conversation"] for q in data["questions"]}):
        train = [r for q in data["questions"] if q["conversation"] != conv for r in rows[q["qid"]]]
        model = LogisticRegression(C=c, max_iter=2000).fit(np.array([f for _, f, _ in train]),
                                                          np.array([int(g) for _, _, g in train]))
        for q in data["questions"]:
            if q["conversation"] == conv:
                r = rows[q["qid"]]
                s = model.decision_function(np.array([f for _, f, _ in r]))
                out[q["qid"]] = [rid for (rid, _, _), _ in sorted(zip(r, s), key=lambda x: -x[1])]
    return out


def rank(data: dict, note_score, adjust=None) -> dict[str, list[int]]:
    """qid -> record ids best first; note_score(named, [(passage text, fused score)] of one
    record) -> the record's score, `named` the speaker the query names among the labels of
    the pool's lines (context.named_speaker over context.line_speakers); adjust(qid, scores)
    -> the scores changed by a whole-note signal."""
    out = {}
    passages = data["passages"]
    for qid, p in data["pools"].items():
        per: dict[int, list] = {}
        for pid, s in p["pool"]:
            per.setdefault(passages[pid][0], []).append((passages[pid][2], s))
        named = ctx.named_speaker(p["query"], ctx.line_speakers([passages[pid][2] for pid, _ in p["pool"]]))
        scores = {rid: note_score(named, ps) for rid, ps in per.items()}
        if adjust is not None:
            scores = adjust(qid, scores)
        out[qid] = [rid for rid, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))]
    return out


def metrics(data: dict, ranked: dict[str, list[int]]) -> dict:
    records = data["records"]
    per = {}
    for q in data["questions"]:
        gold = {f"{q['conversation']}:{session_of(e)}" for e in q["evidence"]}
        ids = [records[r]["aid"] for r in ranked[q["qid"]]]
        r5 = len(set(ids[:5]) & gold) / len(gold)
        rr = next((1 / (i + 1) for i, a in enumerate(ids[:10]) if a in gold), 0.0)
        per[q["qid"]] = (r5, rr)
    return per


def score(data: dict, ranked: dict[str, list[int]], label: str) -> float:
    per = metrics(data, ranked)
    qs = data["questions"]

    def mean(sub, i=0):
        return sum(per[q["qid"]][i] for q in sub) / len(sub)

    cats = " ".join(f"{name[:5]} {mean([q for q in qs if int(q['category']) == c]):.3f}"
                    for c, name in CATEGORIES.items())
    convs = " ".join(f"{c[5:]} {mean([q for q in qs if q['conversation'] == c]):.3f}"
                     for c in sorted({q["conversation"] for q in qs}))
    print(f"{label:34s} R@5 {mean(qs):.4f} MRR {mean(qs, 1):.4f} | {cats} | {convs}", flush=True)
    return mean(qs)


def weighed(other: float, asking: float, weights=None):
    """The note's score with its lines weighed at these constants (context.lines_weight)."""
    def rule(named, ps):
        ctx.OTHER_SPEAKER, ctx.ASKING = other, asking
        try:
            scores = [s * ctx.lines_weight(t, named) for t, s in ps]
        finally:
            ctx.OTHER_SPEAKER, ctx.ASKING = shipped
        if weights is None:
            return store.record_score(scores)
        return sum(w * s for w, s in zip(weights, sorted(scores, reverse=True)))
    return rule


shipped = (ctx.OTHER_SPEAKER, ctx.ASKING)


def main() -> None:
    args = parse_args(__doc__, "/tmp/memory_session_replay.pkl")
    data = answer_key(capture(args.folder, args.cache), args)
    score(data, data["shipped"], "search_memory as captured")
    score(data, rank(data, lambda named, ps: max(s for _, s in ps)), "best passage")
    score(data, rank(data, weighed(1.0, 1.0)), "best + 1/2 + 1/4, lines unweighed")
    score(data, rank(data, weighed(shipped[0], 1.0)), "speaker weight only")
    score(data, rank(data, weighed(1.0, shipped[1])), "asking weight only")
    score(data, rank(data, weighed(*shipped)), "shipped")
    for other in (0.0, 0.3, 0.7):
        score(data, rank(data, weighed(other, shipped[1])), f"speaker {other}, asking {shipped[1]}")
    for asking in (0.0, 0.3, 0.7):
        score(data, rank(data, weighed(shipped[0], asking)), f"speaker {shipped[0]}, asking {asking}")
    for weights in ((1.0,), (1.0, 0.5, 0.25, 0.125), (1.0, 1.0, 1.0)):
        score(data, rank(data, weighed(*shipped, weights=weights)), f"shipped weights, passages {weights}")
    # the note as the keyword lane's document: BM25 over whole notes beside the passages' fusion
    data = answer_key(note_signals(capture(args.folder, args.cache), args.cache), args)
    variants = {}
    for k1 in (0.6, 1.2, 2.0):
        for b in (0.3, 0.75, 1.0):
            z = whole_note_bm25(data, k1, b)
            for weight in (0.5, 1.0, 1.5):
                variants[(k1, b, weight)] = with_note_signal(data, weighed(*shipped), z, weight)
    for key in ((1.2, 0.75, 0.5), (1.2, 0.75, 1.0), (2.0, 1.0, 1.0)):
        score(data, variants[key], f"whole-note BM25 k1 {key[0]} b {key[1]} x{key[2]}")
    per = {key: metrics(data, ranked) for key, ranked in variants.items()}
    held, picks = {}, []
    for conv in sorted({q["conversation"] for q in data["questions"]}):
        train = [q["qid"] for q in data["questions"] if q["conversation"] != conv]
        best = max(variants, key=lambda key: sum(per[key][qid][0] for qid in train))
        picks.append(f"{conv} {best}")
        held.update({q["qid"]: variants[best][q["qid"]] for q in data["questions"] if q["conversation"] == conv})
    print("picked on the other conversations: " + ", ".join(picks), flush=True)
    score(data, held, "whole-note BM25, held out")
    centroid = note_centroid(data)
    for weight in (0.25, 0.5, 1.0, 2.0):
        score(data, with_note_signal(data, weighed(*shipped), centroid, weight), f"note centroid x{weight}")
    bm25_z = whole_note_bm25(data, 1.2, 0.75)
    for c in (0.01, 0.1, 1.0, 10.0):
        score(data, learned(data, bm25_z, centroid, c), f"logistic regression C {c}, held out")


if __name__ == "__main__":
    main()
