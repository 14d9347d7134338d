"""Snapshot of the code location's shape, in the style of dagster-open-platform:
asset keys with their groups, partitions, kinds, owners, backfill and
automation policies and upstream keys; asset checks; sensors; schedules; jobs.

An accidental graph change (an asset that lost its partitions, a check that
moved, a sensor that stopped targeting its job) fails here with a readable
diff. An intended change is one command away:

    LIBRARY_UPDATE_SNAPSHOT=1 .venv/bin/pytest library_pipeline_tests/unit/test_definitions_snapshot.py

which rewrites `library_pipeline_tests/snapshots/definitions.json` from `library_pipeline.definitions.defs`;
review the diff and commit it with the change. Without that variable a missing
snapshot file fails the test (it is never written implicitly).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "definitions.json"
UPDATE_ENV = "LIBRARY_UPDATE_SNAPSHOT"


def _partitions(partitions_def) -> dict | None:
    if partitions_def is None:
        return None
    out: dict = {"type": type(partitions_def).__name__}
    name = getattr(partitions_def, "name", None)
    if name:
        out["name"] = name
    cron = getattr(partitions_def, "cron_schedule", None)
    if cron:
        out["cron"] = cron
    if isinstance(partitions_def, dg.StaticPartitionsDefinition):
        out["keys"] = partitions_def.get_partition_keys()
    return out


def _selection_keys(job) -> list[str] | None:
    """Asset keys an asset job materialises (None for op jobs)."""
    try:
        nodes = job.asset_layer.executable_asset_keys
    except AttributeError:
        return None
    return sorted(k.to_user_string() for k in nodes)


def definitions_snapshot(defs: dg.Definitions) -> dict:
    repo = defs.get_repository_def()
    graph = repo.asset_graph
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        if not node.is_materializable:
            continue
        condition = node.automation_condition
        assets[key.to_user_string()] = {
            "group": node.group_name,
            "partitions": _partitions(node.partitions_def),
            "kinds": sorted(node.kinds),
            "owners": sorted(node.owners),
            "backfill_policy": str(node.backfill_policy) if node.backfill_policy else None,
            "automation": (condition.get_label() or type(condition).__name__) if condition else None,
            "deps": sorted(p.to_user_string() for p in node.parent_keys),
            "has_description": bool(node.description),
        }
    checks = {}
    for ck in sorted(graph.asset_check_keys, key=lambda c: (c.asset_key.to_user_string(), c.name)):
        spec = graph.get_check_spec(ck) if hasattr(graph, "get_check_spec") else None
        checks[f"{ck.asset_key.to_user_string()}:{ck.name}"] = {
            "blocking": bool(getattr(spec, "blocking", False)),
        }
    sensors = {}
    for s in sorted(repo.sensor_defs, key=lambda s: s.name):
        sensors[s.name] = {
            "type": type(s).__name__,
            "default_status": s.default_status.value,
            "minimum_interval_seconds": s.minimum_interval_seconds,
            "jobs": sorted(t.job_name for t in s.targets),
        }
    schedules = {}
    for s in sorted(repo.schedule_defs, key=lambda s: s.name):
        schedules[s.name] = {
            "cron": s.cron_schedule if isinstance(s.cron_schedule, str) else list(s.cron_schedule),
            "timezone": s.execution_timezone,
            "default_status": s.default_status.value,
            "job": s.job_name,
        }
    jobs = {}
    for job in sorted(repo.get_all_jobs(), key=lambda j: j.name):
        if job.name.startswith("__"):
            continue  # Dagster's implicit asset job
        jobs[job.name] = {
            "assets": _selection_keys(job),
            "partitions": _partitions(job.partitions_def),
            "tags": {k: v for k, v in sorted(job.tags.items()) if not k.startswith("dagster/")},
        }
    return {"assets": assets, "asset_checks": checks, "sensors": sensors, "schedules": schedules, "jobs": jobs}


def test_definitions_match_snapshot():
    from library_pipeline.definitions import defs

    current = definitions_snapshot(defs)
    text = json.dumps(current, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get(UPDATE_ENV):
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(text, encoding="utf-8")
    # a missing file is a failure, not an expectation to write: a test that wrote
    # its own snapshot would pass on any graph in a clone that lost the file
    assert SNAPSHOT.exists(), (f"{SNAPSHOT} is missing: it is tracked in git. To write it from the "
                               f"current definitions: {UPDATE_ENV}=1 pytest {Path(__file__).name}")
    expected = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    for section in ("assets", "asset_checks", "sensors", "schedules", "jobs"):
        added = sorted(set(current[section]) - set(expected.get(section, {})))
        removed = sorted(set(expected.get(section, {})) - set(current[section]))
        changed = sorted(k for k in set(current[section]) & set(expected.get(section, {}))
                         if current[section][k] != expected[section][k])
        assert not (added or removed or changed), (
            f"{section} differ from {SNAPSHOT.name}: added {added}, removed {removed}, changed "
            + "; ".join(f"{k}: {expected[section][k]} -> {current[section][k]}" for k in changed)
            + f". If intended: {UPDATE_ENV}=1 pytest {Path(__file__).name}")


def test_snapshot_covers_the_ingest_stage():
    """Independent of the snapshot file: the invariants other stages build on."""
    from library_pipeline.definitions import defs

    snap = definitions_snapshot(defs)
    for key in ("extracted_text", "chunks", "embeddings"):
        asset = snap["assets"][key]
        assert asset["partitions"] == {"type": "DynamicPartitionsDefinition", "name": "library_files"}
        # batched backfills: one run per range, not one run per file
        assert asset["backfill_policy"].startswith("BackfillPolicy.single_run")
    assert snap["assets"]["lexeme_df"]["partitions"] is None
    assert snap["sensors"]["library_folder_sensor"]["jobs"] == ["ingest_files"]
    assert all(a["group"] and a["has_description"] and a["owners"] for a in snap["assets"].values())


def test_ops_defs_merge_into_the_location():
    """library_pipeline/defs/ops is merged into the location; it must merge cleanly and batch."""
    import datetime

    from library_pipeline.instance.home import LANE_TAG
    from library_pipeline.definitions import defs
    from library_pipeline.defs.ingest.sensors import RANGE_SIZE
    from library_pipeline.defs.ops import defs as ops_defs
    from library_pipeline.defs.ops import library_reconcile_schedule, reconcile_requests

    repo = dg.Definitions.merge(defs, ops_defs).get_repository_def()
    assert repo.get_schedule_def("library_reconcile_schedule").job_name == "ingest_files"
    assert repo.get_implicit_global_asset_job_def().executor_def.name == "in_process"
    requests = reconcile_requests([f"k{i}" for i in range(2 * RANGE_SIZE + 1)])
    assert len(requests) == 3 and all(r.tags[LANE_TAG] == "maintenance" for r in requests)
    assert requests[0].tags["dagster/asset_partition_range_end"] == f"k{RANGE_SIZE - 1}"
    with dg.instance_for_test() as instance:
        context = dg.build_schedule_context(instance=instance,
                                            scheduled_execution_time=datetime.datetime(2026, 11, 29, 3, 30))
        assert isinstance(library_reconcile_schedule(context), dg.SkipReason)
        instance.add_dynamic_partitions("library_files", ["a", "b"])
        (request,) = library_reconcile_schedule(context)
        assert request.run_key.startswith("20261129:")


def test_a_missing_snapshot_fails(monkeypatch, tmp_path):
    """Without LIBRARY_UPDATE_SNAPSHOT a missing file fails and nothing is written."""
    missing = tmp_path / "snapshots" / "definitions.json"
    monkeypatch.delenv(UPDATE_ENV, raising=False)
    monkeypatch.setitem(globals(), "SNAPSHOT", missing)
    with pytest.raises(AssertionError, match="is missing"):
        test_definitions_match_snapshot()
    assert not missing.exists()
