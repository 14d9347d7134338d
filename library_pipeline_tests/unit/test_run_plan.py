"""The one range planner (library_pipeline.launch.run_plan) as the sensors, runners and the
reconcile schedule use it."""

from __future__ import annotations

from library_pipeline.defs.ingest.sensors import plan_runs
from library_pipeline.defs.vault.sensors import plan_run_requests
from library_pipeline.launch.run_plan import (
    MAX_SINGLE_REQUESTS,
    RANGE_END_TAG,
    RANGE_SIZE,
    RANGE_START_TAG,
    contiguous_spans,
    plan_ranges,
)
from library_pipeline.vault.sync import AppliedSync

ORDER = [f"k{i:04d}" for i in range(1000)]


def test_a_handful_of_keys_run_one_each_in_given_order_without_repeats():
    assert plan_ranges(["k0009", "k0002", "k0009"], ORDER) == [["k0009"], ["k0002"]]


def test_many_scattered_keys_run_as_the_span_covering_them():
    keys = [ORDER[i] for i in range(700, 100, -20)]   # 30 keys, given out of order
    assert len(keys) > MAX_SINGLE_REQUESTS
    parts = plan_ranges(keys, ORDER)
    assert [p[0] for p in parts] == ["k0120", "k0320", "k0520"] and parts[-1][-1] == "k0700"
    assert all(len(p) <= RANGE_SIZE for p in parts) and sum(map(len, parts)) == 700 - 120 + 1


def test_ingest_sensor_requests():
    requests = plan_runs(ORDER[:450], [ORDER[500], ORDER[900]], ORDER)
    ranges = [r for r in requests if r.partition_key is None]
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in ranges] == [
        ("k0000", "k0199"), ("k0200", "k0399"), ("k0400", "k0449")]
    assert [r.partition_key for r in requests if r.partition_key] == ["k0500", "k0900"]
    assert len({r.run_key for r in requests}) == len(requests)


def test_vault_sensor_requests():
    few = plan_run_requests(AppliedSync(sync_id=7, keys=["k0003", "k0001"], old_keys=[], removed=0, renamed=0), "abc", ORDER)
    assert [r.partition_key for r in few] == ["k0003", "k0001"]
    assert [r.run_key.rsplit(":", 1)[0] for r in few] == ["vault:7:k0003", "vault:7:k0001"]
    many = plan_run_requests(AppliedSync(sync_id=8, keys=ORDER[10:410:10], old_keys=[], removed=0, renamed=0), "abc", ORDER)
    assert [(r.tags[RANGE_START_TAG], r.tags[RANGE_END_TAG]) for r in many] == [
        ("k0010", "k0209"), ("k0210", "k0400")]
    assert many[1].run_key.startswith("vault:8:k0210:k0400:") and many[0].tags["vault/commit"] == "abc"
    # every run of a sync says why it ran, as every other run does
    assert {r.tags["library/reason"] for r in few + many} == {"sensor"}


def test_cli_spans_join_keys_up_to_three_apart():
    assert contiguous_spans(["k0001", "k0004", "k0009"], ORDER, 50) == [["k0001", "k0002", "k0003", "k0004"],
                                                                       ["k0009"]]
    assert [len(s) for s in contiguous_spans(ORDER[:120], ORDER, 50)] == [50, 50, 20]


def test_every_run_carries_its_partition_reason_and_lane_once():
    from library_pipeline.launch import plans as launch
    from library_pipeline.launch.run_plan import ENRICH_LANE

    plan = launch.enrich_plan(ORDER[:3], "nightly")
    assert launch.run_tags(plan, ORDER[:3]) == {RANGE_START_TAG: "k0000", RANGE_END_TAG: "k0002",
                                                "library/reason": "nightly", **ENRICH_LANE}
    assert launch.run_tags(plan, ["k0007"]) == {"dagster/partition": "k0007", "library/reason": "nightly",
                                                **ENRICH_LANE}
    (request,) = launch.run_requests(plan)
    assert request.run_key is None and request.job_name == "enrich_files"
    assert request.tags == launch.run_tags(plan, ORDER[:3])


def test_in_process_runs_are_followed_by_what_automation_runs_after_the_job(tmp_path):
    """`library ingest` and `library vault sync` refresh the corpus statistics and the
    first vector indexes because the daemon's automation would: taken from the location."""
    from library_pipeline.launch import plans as launch
    from library_pipeline.definitions import build_definitions
    from serving.settings import Settings

    defs = build_definitions(Settings(library_dir=tmp_path / "library", home=tmp_path / "home"))
    for job in (launch.INGEST_JOB, launch.VAULT_JOB):
        assert [k.to_user_string() for k in launch.follow_ups(defs, job)] == ["lexeme_df", "vector_indexes"]
    assert launch.follow_ups(defs, launch.ENRICH_JOB) == []
