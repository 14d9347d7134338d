"""Memory curation through the Dagster assets (group "memory") with the clock
resource moving time forward: decay -> archive -> explicit search over 60
simulated days, promotion to global, retention to cold, near-dup merge, and the
"0 exact duplicates in global" check failing when a duplicate is forced in."""

import datetime as dt

import dagster as dg
import pytest

from library_pipeline.defs.memory import defs as memory_defs
from library_pipeline.defs.memory.assets import (MEMORY_ASSETS, MemoryClock, memory_decay, memory_near_duplicates,
                                                 memory_promotion, memory_retention, no_exact_duplicates_in_global)
from library_pipeline.memory import curation
from library_pipeline.resources import LibraryDatabase
from library_pipeline_tests.search_fixtures import create_database
from serving.settings import Settings
from serving.memory import Viewer, get_memory, index_memory, search_memory

A = Viewer("Agent-Scout", "marketing")
A2 = Viewer("Agent-Analyst", "marketing")
A3 = Viewer("Agent-Writer", "marketing")
B = Viewer("Agent-Ops", "operations")


@pytest.fixture()
def mdb(server_db):
    return create_database(server_db)


def _resources(mdb, **clock):
    return {"library_db": LibraryDatabase.from_settings(mdb.settings),
            "memory_clock": MemoryClock(**clock)}


def _run(mdb, assets, run_config=None, **clock) -> dg.ExecuteInProcessResult:
    result = dg.materialize(assets, resources=_resources(mdb, **clock), run_config=run_config or {},
                            raise_on_error=True)
    assert result.success
    return result


def _meta(result, asset) -> dict:
    mats = result.asset_materializations_for_node(asset.op.name)
    return {k: v.value for k, v in mats[-1].metadata.items()}


def _ids(res) -> list[int]:
    return [r["id"] for r in res["results"]]


def test_definitions_are_loadable(tmp_path):
    # library_db comes from library_pipeline/definitions.py when these defs are merged
    defs = dg.Definitions.merge(memory_defs, dg.Definitions(resources={"library_db": LibraryDatabase.from_settings(
        Settings(library_dir=tmp_path, home=tmp_path))}))
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {"memory_near_duplicates", "memory_decay", "memory_promotion", "memory_retention"}
    assert defs.resolve_schedule_def("memory_daily").cron_schedule == "30 3 * * *"
    assert defs.resolve_job_def("memory_curation") is not None
    assert all(a.group_names_by_key[a.key] == "memory" for a in MEMORY_ASSETS)


def test_decay_archives_after_60_simulated_days_and_explicit_search_finds_it(mdb, embedder):
    with mdb.connect(autocommit=True) as conn:
        old = index_memory(conn, embedder, A, artifact_id="stale", scope="global",
                           content="Quarterly shipping rates for the Dubai port, archived soon.").record["id"]
        fresh = index_memory(conn, embedder, A, artifact_id="fresh", scope="global",
                             content="Dubai port handling fees, a record that keeps being read.").record["id"]
        # a record that has already decayed for a while: two more steps archive it
        conn.execute("UPDATE memories SET relevance = 0.25 WHERE id = %s", (old,))
        base = dt.datetime.now(dt.timezone.utc)
        history = []
        for day in range(1, 61):
            now = base + dt.timedelta(days=day)
            if day % 20 == 0:  # `fresh` is read every 20 days: its inactivity clock restarts
                conn.execute("UPDATE memories SET accessed_at = %s, decay_steps = 0 WHERE id = %s", (now, fresh))
            out = curation.decay(conn, now)
            history.append((day, out.details["decayed"], out.details["archived"]))
        rel = dict(conn.execute("SELECT id, relevance FROM memories").fetchall())
        assert float(rel[old]) == pytest.approx(0.05) and float(rel[fresh]) == 1.0
        assert [d for d, dec, _ in history if dec] == [30, 60] and [d for d, _, arc in history if arc] == [60]
        assert conn.execute("SELECT archived_at IS NOT NULL FROM memories WHERE id = %s", (old,)).fetchone()[0]
        default = search_memory(conn, embedder, B, "Dubai port shipping rates", top_k=10)
        assert old not in _ids(default) and fresh in _ids(default)
        explicit = search_memory(conn, embedder, B, "Dubai port shipping rates", top_k=10,
                                 filter={"include_archived": True})
        assert old in _ids(explicit)
        assert explicit["results"][_ids(explicit).index(old)]["meta"]["archived"] is True
        assert conn.execute("SELECT count(*) FROM memories WHERE id = %s", (old,)).fetchone()[0] == 1  # kept
    # the same through the Dagster asset and the clock resource: one more period -> `fresh` decays
    result = _run(mdb, [memory_decay], offset_days=90)
    meta = _meta(result, memory_decay)
    assert meta["decayed"] == 1 and meta["archived"] == 0 and meta["total archived"] == 1


def test_promotion_to_global_with_reason(mdb, embedder):
    with mdb.connect(autocommit=True) as conn:
        rid = index_memory(conn, embedder, A, artifact_id="howto", scope="department",
                           content="How to book the Abu Dhabi influencer studio at half price.").record["id"]
        assert rid not in _ids(search_memory(conn, embedder, B, "Abu Dhabi influencer studio"))
        for viewer in (A, A2, A3, A2):
            assert rid in _ids(search_memory(conn, embedder, viewer, "Abu Dhabi influencer studio booking"))
    cfg = {"ops": {"memory_promotion": {"config": {"min_accesses": 4, "min_agents": 3}}}}
    result = _run(mdb, [memory_promotion], run_config=cfg)
    assert _meta(result, memory_promotion)["promoted"] == 1
    with mdb.connect(autocommit=True) as conn:
        scope, at, reason = conn.execute("SELECT scope, promoted_at, promoted_reason FROM memories WHERE id = %s",
                                         (rid,)).fetchone()
        assert scope == "global" and at is not None and "4 times by 3 distinct agents" in reason
        assert {r[0] for r in conn.execute("SELECT scope FROM passages WHERE memory_id = %s", (rid,))} == {"global"}
        found = search_memory(conn, embedder, B, "Abu Dhabi influencer studio")
        assert rid in _ids(found)
        assert found["results"][_ids(found).index(rid)]["meta"]["promoted"]["reason"] == reason
    # a second run changes nothing
    assert _meta(_run(mdb, [memory_promotion], run_config=cfg), memory_promotion)["changed"] == 0


def test_retention_moves_inactive_records_to_cold(mdb, embedder):
    with mdb.connect(autocommit=True) as conn:
        own = index_memory(conn, embedder, A, artifact_id="r-self", scope="self",
                           content="My private checklist for the Riyadh trade fair.").record["id"]
        dept = index_memory(conn, embedder, A, artifact_id="r-dept", scope="department",
                            content="Department notes on the Riyadh trade fair budget.").record["id"]
        glob = index_memory(conn, embedder, A, artifact_id="r-glob", scope="global",
                            content="Riyadh trade fair dates and venue, for everyone.").record["id"]
    meta = _meta(_run(mdb, [memory_retention], offset_days=91), memory_retention)
    assert meta["changed"] == 1 and meta["self"] == 1
    with mdb.connect(autocommit=True) as conn:
        tiers = dict(conn.execute("SELECT id, tier FROM memories").fetchall())
        assert (tiers[own], tiers[dept], tiers[glob]) == ("cold", "active", "active")
        default = search_memory(conn, embedder, A, "Riyadh trade fair checklist", top_k=10)
        assert own not in _ids(default) and dept in _ids(default)
        cold = search_memory(conn, embedder, A, "Riyadh trade fair checklist", top_k=10, filter={"include_cold": True})
        assert own in _ids(cold)
        assert get_memory(conn, A, own)["meta"]["tier"] == "cold"  # retrievable on request
    meta = _meta(_run(mdb, [memory_retention], offset_days=366 + 91), memory_retention)
    assert meta["changed"] == 1 and meta["department"] == 1
    with mdb.connect(autocommit=True) as conn:
        tiers = dict(conn.execute("SELECT id, tier FROM memories").fetchall())
        assert (tiers[dept], tiers[glob]) == ("cold", "active")  # global never expires


def test_near_duplicates_are_merged_not_deleted(mdb, embedder):
    with mdb.connect(autocommit=True) as conn:
        first = index_memory(conn, embedder, A, artifact_id="nd-1", scope="global", meta={"task_id": "t1"},
                             content="The competitor cut TikTok seeding prices in the UAE by 20 percent in April.")
        second = index_memory(conn, embedder, B, artifact_id="nd-2", scope="global", meta={"source": "ops"},
                              content="In April the competitor cut its TikTok seeding prices in the UAE by 20 percent.")
        other_scope = index_memory(conn, embedder, B, artifact_id="nd-3", scope="self",
                                   content="The competitor cut TikTok seeding prices in the UAE by 20% in April.")
        unrelated = index_memory(conn, embedder, A, artifact_id="nd-4", scope="global",
                                 content="Warehouse staff rota for the Sharjah depot next week.")
        assert second.status == "created"  # not an exact duplicate: caught by the asset
    cfg = {"ops": {"memory_near_duplicates": {"config": {"threshold": 0.9}}}}
    result = _run(mdb, [memory_near_duplicates], run_config=cfg)
    assert _meta(result, memory_near_duplicates)["changed"] == 1
    assert "keyword statistics recounted (s)" in _meta(result, memory_near_duplicates)
    with mdb.connect(autocommit=True) as conn:
        # the memory source's keyword statistics no longer count the merged duplicate
        counted = conn.execute("SELECT sum(passages) FROM lexeme_df_totals WHERE source = 'memory'").fetchone()[0]
        searchable = conn.execute("SELECT count(*) FROM passages WHERE source = 'memory' AND summary_level = 0 "
                                  "AND NOT superseded AND NOT archived AND NOT removed").fetchone()[0]
        assert counted == searchable == 3
        dup_of = dict(conn.execute("SELECT id, duplicate_of FROM memories").fetchall())
        assert dup_of[second.record["id"]] == first.record["id"]
        assert dup_of[other_scope.record["id"]] is None and dup_of[unrelated.record["id"]] is None
        meta = conn.execute("SELECT meta FROM memories WHERE id = %s", (first.record["id"],)).fetchone()[0]
        assert meta["task_id"] == "t1" and meta["source"] == "ops"
        assert meta["merged_duplicates"][0]["id"] == second.record["id"]
        assert "cosine" in meta["merged_duplicates"][0]["reason"]
        res = search_memory(conn, embedder, A, "TikTok seeding prices UAE April", top_k=10)
        assert first.record["id"] in _ids(res) and second.record["id"] not in _ids(res)
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 4  # nothing deleted
    # incremental: the next run examines nothing new
    assert _meta(_run(mdb, [memory_near_duplicates], run_config=cfg), memory_near_duplicates)["examined"] == 0


def test_invariant_check_fails_when_a_duplicate_is_forced_into_global(mdb, embedder):
    with mdb.connect(autocommit=True) as conn:
        index_memory(conn, embedder, A, artifact_id="inv-1", scope="global", content="Exactly one global copy.")
        again = index_memory(conn, embedder, B, artifact_id="inv-2", scope="global", content="exactly ONE global copy.")
        assert again.status == "duplicate"
    result = dg.materialize([memory_near_duplicates, no_exact_duplicates_in_global], resources=_resources(mdb))
    [ok] = result.get_asset_check_evaluations()
    assert ok.passed
    with mdb.connect(autocommit=True) as conn:  # bypass serving: a buggy writer or a manual INSERT
        conn.execute("INSERT INTO memories (artifact_id, agent, scope, content, content_hash) "
                     "VALUES ('forced', 'Agent-Rogue', 'global', '  Exactly one GLOBAL copy. ', 'not-the-real-hash')")
    result = dg.materialize([memory_near_duplicates, no_exact_duplicates_in_global], resources=_resources(mdb))
    [bad] = result.get_asset_check_evaluations()
    assert not bad.passed and bad.metadata["duplicate groups"].value == 1
