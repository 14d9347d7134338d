"""Enrichment follows ingestion: after `library ingest` (no enrich command), the
enrich assets' automation conditions request the new file's partitions; running
what they request builds the file's summary tree and graph; a second tick asks
for nothing; changing the file asks again. Real instance, real database, real
models, a real book from examples/library.

Also: the instance's dagster.yaml (pools, run limits) passes Dagster's own loader,
and the automation sensor runs by default in the enrich lane."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from library_pipeline.instance.home import ENRICH_POOL, LANE_TAG, POOLS, RUN_QUEUE, prepare_dagster_home
from library_pipeline.defs.enrich import enrich_automation
from library_pipeline.defs.enrich.assets import knowledge_graph, raptor_tree
from library_pipeline.ingest.extract import extract_file
from library_pipeline.launch.ingest_runner import run_ingest
from library_pipeline.cli.up import enrichment_progress
from library_pipeline_tests.conftest import SAMPLE_LIBRARY
from library_pipeline_tests.enrich_fixtures import partition_keys, run_assets

ALICE = SAMPLE_LIBRARY / "Carroll - Alice's Adventures in Wonderland.epub"


def _alice_chapter(target: Path, sections: slice = slice(4, 6)) -> Path:
    """Two chapters of the real Alice EPUB as a text file (~60 passages)."""
    book = extract_file(ALICE)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n\n".join(p.text for p in book.pages[sections]), encoding="utf-8")
    return target


def _requested(result, asset) -> set[str]:
    return set(result.get_requested_partitions(asset.key))


def test_an_ingest_brings_enrichment_without_a_command(make_db, tmp_path):
    from library_pipeline.definitions import defs

    library = tmp_path / "library"
    _alice_chapter(library / "alice.txt")
    db = make_db(library)
    with dg.instance_for_test() as instance:
        summary = run_ingest(db, progress=False, instance=instance)
        assert summary["ingested"] == 1, summary
        (key,) = partition_keys(db, ["alice.txt"])
        # what `library up` prints while the daemon works
        assert enrichment_progress(db).startswith("enrichment in progress: summary trees 0/1 files, graph 0/1 files")

        # the automation sensor's tick, evaluated as the daemon does
        tick = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        assert _requested(tick, raptor_tree) == {key}
        assert _requested(tick, knowledge_graph) == {key}
        # nothing else in the enrich group is left to an operator
        assert run_assets(db, instance, [raptor_tree, knowledge_graph], [key]).success

        with db.connect() as conn:
            built = conn.execute("SELECT count(*) FROM raptor_builds").fetchone()[0]
            done = conn.execute("SELECT count(*) FROM kg_progress WHERE completed_at IS NOT NULL").fetchone()[0]
            alice = conn.execute("SELECT mentions FROM entities WHERE name_norm ~ '^alice( @[0-9]+)?$'").fetchone()
        assert built == 1 and done == 1
        assert enrichment_progress(db).startswith("enrichment complete: summary trees 1/1 files, graph 1/1 files")
        assert alice is not None and alice[0] > 10

        # handled: the next tick asks for nothing
        again = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=tick.cursor)
        assert not _requested(again, raptor_tree) and not _requested(again, knowledge_graph)

        # a changed file is enriched again after its re-ingest
        text = (library / "alice.txt").read_text(encoding="utf-8")
        (library / "alice.txt").write_text(text + "\n\nAlice said goodbye to the Hatter.\n", encoding="utf-8")
        assert run_ingest(db, progress=False, instance=instance)["ingested"] == 1
        changed = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=again.cursor)
        assert _requested(changed, raptor_tree) == {key}
        assert _requested(changed, knowledge_graph) == {key}


def test_the_automation_sensor_runs_by_default_in_the_enrich_lane():
    from library_pipeline.definitions import defs

    repo = defs.get_repository_def()
    sensor = repo.get_sensor_def("enrich_follows_ingest")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.run_tags[LANE_TAG] == "enrich"
    graph = repo.asset_graph
    for asset in (raptor_tree, knowledge_graph):
        node = graph.get(asset.key)
        assert node.automation_condition is not None
        assert node.pools == {ENRICH_POOL}
    # exactly one automation sensor targets each enrich asset (Dagster refuses overlaps)
    assert sensor.asset_selection.resolve(graph) == {raptor_tree.key, knowledge_graph.key}


def test_instance_config_has_the_enrich_pool_and_passes_dagsters_loader(db, monkeypatch, tmp_path):
    from dagster._core.instance.config import dagster_instance_config

    prepared = prepare_dagster_home(db, tmp_path / "dagster")
    home = prepared.path
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    assert config["concurrency"] == {"runs": RUN_QUEUE, "pools": POOLS}
    assert "config" not in config["run_coordinator"]   # Dagster refuses run limits in both places
    loaded, _ = dagster_instance_config(str(home))
    assert loaded["concurrency"]["pools"]["default_limit"] == 1
    with prepared.instance() as instance:   # in this process: nothing from the environment
        assert instance.global_op_concurrency_default_limit == 1
    # a process that opens the home from disk (the daemon, a celery worker) gets what it
    # needs from its parent as its environment
    for name, value in prepared.env().items():
        monkeypatch.setenv(name, value)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.global_op_concurrency_default_limit == 1
