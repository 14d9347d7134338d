"""The library-folder sensor (with build_sensor_context against a real
instance and database) and the code location as Dagster loads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from library_pipeline.defs.ingest.partitions import partition_key_for
from library_pipeline.defs.ingest.sensors import RANGE_SIZE, library_folder_sensor
from library_pipeline.resources import LibraryDatabase
from library_pipeline_tests.ingest_helpers import doc_rows, ingest, write

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def instance():
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def tick(instance, db, cursor=None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources={"library_db": LibraryDatabase.from_settings(db.settings)}) as ctx:
        return library_folder_sensor(ctx)


def test_first_tick_batches_new_files_into_range_runs(make_db, instance):
    db = make_db()
    n = RANGE_SIZE + 5
    for i in range(n):
        write(db.settings.library_dir / f"batch/note {i:03d}.md", f"# Note {i}\n\nabout tides number {i}")
    result = tick(instance, db)
    (add,) = result.dynamic_partitions_requests
    assert len(add.partition_keys) == n
    # no run storm: two range requests instead of 205 single-file runs
    assert len(result.run_requests) == 2
    first = result.run_requests[0]
    assert first.tags["dagster/asset_partition_range_start"] == add.partition_keys[0]
    assert first.tags["dagster/asset_partition_range_end"] == add.partition_keys[RANGE_SIZE - 1]
    assert {d["status"] for d in doc_rows(db).values()} == {"pending"}


def test_changed_and_removed_files(make_db, instance):
    db = make_db()
    lib = db.settings.library_dir
    a = write(lib / "a.txt", "alpha text about harbours")
    b = write(lib / "b.txt", "beta text about lighthouses")
    first = tick(instance, db)
    instance.add_dynamic_partitions("library_files", list(first.dynamic_partitions_requests[0].partition_keys))
    quiet = tick(instance, db, first.cursor)
    assert quiet.run_requests == [] and quiet.dynamic_partitions_requests == []

    a.write_text("alpha text, edited, about harbours and tides")
    os.utime(a, (a.stat().st_atime, a.stat().st_mtime + 5))
    b.unlink()
    changed = tick(instance, db, quiet.cursor)
    assert [r.partition_key for r in changed.run_requests] == [partition_key_for("a.txt")]
    assert changed.dynamic_partitions_requests == []
    assert doc_rows(db)["b.txt"]["status"] == "removed"


def test_enabling_on_an_ingested_library_requests_nothing(make_db):
    db = make_db()
    write(db.settings.library_dir / "done.txt", "an already ingested file about the tide")
    with dg.DagsterInstance.ephemeral() as inst:
        ingest(db, inst)
        result = tick(inst, db)
    assert result.run_requests == []


def test_partition_keys_are_dagster_safe():
    from dagster._core.definitions.partitions.utils.base import INVALID_PARTITION_SUBSTRINGS

    nasty = ["a...b.pdf", "line\nbreak.txt", "tab\there.md", "comma, [bracket] (x).epub", "Пушкин — «Дочка».txt",
             "../up.txt", "x" * 500 + ".pdf", "quote\"s 'n' stuff.pdf"]
    keys = [partition_key_for(n) for n in nasty]
    assert len(set(keys)) == len(keys)
    for key in keys:
        assert not any(s in key for s in INVALID_PARTITION_SUBSTRINGS), key
        assert not any(c in key for c in ",[]()\"' "), key
        assert len(key) <= 100
    assert partition_key_for("a.pdf") == partition_key_for("a.pdf")


def test_definitions_load_and_validate(tmp_path):
    from library_pipeline.definitions import defs

    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {"extracted_text", "chunks", "embeddings"} <= keys
    assert repo.get_sensor_def("library_folder_sensor")
    env = dict(os.environ, LIBRARY_HOME=str(tmp_path), DAGSTER_HOME=str(tmp_path))
    proc = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
                           "-w", str(REPO / "workspace.yaml")], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Validation successful" in proc.stdout + proc.stderr
