"""The nightly enrich schedule: one range run over every file, with the graph budget."""

from __future__ import annotations

import dagster as dg

from library_pipeline.defs.enrich import NIGHTLY_BUDGET, enrich_nightly


def test_nightly_schedule_requests_one_budgeted_range_run():
    with dg.instance_for_test() as instance:  # schedule contexts need a persistent instance
        empty = enrich_nightly(dg.build_schedule_context(instance=instance))
        assert isinstance(empty, dg.SkipReason)
        instance.add_dynamic_partitions("library_files", ["a~1", "b~2", "c~3"])
        request = enrich_nightly(dg.build_schedule_context(instance=instance))
    assert request.tags["dagster/asset_partition_range_start"] == "a~1"
    assert request.tags["dagster/asset_partition_range_end"] == "c~3"
    assert request.tags["library/lane"] == "enrich"
    assert request.run_config["ops"]["knowledge_graph"]["config"]["budget"] == NIGHTLY_BUDGET
