"""Property: no sequence of index / search / get calls by agents of different
departments ever lets a caller read a record its scope hides - not in results,
not in total_found, not through get (a hidden id reads exactly like a missing one).

1,000+ random sequences (hypothesis) against one database. Visibility lives in
the SQL of the search lanes and of get, independent of the embedder, so a small
deterministic bag-of-words embedder (16 dims, hashed tokens) stands in for MiniLM
to keep 1,000 sequences within a minute or so; the keyword and vector lanes run
for real."""

from __future__ import annotations

import hashlib
import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from library_pipeline_tests.search_fixtures import create_database
from serving.memory import MemoryNotFound, Viewer, get_memory, index_memory, search_memory
from serving.search.types import SearchConfig

AGENTS = [Viewer("ag-a1", "dept-a"), Viewer("ag-a2", "dept-a"), Viewer("ag-b1", "dept-b"),
          Viewer("ag-b2", "dept-b"), Viewer("ag-solo", None)]
WORDS = ["falcon", "harbour", "ledger", "pricing", "seeding", "tiktok", "uae", "warehouse", "budget", "copper"]
CONFIG = SearchConfig(title=False, structure=False, summaries=False, rerank=False, log_queries=False,
                      label="property")


class HashEmbedder:
    name = "test-hash-bow-16"
    dims = 16
    max_tokens = 256

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dims, dtype=np.float32)
        for tok in re.findall(r"\w+", text.lower()):
            h = hashlib.blake2b(tok.encode(), digest_size=4).digest()
            v[h[0] % self.dims] += 1.0 if h[1] % 2 else -1.0
        v[0] += 0.01
        return v / np.linalg.norm(v)

    def encode_passages(self, texts):
        return np.stack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.dims), np.float32)

    encode_queries = encode_passages

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2


def visible(viewer: Viewer, rec: dict) -> bool:
    return (rec["scope"] == "global" or (rec["scope"] == "self" and rec["agent"] == viewer.agent)
            or (rec["scope"] == "department" and viewer.department is not None
                and rec["department"] == viewer.department))


class World:
    """Every record indexed so far, across examples (the database keeps them all)."""

    def __init__(self) -> None:
        self.records: dict[int, dict] = {}
        self.serial = itertools.count()
        self.checks = {"searches": 0, "results": 0, "hidden_gets": 0, "sequences": 0}


@pytest.fixture(scope="module")
def world(server_db):
    db = create_database(server_db)
    conn = db.connect(autocommit=True)
    yield conn, HashEmbedder(), World()
    conn.close()


agent_ix = st.integers(0, len(AGENTS) - 1)
index_op = st.tuples(st.just("index"), agent_ix, st.sampled_from(["self", "department", "global"]),
                     st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), st.booleans())
search_op = st.tuples(st.just("search"), agent_ix, st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
                      st.sampled_from([None, ["self"], ["department"], ["global"], ["self", "department"]]),
                      st.integers(1, 20))
get_op = st.tuples(st.just("get"), agent_ix, st.integers(0, 10_000))
sequences = st.lists(st.one_of(index_op, index_op, search_op, search_op, get_op), min_size=2, max_size=7)


@settings(max_examples=1000, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=sequences)
def test_no_sequence_reads_across_scopes(world, ops):
    conn, embedder, w = world
    w.checks["sequences"] += 1
    for op in ops:
        kind, viewer = op[0], AGENTS[op[1]]
        if kind == "index":
            _, _, scope, words, reuse = op
            if scope == "department" and viewer.department is None:
                continue
            # `reuse` re-sends an earlier text: exercises exact dedup across agents
            n = next(w.serial)
            text = " ".join(words) + ("" if reuse else f" uniq{n}")
            res = index_memory(conn, embedder, viewer, artifact_id=f"art-{n % 7}", content=text, scope=scope)
            rec = res.record
            assert visible(viewer, rec), ("index returned a record its writer may not see", rec, viewer)
            for old in [k for k, v in w.records.items()
                        if v["agent"] == viewer.agent and v["artifact_id"] == rec["artifact_id"] and k != rec["id"]]:
                if res.status in ("created", "new_version"):
                    w.records[old]["superseded"] = True
            w.records[rec["id"]] = {**{k: rec[k] for k in ("scope", "agent", "department", "artifact_id")},
                                    "superseded": rec["superseded"]}
        elif kind == "search":
            _, _, words, scopes, k = op
            flt = {"scope": scopes} if scopes else None
            out = search_memory(conn, embedder, viewer, " ".join(words), top_k=k, filter=flt, config=CONFIG)
            w.checks["searches"] += 1
            allowed = {i for i, r in w.records.items() if visible(viewer, r) and not r["superseded"]
                       and (not scopes or r["scope"] in scopes)}
            ids = [r["id"] for r in out["results"]]
            w.checks["results"] += len(ids)
            assert set(ids) <= allowed, ("search returned hidden records", set(ids) - allowed, viewer)
            for r in out["results"]:
                rec = w.records[r["id"]]
                assert visible(viewer, rec) and r["meta"]["scope"] == rec["scope"]
            assert out["returned"] == len(ids) <= k
            assert out["total_found"] <= len(allowed), ("total_found counts hidden rows", out["total_found"])
        else:
            _, _, pick = op
            if not w.records:
                continue
            target = sorted(w.records)[pick % len(w.records)]
            rec = w.records[target]
            if visible(viewer, rec):
                assert get_memory(conn, viewer, target)["id"] == target
            else:
                w.checks["hidden_gets"] += 1
                with pytest.raises(MemoryNotFound) as hidden:
                    get_memory(conn, viewer, target)
                with pytest.raises(MemoryNotFound) as missing:
                    get_memory(conn, viewer, 10**12 + target)
                assert (str(hidden.value).replace(str(target), "N")
                        == str(missing.value).replace(str(10**12 + target), "N"))


def test_the_property_run_was_not_vacuous(world):
    """Runs after the property test (same module, file order): it did real work."""
    _, _, w = world
    assert w.checks["sequences"] >= 1000, w.checks
    assert w.checks["searches"] > 500 and w.checks["results"] > 500 and w.checks["hidden_gets"] > 50, w.checks
    scopes = {r["scope"] for r in w.records.values()}
    assert scopes == {"self", "department", "global"}
