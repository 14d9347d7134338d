"""The instance storage `library up`, `library ingest` and the celery workers
use: dagster-postgres with a range run's planned events written in batches.
What the UI reads from them must be what it reads from per-event writes: every
partition of a range run planned and then materialized, a failed
single-partition run's partition failed (red), and a run launched in another
process rebuilding the same storage from the instance reference."""

import os

import dagster as dg
import pytest
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

from library_pipeline.instance.home import EVENT_BATCH_SIZE, prepare_dagster_home
from library_pipeline.instance.storage import LibraryEventLogStorage

FILES = dg.DynamicPartitionsDefinition(name="storage_test_files")


@dg.asset(partitions_def=FILES, backfill_policy=dg.BackfillPolicy.single_run())
def first(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    if any(key.startswith("bad") for key in context.partition_keys):
        raise dg.Failure(description="bad file: unreadable")
    return dg.MaterializeResult(metadata={"files": len(context.partition_keys)})


@dg.asset(partitions_def=FILES, backfill_policy=dg.BackfillPolicy.single_run(), deps=[first])
def second(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"files": len(context.partition_keys)})


@pytest.fixture()
def library_instance(db, tmp_path, monkeypatch):
    # nothing in the environment: the home is passed explicitly and the instance
    # carries the batch size itself
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE", raising=False)
    with prepare_dagster_home(db, tmp_path / "dagster").instance() as instance:
        yield instance


def _planned_partitions(instance: dg.DagsterInstance, run_id: str, asset: dg.AssetsDefinition) -> list[str]:
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED).records
    return sorted(r.event_log_entry.dagster_event.event_specific_data.partition for r in records
                  if r.event_log_entry.dagster_event.asset_key == asset.key)


def test_range_run_planned_and_materialized_per_partition(library_instance, monkeypatch, capfd):
    instance = library_instance
    storage = instance.event_log_storage
    assert isinstance(storage, LibraryEventLogStorage)
    assert "DAGSTER_EVENT_BATCH_SIZE" not in os.environ
    assert instance._get_event_batch_size() == EVENT_BATCH_SIZE
    batches: list[set[str]] = []
    real_batch = storage.store_event_batch

    def recorded(events):
        batches.append({e.get_dagster_event().event_type_value for e in events})
        real_batch(events)

    monkeypatch.setattr(storage, "store_event_batch", recorded)
    keys = [f"file-{i:03d}" for i in range(30)]
    instance.add_dynamic_partitions(FILES.name, keys)
    result = dg.materialize([first, second], instance=instance, tags={
        "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    assert result.success
    # the 60 planned events went through the batch path, and it did not fall back to
    # one-by-one writes (Dagster swallows a failing batch and prints this)
    assert {"ASSET_MATERIALIZATION_PLANNED"} in batches
    assert "Exception while storing event batch" not in capfd.readouterr().err
    for asset in (first, second):
        assert _planned_partitions(instance, result.run_id, asset) == keys
        assert instance.get_materialized_partitions(asset.key) == set(keys)
        # the asset index the UI's asset page reads: the latest planned event is this run's
        info = instance.get_latest_planned_materialization_info(asset.key)
        assert info is not None and info.run_id == result.run_id
        cache = get_and_update_asset_status_cache_value(instance, asset.key, FILES)
        assert cache.deserialize_materialized_partition_subsets(FILES).get_partition_keys() == set(keys)


def test_failed_single_file_run_marks_its_partition_failed(library_instance):
    instance = library_instance
    instance.add_dynamic_partitions(FILES.name, ["good-1", "good-2", "bad-1"])
    failed = dg.materialize([first], instance=instance, partition_key="bad-1", raise_on_error=False)
    assert not failed.success
    ok = dg.materialize([first], instance=instance, tags={
        "dagster/asset_partition_range_start": "good-1", "dagster/asset_partition_range_end": "good-2"})
    assert ok.success
    cache = get_and_update_asset_status_cache_value(instance, first.key, FILES)
    assert cache.deserialize_failed_partition_subsets(FILES).get_partition_keys() == {"bad-1"}
    assert cache.deserialize_materialized_partition_subsets(FILES).get_partition_keys() == {"good-1", "good-2"}


def test_run_in_another_process_rebuilds_the_same_storage(library_instance):
    # a launched run (daemon, `library up`) gets the instance as a reference
    with dg.DagsterInstance.from_ref(library_instance.get_ref()) as rebuilt:
        assert isinstance(rebuilt.event_log_storage, LibraryEventLogStorage)


def test_dynamic_partitions_fetched_again_only_when_they_changed(library_instance):
    """The partition list is answered from what was fetched while its row count and
    highest id stand; another process's add, delete, or delete-and-add is seen at the
    next call."""
    import sqlalchemy

    storage = library_instance.event_log_storage
    statements: list[str] = []
    sqlalchemy.event.listen(storage._engine, "before_cursor_execute",
                            lambda conn, cursor, statement, *rest: statements.append(statement))
    keys = [f"file-{i:03d}" for i in range(5)]
    with dg.DagsterInstance.from_ref(library_instance.get_ref()) as other:  # another process's view
        other.add_dynamic_partitions(FILES.name, keys)
        assert storage.get_dynamic_partitions(FILES.name) == keys

        statements.clear()
        assert storage.get_dynamic_partitions(FILES.name) == keys
        # unchanged: one aggregate query, not the rows again
        assert len(statements) == 1 and "count(" in statements[0].lower() and "order by" not in statements[0].lower()

        other.add_dynamic_partitions(FILES.name, ["file-new"])
        assert storage.get_dynamic_partitions(FILES.name) == keys + ["file-new"]
        other.delete_dynamic_partition(FILES.name, "file-002")
        expected = [k for k in keys if k != "file-002"] + ["file-new"]
        assert storage.get_dynamic_partitions(FILES.name) == expected
        # one key out and another in: the same count, a higher id
        other.delete_dynamic_partition(FILES.name, "file-000")
        other.add_dynamic_partitions(FILES.name, ["file-later"])
        assert storage.get_dynamic_partitions(FILES.name) == expected[1:] + ["file-later"]
        assert storage.get_dynamic_partitions("no-such-partitions") == []
        # the run of a range over the cached list resolves its keys as before
        result = dg.materialize([first], instance=library_instance, tags={
            "dagster/asset_partition_range_start": "file-001", "dagster/asset_partition_range_end": "file-new"})
        assert result.success
        assert library_instance.get_materialized_partitions(first.key) == {"file-001", "file-003", "file-004",
                                                                           "file-new"}


def _statements(engine) -> list[str]:
    import sqlalchemy

    seen: list[str] = []
    sqlalchemy.event.listen(engine, "before_cursor_execute",
                            lambda conn, cursor, statement, *rest: seen.append(statement))
    return seen


def test_range_run_holds_its_connections_and_indexes_each_asset_once(library_instance):
    """A range run's statements go over the storages' held connections (dagster-postgres
    opened one per statement), and a batch of planned events updates each asset's
    index row once, from its last event."""
    import sqlalchemy

    instance = library_instance
    engines = [instance.event_log_storage._engine, instance.run_storage._engine]
    connects: list[int] = []
    for engine in engines:
        sqlalchemy.event.listen(engine, "connect", lambda *args: connects.append(1))
    statements = _statements(engines[0])
    keys = [f"held-{i:03d}" for i in range(30)]
    instance.add_dynamic_partitions(FILES.name, keys)
    result = dg.materialize([first, second], instance=instance, tags={
        "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
    assert result.success
    # at most the two each storage holds (Dagster nests a catalogue check inside a
    # transaction); dagster-postgres's NullPool engines opened one for every statement
    assert len(connects) <= 2 * len(engines), len(connects)
    upserts = [s for s in statements if s.lstrip().upper().startswith("INSERT INTO ASSET_KEYS")]
    # planned: one per asset (was one per partition, 60); materialized: one per asset batch
    assert len(upserts) == 4, len(upserts)
    for asset in (first, second):
        info = instance.get_latest_planned_materialization_info(asset.key)
        assert info is not None and info.run_id == result.run_id
        assert instance.get_materialized_partitions(asset.key) == set(keys)


def test_partition_membership_follows_other_processes(library_instance):
    storage = library_instance.event_log_storage
    with dg.DagsterInstance.from_ref(library_instance.get_ref()) as other:
        assert not storage.has_dynamic_partition(FILES.name, "member-1")
        other.add_dynamic_partitions(FILES.name, ["member-1"])
        assert storage.has_dynamic_partition(FILES.name, "member-1")
        statements = _statements(storage._engine)
        assert storage.has_dynamic_partition(FILES.name, "member-1")
        assert len(statements) == 1  # the stamp, not the catalogue and the table
        other.delete_dynamic_partition(FILES.name, "member-1")
        assert not storage.has_dynamic_partition(FILES.name, "member-1")
        assert not storage.has_dynamic_partition("no-such-partitions", "member-1")


def test_forked_child_leaves_the_parents_connection_alone(library_instance):
    """A forked child (a celery prefork worker) opens its own connection; the
    parent's held one survives the child's exit."""
    import multiprocessing

    storage = library_instance.event_log_storage

    def backend_pid() -> int:
        with storage.index_connection() as conn:
            return conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()

    before = backend_pid()

    def child(queue) -> None:
        library_instance.add_dynamic_partitions(FILES.name, ["from-child"])
        queue.put(backend_pid())

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    child_pid = queue.get(timeout=60)
    process.join(60)
    assert process.exitcode == 0
    assert child_pid != before  # the child did not talk over the parent's socket
    assert backend_pid() == before  # and its exit did not close it
    assert storage.get_dynamic_partitions(FILES.name) == ["from-child"]
