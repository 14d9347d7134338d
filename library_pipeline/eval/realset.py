"""A query set built from real use: `search_log` (library_search and memory_search
calls) -> deduplicated, PII-light queries for the pooled-judgment tool.

agent-library (github.com/CreateM1nd/agent-library)'s eval_real_set.py found that a week of its own agents'
queries ranked configurations differently from the synthetic set: real queries
are short, many are known-item lookups ("<title> <author>", a file name), some
are bare keywords, few are well-formed questions. `shape()` measures those
traits so a set's make-up is on record next to its scores (docs/migration.md).

PII-light: the exported file has query texts and counts only - no caller names,
departments, timestamps or result ids; e-mail addresses, URLs and long digit
runs (phone, card and account numbers) inside queries are replaced by
placeholders. It is "light": a name typed into a query stays.

Flow: `library eval real-set real.json` -> `library eval pool pool.json --queries
real.json` -> `library eval judge pool.json` -> `library eval score-pool pool.json`.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
import unicodedata
from collections import Counter
from typing import Any

import psycopg

# labels of the harness's own configurations: never real use (they also run with
# log_queries=False, this guards logs written before that existed)
SYNTHETIC_LABELS = ("eval", "regression", "bench", "migration-test", "memory-eval")

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.IGNORECASE)
_NUMBER = re.compile(r"\+?\d[\d\s().-]{5,}\d")
_QUESTION = re.compile(r"^(?:what|why|how|when|where|which|who|whom|whose|is|are|does|do|can|should|"
                       r"что|как|почему|когда|где|кто|какой|какая|какие)\b", re.IGNORECASE)


def scrub(text: str) -> str:
    """Placeholders for the PII a query most often carries by accident."""
    text = _EMAIL.sub("<email>", text)
    text = _URL.sub("<url>", text)
    # 7+ digits with separators: phone, card, account numbers (years and page numbers stay)
    return _NUMBER.sub(lambda m: "<number>" if sum(c.isdigit() for c in m.group()) >= 7 else m.group(), text)


def dedup_key(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _synthetic(config: str | None) -> bool:
    return bool(config) and any(config.startswith(p) for p in SYNTHETIC_LABELS)


def build_real_set(conn: psycopg.Connection, *, days: int | None = None, limit: int = 200,
                   min_count: int = 1, kinds: tuple[str, ...] = ("library", "memory")) -> dict[str, Any]:
    """Distinct logged queries, most asked first, with how often and by how many
    distinct callers (a number, never who)."""
    where = ["kind = ANY(%(kinds)s)"]
    if days:
        where.append("at >= now() - make_interval(days => %(days)s)")
    rows = conn.execute(
        f"SELECT query, kind, coalesce(caller_agent, '') || '/' || coalesce(caller_department, ''), returned, "
        f"lanes, config FROM search_log WHERE {' AND '.join(where)} ORDER BY id",
        {"kinds": list(kinds), "days": days}).fetchall()
    groups: dict[str, dict[str, Any]] = {}
    for query, kind, caller, returned, lanes, config in rows:
        if _synthetic(config) or not query.strip():
            continue
        g = groups.setdefault(dedup_key(query), {"forms": Counter(), "order": len(groups), "kinds": Counter(),
                                                 "callers": set(), "count": 0, "zero": 0, "title": 0})
        g["forms"][query.strip()] += 1
        g["kinds"][kind] += 1
        g["callers"].add(caller)
        g["count"] += 1
        g["zero"] += int(returned == 0)
        g["title"] += int(bool((lanes or {}).get("title")))
    ranked = sorted((g for g in groups.values() if g["count"] >= min_count),
                    key=lambda g: (-g["count"], g["order"]))[:limit]
    queries = []
    for i, g in enumerate(ranked, start=1):
        # the most used spelling; ties go to the first seen
        form = max(g["forms"].items(), key=lambda kv: kv[1])[0]
        text = scrub(form)
        queries.append({"id": f"real-{i}", "query": text, "count": g["count"], "callers": len(g["callers"]),
                        "kind": g["kinds"].most_common(1)[0][0],
                        "zero_result_share": round(g["zero"] / g["count"], 3),
                        "title_lane_share": round(g["title"] / g["count"], 3)})
    return {"version": 1, "created": dt.datetime.now(dt.timezone.utc).date().isoformat(), "source": "search_log",
            "days": days, "logged_searches": len(rows), "queries": queries, "shape": shape(queries)}


def shape(queries: list[dict[str, Any]]) -> dict[str, Any]:
    """What kind of queries a set holds: the traits by which real use differs from
    the well-formed questions of synthetic sets."""
    texts = [q["query"] for q in queries]
    if not texts:
        return {"queries": 0}
    words = [len(t.split()) for t in texts]
    n = len(texts)
    return {
        "queries": n,
        "mean_words": round(statistics.mean(words), 2),
        "median_words": statistics.median(words),
        "share_up_to_3_words": round(sum(w <= 3 for w in words) / n, 3),
        "share_questions": round(sum(t.rstrip().endswith("?") or bool(_QUESTION.match(t)) for t in texts) / n, 3),
        "share_non_ascii": round(sum(any(ord(c) > 127 for c in t) for t in texts) / n, 3),
        "share_title_lane_hits": round(sum(q.get("title_lane_share", 0) > 0 for q in queries) / n, 3),
        "share_zero_results": round(sum(q.get("zero_result_share", 0) > 0 for q in queries) / n, 3),
        "share_memory": round(sum(q.get("kind") == "memory" for q in queries) / n, 3),
        "share_asked_more_than_once": round(sum(q.get("count", 1) > 1 for q in queries) / n, 3),
    }
