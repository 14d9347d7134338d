"""Memory-search re-ranking rules on LoCoMo scored in seconds: each question's pool is
captured once from the real `search_memory` with every record read alone (thread_share 0:
the records' fused scores, before thread context), with every live record of the agents
(thread, speaker, first passage); then thread context (serving/memory/context.py's rule,
re-done over the captured thread order) and the turn weights (`turn_weight` /
`named_speaker` / `typical_length` themselves, their constants swept; the turn-length exponent
also chosen leave-one-conversation-out) are replayed per variant.

    LIBRARY_HOME=... PYTHONPATH=. .venv/bin/python benchmarks/memory_replay.py \
        ../shared/data/locomo_dev --cache /tmp/memory_replay.pkl [--corrections errors.json]

The turns must already be loaded (`library eval memory ../shared/data/locomo_dev`, the
database `library_eval_locomo`); the capture is kept in --cache and reused. The shipped
row is what `library eval memory --reuse --no-sessions` reports to four places (ties in
score aside). Rows: evidence recall@10 and @5, recall@10 per category and per conversation.
"""

from __future__ import annotations

import argparse
import logging
import pickle
from pathlib import Path

from library_pipeline.eval.beir import eval_database
from library_pipeline.eval.cli import _embedder
from library_pipeline.eval.locomo import EVAL_CONFIG
from library_pipeline.eval.locomo_data import CATEGORIES, load_locomo
from serving.memory import context as ctx
from serving.memory.store import search_memory
from serving.search.types import MAX_TOP_K, Viewer


def capture(folder: str, cache: Path) -> dict:
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    lset = load_locomo(folder)
    embedder = _embedder()
    db = eval_database("locomo")
    pools, records = {}, {}
    with db.connect() as conn:
        for conv in lset.conversations:
            rows = conn.execute(
                "SELECT m.id, m.artifact_id, m.meta, m.chunks, (SELECT p.content FROM passages p WHERE p.memory_id "
                "= m.id AND NOT p.superseded ORDER BY p.ordinal LIMIT 1) FROM memories m WHERE m.agent = %s AND NOT "
                "m.superseded AND m.archived_at IS NULL AND m.duplicate_of IS NULL AND m.tier = 'active' ORDER BY m.id",
                (conv,)).fetchall()
            for rid, aid, meta, chunks, first in rows:
                meta = meta or {}
                records[rid] = {"conv": conv, "meta": meta, "chunks": chunks, "content": first or "",
                                "aids": [aid, *(e["artifact_id"] for e in meta.get("also_indexed_as") or [])]}
        conn.commit()
        for q in lset.questions:
            out = search_memory(conn, embedder, Viewer(agent=q["conversation"]), q["question"], top_k=MAX_TOP_K,
                                config=EVAL_CONFIG, thread_share=0.0)
            conn.rollback()
            pools[q["qid"]] = {"query": out["query"], "pool": [(r["id"], r["score"], r["content"]) for r in
                                                                out["results"] if r["source"] == "memory"]}
    data = {"questions": lset.questions, "pools": pools, "records": records}
    cache.write_bytes(pickle.dumps(data))
    return data


def replay(data: dict, *, share: float, window: int, other_speaker: float, asking: float,
           length: float = ctx.TURN_LENGTH) -> dict[str, list[int]]:
    """qid -> record ids best first, as search_memory ranks them under these constants."""
    records = data["records"]
    threads: dict[tuple, list[int]] = {}
    for rid in sorted(records):
        thread = records[rid]["meta"].get("thread")
        if thread is not None:
            threads.setdefault((records[rid]["conv"], thread), []).append(rid)
    where = {rid: (key, i) for key, ids in threads.items() for i, rid in enumerate(ids)}
    ctx.OTHER_SPEAKER, ctx.ASKING, ctx.TURN_LENGTH = other_speaker, asking, length
    out = {}
    for qid, p in data["pools"].items():
        base = {rid: score for rid, score, _ in p["pool"]}
        content = {rid: text for rid, _, text in p["pool"]}
        total = dict(base)
        if share > 0:
            gains: dict[int, float] = {}
            for rid, score in base.items():
                if rid not in where:
                    continue
                key, i = where[rid]
                ids = threads[key]
                for d in range(1, window + 1):
                    for j in (i - d, i + d):
                        if 0 <= j < len(ids):
                            gain = share * score / 2 ** (d - 1)
                            if gain > gains.get(ids[j], 0.0):
                                gains[ids[j]] = gain
            for nid, gain in gains.items():
                total[nid] = total.get(nid, 0.0) + gain
            named = ctx.named_speaker(p["query"], {records[r]["meta"]["speaker"] for r in total
                                                   if "thread" in records[r]["meta"]
                                                   and isinstance(records[r]["meta"].get("speaker"), str)})
            typical = ctx.typical_length([content.get(r, records[r]["content"]) for r in total
                                          if "thread" in records[r]["meta"] and records[r]["chunks"] == 1])
            for rid in total:
                rec = records[rid]
                total[rid] *= ctx.turn_weight(content.get(rid, rec["content"]), rec["meta"], named,
                                              whole=rec["chunks"] == 1, typical=typical)
        out[qid] = [rid for rid, _ in sorted(total.items(), key=lambda x: (-x[1], x[0]))]
    return out


def recall(data: dict, ranked: dict[str, list[int]], q: dict, k: int = 10) -> float:
    found = {a for rid in ranked[q["qid"]][:k] for a in data["records"][rid]["aids"]} & set(q["evidence"])
    return len(found) / len(set(q["evidence"]))


def leave_one_conversation_out(data: dict, variants: dict[str, dict[str, list[int]]]) -> dict[str, list[int]]:
    """Cross-validation of a constant over the conversations: for each conversation, the
    variant with the best recall@10 on the others ranks its questions. Returns that held-out
    ranking and prints each fold's pick."""
    held: dict[str, list[int]] = {}
    picks = []
    for conv in sorted({q["conversation"] for q in data["questions"]}):
        train = [q for q in data["questions"] if q["conversation"] != conv]
        best = max(variants, key=lambda v: sum(recall(data, variants[v], q) for q in train))
        picks.append(f"{conv} {best}")
        held.update({q["qid"]: variants[best][q["qid"]] for q in data["questions"] if q["conversation"] == conv})
    print("picked on the other conversations: " + ", ".join(picks), flush=True)
    return held


def score(data: dict, ranked: dict[str, list[int]], label: str) -> None:
    questions = data["questions"]

    def recall(q: dict, k: int) -> float:
        return globals()["recall"](data, ranked, q, k)

    def mean(qs: list[dict], k: int = 10) -> float:
        return sum(recall(q, k) for q in qs) / len(qs)

    cats = " ".join(f"{name} {mean([q for q in questions if int(q['category']) == c]):.3f}"
                    for c, name in CATEGORIES.items())
    convs = " ".join(f"{c} {mean([q for q in questions if q['conversation'] == c]):.3f}"
                     for c in sorted({q["conversation"] for q in questions}))
    print(f"{label:32s} R@10 {mean(questions):.4f} R@5 {mean(questions, 5):.4f} | {cats} | {convs}", flush=True)


def parse_args(doc: str, cache: str) -> argparse.Namespace:
    """The replay scripts' command line: the LoCoMo-shaped folder, the capture's cache file,
    an audit of the answer key (`library eval memory --corrections`)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--cache", type=Path, default=Path(cache))
    ap.add_argument("--corrections", type=Path, default=None,
                    help="score against the audited answer key (the capture itself does not depend on it)")
    args = ap.parse_args()
    logging.getLogger("serving").setLevel(logging.WARNING)
    return args


def answer_key(data: dict, args: argparse.Namespace) -> dict:
    """The capture scored against the audited key when --corrections is given: the questions
    (and their evidence) re-read with the audit applied; a question it drops is not scored."""
    if args.corrections is None:
        return data
    return {**data, "questions": load_locomo(args.folder, corrections=args.corrections).questions}


def main() -> None:
    args = parse_args(__doc__, "/tmp/memory_replay.pkl")
    data = answer_key(capture(args.folder, args.cache), args)
    shipped = {"share": ctx.NEIGHBOUR_SHARE, "window": ctx.WINDOW, "other_speaker": ctx.OTHER_SPEAKER,
               "asking": ctx.ASKING, "length": ctx.TURN_LENGTH}
    score(data, replay(data, **{**shipped, "share": 0.0}), "records alone")
    score(data, replay(data, **{**shipped, "other_speaker": 1.0, "asking": 1.0, "length": 0.0}),
          "thread context, no weights")
    score(data, replay(data, **{**shipped, "asking": 1.0, "length": 0.0}), "speaker weight only")
    score(data, replay(data, **{**shipped, "other_speaker": 1.0, "length": 0.0}), "asking weight only")
    score(data, replay(data, **{**shipped, "length": 0.0}), "speaker and asking weights")
    score(data, replay(data, **shipped), "shipped")
    for other in (0.0, 0.3, 0.4, 0.6):
        score(data, replay(data, **{**shipped, "other_speaker": other}),
              f"speaker {other}, asking {shipped['asking']}")
    for asking in (0.4, 0.6, 0.7):
        score(data, replay(data, **{**shipped, "asking": asking}),
              f"speaker {shipped['other_speaker']}, asking {asking}")
    lengths = {}
    for length in (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.75, 1.0):
        lengths[f"length {length}"] = replay(data, **{**shipped, "length": length})
        score(data, lengths[f"length {length}"], f"turn length {length}")
    score(data, leave_one_conversation_out(data, lengths), "turn length, held out")


if __name__ == "__main__":
    main()
