"""Operations: the re-embed migration as an asset (progress in the UI),
and the query-log retention run by a daily maintenance schedule.

No `from __future__ import annotations`: Dagster reads the Config and resource
annotations at definition time.
"""

import time

import dagster as dg
from pydantic import Field

from library_pipeline.migrate import embedder as migrate
from library_pipeline.defs.ingest.assets import OWNERS
from library_pipeline.resources import LibraryDatabase
from library_pipeline.launch.run_plan import MAINTENANCE_LANE
from serving.search.health import prune_search_log

GROUP = "ops"



class ReembedConfig(dg.Config):
    max_seconds: float = Field(default=0.0, description="Stop after about this long (0 = run to the switch); "
                                                        "progress is kept, the next materialisation resumes.")
    pause_seconds: float = Field(default=0.0, description="Sleep between batches, to leave CPU for serving.")


def _metadata(st: dict) -> dict:
    target = (st.get("target") or {}).get("name")
    md = {"state": st["state"], "active model": st.get("active") or "none",
          "model": target or "none", "done": int(st.get("done", 0)), "remaining": int(st.get("remaining", 0))}
    for key in ("total", "batches", "embedded", "reused", "text_mismatches", "batches_this_run", "seconds",
                "switched_passages", "switch_seconds"):
        if key in st:
            md[key] = st[key]
    multi = st.get("multilingual") or {}
    md["multilingual model"] = multi.get("model") or "none"
    md["multilingual done"] = int(multi.get("done", 0))
    md["multilingual remaining"] = int(multi.get("remaining", 0))
    return md


def _fill_multilingual(context: dg.AssetExecutionContext, db, config: "ReembedConfig", spent: float) -> dict | None:
    """The second lane's missing vectors (a library ingested before it existed), in the
    time left; None when the lane is off or nothing is missing."""
    from serving.embedding import multilingual_embedder

    multi = multilingual_embedder()
    if multi is None:
        return None
    with db.connect() as conn:
        if not migrate.multilingual_counts(conn, multi.name)["remaining"]:
            return None
    left = (config.max_seconds - spent) if config.max_seconds else None
    if left is not None and left <= 0:
        return None

    def progress(res: migrate.BatchResult, counts: dict) -> None:
        context.log.info("multilingual batch of %d (%d embedded) in %.1fs: %d done, %d remaining", res.passages,
                         res.embedded, res.seconds, counts["done"], counts["remaining"])

    return migrate.fill_multilingual(db, multi, max_seconds=left, pause_seconds=config.pause_seconds,
                                     on_batch=progress)


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"postgres"},
          description="The re-embed migration recorded by `library migrate embedder start`: re-embeds "
                      "passages, summaries, vault notes and memories in committed batches while search "
                      "keeps using the active model, then switches in one transaction; then fills the "
                      "multilingual lane's missing vectors. Metadata: state, model, done, remaining, and the "
                      "multilingual lane's model, done, remaining. Nothing running: reports the active model.")
def reembed_migration(context: dg.AssetExecutionContext, config: ReembedConfig,
                      library_db: LibraryDatabase) -> dg.MaterializeResult:
    db = library_db.get()
    started = time.perf_counter()
    with db.connect() as conn:
        st = migrate.status(conn)
    if st["state"] != "running":
        context.log.info("no migration running (%s); active model %s", st["state"], st.get("active"))
        if _fill_multilingual(context, db, config, 0.0) is not None:
            with db.connect() as conn:
                st = migrate.status(conn)
        return dg.MaterializeResult(metadata=_metadata(st))

    def progress(res: migrate.BatchResult, left: dict) -> None:
        context.log.info("batch of %d (%d embedded) in %.1fs: %d done, %d remaining", res.passages,
                         res.embedded, res.seconds, left["done"], left["remaining"])

    out = migrate.run(db, max_seconds=config.max_seconds or None, pause_seconds=config.pause_seconds,
                      on_batch=progress)
    if out.get("switched"):
        out.setdefault("done", out.get("switched_passages", 0))
        out.setdefault("remaining", 0)
        _fill_multilingual(context, db, config, time.perf_counter() - started)
        with db.connect() as conn:
            out["multilingual"] = migrate.multilingual_counts(conn)
    return dg.MaterializeResult(metadata=_metadata(out))


class QueryLogRetentionConfig(dg.Config):
    days: int = Field(default=0, description="Keep this many days of search_log (0 = LIBRARY_QUERY_LOG_DAYS, "
                                             "default 90).")


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"postgres"},
          description="Query-log retention: deletes search_log rows older than LIBRARY_QUERY_LOG_DAYS.")
def query_log_retention(config: QueryLogRetentionConfig, library_db: LibraryDatabase) -> dg.MaterializeResult:
    days = config.days or library_db.settings.query_log_days
    started = time.perf_counter()
    with library_db.get().transaction() as conn:
        deleted = prune_search_log(conn, days)
        kept = conn.execute("SELECT count(*) FROM search_log").fetchone()[0]
    return dg.MaterializeResult(metadata={"deleted": deleted, "kept": kept, "retention_days": days,
                                          "seconds": round(time.perf_counter() - started, 3)})


reembed_job = dg.define_asset_job("reembed_migration_job", selection=[reembed_migration], tags=MAINTENANCE_LANE,
                                  description="Run (or resume) the recorded re-embed migration.")
query_log_job = dg.define_asset_job("query_log_retention_job", selection=[query_log_retention], tags=MAINTENANCE_LANE)
query_log_daily = dg.ScheduleDefinition(name="query_log_daily", job=query_log_job, cron_schedule="15 4 * * *",
                                        execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
                                        description="Daily query-log retention (LIBRARY_QUERY_LOG_DAYS).")

defs = dg.Definitions(assets=[reembed_migration, query_log_retention], jobs=[reembed_job, query_log_job],
                      schedules=[query_log_daily])
