"""Dagster's Postgres instance storage, with a run's planned-materialization
events written in one statement.

A range run over N files of the three ingest assets plans 3·N partition
materializations before it starts, and Dagster records one event per partition
(it must: the UI marks a partition red from the planned event of a run that
failed; its single-event alternative, DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS,
loses that). dagster-postgres batches only materialization and observation
events; every planned one was stored alone, on a new connection (its engine
keeps no pool) for the row and another for the asset index. Measured on a
1,000-small-file first sync: 22 s of 117 s went there. Here they are stored as
one INSERT and one index transaction per batch (DAGSTER_EVENT_BATCH_SIZE),
each event's index update the same as storing it alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import DagsterEventType
from dagster._core.errors import DagsterInvariantViolationError
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._serdes import ConfigurableClassData
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.run_storage import PostgresRunStorage
from dagster_postgres.schedule_storage import PostgresScheduleStorage
from dagster_postgres.storage import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

_PLANNED = DagsterEventType.ASSET_MATERIALIZATION_PLANNED


def _arguments(inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]) -> dict[str, Any]:
    """dagster.yaml's `postgres_url` / `postgres_db` config as dagster-postgres reads it."""
    return {"inst_data": inst_data, "postgres_url": pg_url_from_config(config_value),
            "should_autocreate_tables": config_value.get("should_autocreate_tables", True),
            "token_provider": get_token_provider_from_config(config_value)}


class LibraryEventLogStorage(PostgresEventLogStorage):
    """dagster-postgres's event log; a batch of planned events in one INSERT."""

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
        with self.index_transaction() as conn:
            self._store_asset_event_tags(conn, events, ids)
            for event, event_id in zip(events, ids):
                self._store_asset_event(conn, event, int(event_id))


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
        self._run_storage = PostgresRunStorage(postgres_url, should_autocreate_tables,
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
