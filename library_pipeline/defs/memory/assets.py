"""Memory curation assets (group "memory"), run daily by `memory_daily_schedule`:
near-duplicates -> decay -> promotion -> retention, plus the invariant check
"0 exact duplicates in global". Each materialisation reports how many records
it changed. Memories are rows, not partitions: Dagster is built for
thousands of partitions, a memory store grows to millions of rows.

No `from __future__ import annotations`: Dagster reads the Config and resource
annotations at definition time.
"""

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import dagster as dg
import psycopg
from pydantic import Field

from library_pipeline.defs.ingest.assets import OWNERS
from library_pipeline.memory import curation
from library_pipeline.resources import LibraryDatabase
from library_pipeline.launch.run_plan import MAINTENANCE_LANE
from serving.lexemes import refresh_lexeme_df

GROUP = "memory"


class MemoryClock(dg.ConfigurableResource):
    """What "now" is for curation. Production: the wall clock. Tests (and backfills of
    a missed day) set `fixed_now` (ISO 8601) or `offset_days` to move time."""

    fixed_now: str = Field(default="", description="ISO 8601 instant to use as now; empty = wall clock.")
    offset_days: float = Field(default=0.0, description="Days added to now (after fixed_now).")

    def now(self) -> dt.datetime:
        base = curation.parse_now(self.fixed_now) or curation.default_now()
        return base + dt.timedelta(days=self.offset_days)


class NearDuplicateConfig(dg.Config):
    threshold: float = Field(default=0.95, description="Cosine at or above which two records are duplicates.")
    full_rescan: bool = Field(default=False, description="Re-examine every record, not only new ones.")


class DecayConfig(dg.Config):
    period_days: float = Field(default=30.0, description="A record loses `step` per full period without access.")
    step: float = Field(default=0.1)
    archive_below: float = Field(default=0.1, description="Relevance below this -> archived.")


class PromotionConfig(dg.Config):
    min_accesses: int = Field(default=5, description="Reads within the window.")
    min_agents: int = Field(default=3, description="Distinct agents among those reads.")
    window_days: float = Field(default=30.0)


class RetentionConfig(dg.Config):
    self_days: float = Field(default=90.0, description="Inactive `self` records go cold after this.")
    department_days: float = Field(default=365.0, description="Inactive `department` records go cold after this.")


def _result(outcome: curation.Outcome, started: float, now: dt.datetime, conn) -> dg.MaterializeResult:
    metadata = {"changed": outcome.changed, "examined": outcome.examined,
                "now": now.isoformat(), "seconds": round(time.perf_counter() - started, 3)}
    metadata.update({k: v for k, v in outcome.details.items()})
    metadata.update({f"total {k}": v for k, v in curation.memory_counts(conn).items()})
    if outcome.ids:
        metadata["ids (first 20)"] = ", ".join(str(i) for i in outcome.ids[:20])
    return dg.MaterializeResult(metadata=metadata)


def _curate(library_db: LibraryDatabase, memory_clock: MemoryClock,
            step: Callable[[psycopg.Connection, dt.datetime], Any], *, recount: bool = False) -> dg.MaterializeResult:
    """One curation step in its own committed transaction, reported with the store's totals.
    `recount`: the step takes passages out of search (merged duplicates, archived records),
    so when it changed anything the memory source's keyword statistics are recounted to
    describe what is left (the serving process recounts only as memories are written)."""
    started, now = time.perf_counter(), memory_clock.now()
    with library_db.get().connect() as conn:
        out = step(conn, now)
        conn.commit()
        if recount and out.changed:
            out.details["keyword statistics recounted (s)"] = refresh_lexeme_df(conn, ["memory"])["seconds"]
        return _result(out, started, now, conn)


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"postgres"}, description="Marks near-duplicate memories (cosine >= threshold, same scope) as "
                                        "duplicate_of the older record; merges meta, never deletes.")
def memory_near_duplicates(config: NearDuplicateConfig, library_db: LibraryDatabase,
                           memory_clock: MemoryClock) -> dg.MaterializeResult:
    return _curate(library_db, memory_clock, lambda conn, now: curation.near_duplicates(
        conn, config.threshold, full_rescan=config.full_rescan), recount=True)


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"postgres"}, deps=[memory_near_duplicates],
          description="Relevance decay: -step per period without access; below the threshold -> archived.")
def memory_decay(config: DecayConfig, library_db: LibraryDatabase, memory_clock: MemoryClock) -> dg.MaterializeResult:
    return _curate(library_db, memory_clock, lambda conn, now: curation.decay(
        conn, now, period_days=config.period_days, step=config.step, archive_below=config.archive_below),
        recount=True)


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"postgres"}, deps=[memory_decay],
          description="Promotion: records read often by several distinct agents -> scope global (with reason).")
def memory_promotion(config: PromotionConfig, library_db: LibraryDatabase,
                     memory_clock: MemoryClock) -> dg.MaterializeResult:
    return _curate(library_db, memory_clock, lambda conn, now: curation.promotion(
        conn, now, min_accesses=config.min_accesses, min_agents=config.min_agents, window_days=config.window_days))


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"postgres"}, deps=[memory_promotion],
          description="Retention: inactive self (90 d) and department (1 y) records -> cold tier; global never.")
def memory_retention(config: RetentionConfig, library_db: LibraryDatabase,
                     memory_clock: MemoryClock) -> dg.MaterializeResult:
    return _curate(library_db, memory_clock, lambda conn, now: curation.retention(
        conn, now, self_days=config.self_days, department_days=config.department_days))


@dg.asset_check(asset=memory_near_duplicates, blocking=False,
                description="Invariant: 0 exact duplicates (same normalised text) among live global records.")
def no_exact_duplicates_in_global(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    with library_db.get().connect() as conn:
        groups = curation.exact_duplicates_in_global(conn)
    return dg.AssetCheckResult(
        passed=not groups,
        metadata={"duplicate groups": len(groups), "records involved": sum(len(g) for g in groups),
                  "groups (first 10)": dg.MetadataValue.md("\n".join(f"- {g}" for g in groups[:10]) or "none")},
        description=(f"{len(groups)} groups of identical global records" if groups else "no exact duplicates"))


MEMORY_ASSETS = [memory_near_duplicates, memory_decay, memory_promotion, memory_retention]

# maintenance lane: the run queue caps it so upkeep never takes the slots ingestion needs
memory_curation_job = dg.define_asset_job("memory_curation", selection=dg.AssetSelection.groups(GROUP),
                                          tags=MAINTENANCE_LANE,
                                          description="Daily memory curation: near-dup, decay, promotion, retention.")

memory_daily_schedule = dg.ScheduleDefinition(name="memory_daily", job=memory_curation_job, cron_schedule="30 3 * * *",
                                              default_status=dg.DefaultScheduleStatus.RUNNING,
                                              description="Daily decay, promotion, retention and near-dup.")
