"""Dagster's Postgres instance storage, with a run's planned-materialization
events written in one statement, the dynamic partition list fetched again only
when it changed (`LibraryEventLogStorage.get_dynamic_partitions`), and
connections held open by the run storage and the event log instead of a new one
for every statement (`_HoldsConnections`).

A range run over N files of the three ingest assets plans 3·N partition
materializations before it starts, and Dagster records one event per partition
(it must: the UI marks a partition red from the planned event of a run that
failed; its single-event alternative, DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS,
loses that). dagster-postgres batches only materialization and observation
events; every planned one was stored alone, on a new connection (its engine
keeps no pool) for the row and another for the asset index. Measured on a
1,000-small-file first sync: 22 s of 117 s went there. Here they are stored as
one INSERT and one index transaction per batch (DAGSTER_EVENT_BATCH_SIZE): every
event's tags as when stored alone, and each asset's index row from its batch's last
event (what the row holds once each event has been stored alone, in order).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
import sqlalchemy as db
from dagster import DagsterEventType
from dagster._core.errors import DagsterInvariantViolationError
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import DynamicPartitionsTable, SqlEventLogStorageTable
from dagster._core.storage.sqlalchemy_compat import db_select
from dagster._serdes import ConfigurableClassData
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.storage import DagsterPostgresStorage
from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config

from library_pipeline.instance.home import EVENT_BATCH_SIZE

_PLANNED = DagsterEventType.ASSET_MATERIALIZATION_PLANNED


def _arguments(inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]) -> dict[str, Any]:
    """dagster.yaml's `postgres_url` / `postgres_db` config as dagster-postgres reads it."""
    return {"inst_data": inst_data, "postgres_url": pg_url_from_config(config_value),
            "should_autocreate_tables": config_value.get("should_autocreate_tables", True),
            "token_provider": get_token_provider_from_config(config_value)}


# every storage holding connections, so that a forked child can drop them (one fork
# hook for the process, not one per storage instance)
_HOLDING: weakref.WeakSet = weakref.WeakSet()


def _forget_in_child() -> None:
    for storage in list(_HOLDING):
        storage._engine.dispose(close=False)  # noqa: SLF001


os.register_at_fork(after_in_child=_forget_in_child)


class _HoldsConnections:
    """A dagster-postgres storage whose engine keeps two connections open.

    dagster-postgres's engines keep none (NullPool): every statement opened a new
    connection, a server process with a cold catalogue cache. A range run of 200
    files opened ~110 of them (3 ms each before any query), and a no-op three-asset
    range job spent 8.4-9.6 ms a partition in Dagster at 200 files a run against
    5.5-6.2 ms at 1,000, the difference mostly those per-run connections. Dagster
    pools the same way in its webserver (`optimize_for_webserver`). Two are held
    because Dagster nests a catalogue check inside an index transaction; extra
    connections for concurrent threads are opened and closed as before
    (max_overflow -1). A pooled connection must not cross a fork (a celery prefork
    worker, a forked executor child), so the child drops the parent's without
    closing them, as SQLAlchemy's pooling guide prescribes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._engine.dispose()  # holds no connection (NullPool); replaced below
        self._engine = create_pg_engine(
            self.postgres_url, self._token_provider, isolation_level="AUTOCOMMIT",
            pool_size=2, max_overflow=-1, pool_pre_ping=True, pool_recycle=3600)
        _HOLDING.add(self)

    def dispose(self) -> None:
        super().dispose()
        self._engine.dispose()


class LibraryRunStorage(_HoldsConnections, PostgresRunStorage):
    """dagster-postgres's run storage, holding its connections (`_HoldsConnections`)."""

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,
                          config_value: Mapping[str, Any]) -> LibraryRunStorage:
        return cls(**_arguments(inst_data, config_value))


class LibraryEventLogStorage(_HoldsConnections, PostgresEventLogStorage):
    """dagster-postgres's event log; a batch of planned events in one INSERT, a
    dynamic partition list fetched again only when it changed, and its connections
    held (`_HoldsConnections`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # partitions_def_name -> ((row count, highest id), keys in id order, the same as a set)
        self._dynamic_partitions: dict[str, tuple[tuple[int, int | None], tuple[str, ...], frozenset[str]]] = {}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,
                          config_value: Mapping[str, Any]) -> LibraryEventLogStorage:
        return cls(**_arguments(inst_data, config_value))

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if len(events) < 2 or any(e.get_dagster_event().event_type != _PLANNED for e in events):
            super().store_event_batch(events)
            return
        with self._connect() as conn:
            result = conn.execute(self.prepare_insert_event_batch(events).returning(SqlEventLogStorageTable.c.id))
            ids = [row[0] for row in result.fetchall()]
        if len(ids) != len(events) or any(i is None for i in ids):
            raise DagsterInvariantViolationError("Cannot index planned events without their ids.")
        # the asset index row of each asset (its last run id and event time) ends as its
        # batch's last event sets it: one upsert per asset, not one per partition (a
        # 1,000-file first sync made 3,000 upserts of three rows, ~0.9 ms each)
        last: dict[Any, tuple[EventLogEntry, int]] = {}
        for event, event_id in zip(events, ids):
            last[event.get_dagster_event().asset_key] = (event, int(event_id))
        with self.index_transaction() as conn:
            self._store_asset_event_tags(conn, events, ids)
            for event, event_id in last.values():
                self._store_asset_event(conn, event, event_id)

    def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
        # asked ~22 times a range run (Dagster checks the range's ends); dagster-postgres
        # asked the catalogue whether the table exists and then the table, each time
        self.get_dynamic_partitions(partitions_def_name)
        return partition_key in self._dynamic_partitions[partitions_def_name][2]

    def get_dynamic_partitions(self, partitions_def_name: str) -> Sequence[str]:
        """The keys in id order, as dagster-postgres returns them. A step resolves its
        run's partition range through this list about eleven times per range run (every
        key fetched each time), so a first sync of N files cost O(N^2 / range size):
        measured on 3,000 small files, 167 fetches took 2.2 s, and they grow with both
        the run count and the key count. The list is kept, and fetched again only when
        the row count or the highest id changed (ids come from a sequence, so an added
        key raises the highest id and a deleted one lowers the count): one aggregate
        query instead of every row, and any other process's add or delete is seen at
        the next call."""
        table = DynamicPartitionsTable
        where = table.c.partitions_def_name == partitions_def_name
        cached = self._dynamic_partitions.get(partitions_def_name)
        if cached is None:
            # dagster-postgres asks the catalogue whether the table exists on every call:
            # one more connection and query, needed only before the first fetch
            self._check_partitions_table()
        with self.index_connection() as conn:
            if cached is not None:
                count, highest = conn.execute(db_select([db.func.count(), db.func.max(table.c.id)])
                                              .where(where)).one()
                if (count, highest) == cached[0]:
                    return list(cached[1])
            rows = conn.execute(db_select([table.c.id, table.c.partition]).where(where)
                                .order_by(table.c.id)).fetchall()
        keys = tuple(str(row[1]) for row in rows)
        # the stamp comes from the rows themselves, never from a query that a concurrent
        # write could fall between
        self._dynamic_partitions[partitions_def_name] = ((len(rows), rows[-1][0] if rows else None), keys,
                                                         frozenset(keys))
        return list(keys)


class LibraryPostgresStorage(DagsterPostgresStorage):
    """`storage: custom:` in dagster.yaml: dagster-postgres's run and schedule
    storage with `LibraryEventLogStorage` as the event log."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data: ConfigurableClassData | None = None, token_provider: Any = None) -> None:
        # the parent's __init__ is not called: it would build a plain event log first,
        # one more table check on a new connection for every instance
        self.postgres_url = postgres_url
        self.should_autocreate_tables = should_autocreate_tables
        self._inst_data = inst_data
        self._run_storage = LibraryRunStorage(postgres_url, should_autocreate_tables,
                                              token_provider=token_provider)
        self._event_log_storage = LibraryEventLogStorage(postgres_url, should_autocreate_tables,
                                                         token_provider=token_provider)
        self._schedule_storage = PostgresScheduleStorage(postgres_url, should_autocreate_tables,
                                                         token_provider=token_provider)
        super(DagsterPostgresStorage, self).__init__()

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None,  # type: ignore[override]
                          config_value: Mapping[str, Any]) -> LibraryPostgresStorage:
        return cls(**_arguments(inst_data, config_value))

    @property
    def event_storage_data(self) -> ConfigurableClassData | None:
        # a run launched in another process rebuilds its event log from this
        return ConfigurableClassData(__name__, LibraryEventLogStorage.__name__,
                                     self.inst_data.config_yaml) if self.inst_data else None

    @property
    def run_storage_data(self) -> ConfigurableClassData | None:
        return ConfigurableClassData(__name__, LibraryRunStorage.__name__,
                                     self.inst_data.config_yaml) if self.inst_data else None


class LibraryInstance(dg.DagsterInstance):
    """`instance_class` in dagster.yaml: Dagster's instance, writing a step's events in
    batches of EVENT_BATCH_SIZE. Dagster reads the size from its own variable,
    DAGSTER_EVENT_BATCH_SIZE, per event (0 = one by one); here the instance carries it,
    so every process that opens the home (the CLI, the daemon, run and celery workers)
    batches without anything written to its environment. The variable, when set,
    still wins."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> Mapping[str, Any]:
        from dagster._core.instance.ref import InstanceRef

        return InstanceRef.config_defaults(base_dir)

    def _get_event_batch_size(self) -> int:
        return int(os.environ.get("DAGSTER_EVENT_BATCH_SIZE") or EVENT_BATCH_SIZE)
