"""The nightly backup: `library_backup` writes a backup of the library database (what
`library backup` writes) into LIBRARY_BACKUP_DIR and keeps the newest
LIBRARY_BACKUP_KEEP; its check restores the newest into a scratch database and
compares it with what was saved, so a backup that cannot be restored is red in the
UI the morning after it was made.

No `from __future__ import annotations`: Dagster reads the Config and resource
annotations at definition time.
"""

import datetime as dt
from pathlib import Path

import dagster as dg
from pydantic import Field

from library_pipeline.backup.archive import BackupError
from library_pipeline.backup.backup import backup, prune
from library_pipeline.backup.verify import verify
from library_pipeline.defs.ingest.assets import OWNERS
from library_pipeline.resources import LibraryDatabase
from library_pipeline.launch.run_plan import MAINTENANCE_LANE
from serving.settings import Settings

GROUP = "ops"
PATTERN = "library-*.backup"  # library-<UTC time>.backup: names sort by time


class BackupConfig(dg.Config):
    memories_only: bool = Field(default=False, description=(
        "Save only what cannot be ingested again (memories, versions, access log, vault versions, "
        "query log); also on when LIBRARY_BACKUP_MEMORIES_ONLY is set."))


def backup_dir(settings: Settings) -> Path:
    return settings.backup_dir or settings.home / "backups"


def latest_backup(settings: Settings) -> Path | None:
    directory = backup_dir(settings)
    files = sorted(p for p in directory.glob(PATTERN) if ".partial-" not in p.name) if directory.is_dir() else []
    return files[-1] if files else None


@dg.asset(group_name=GROUP, owners=OWNERS, kinds={"postgres"},
          description="A backup of the library database (`library backup`) in LIBRARY_BACKUP_DIR "
                      "(default <LIBRARY_HOME>/backups), the newest LIBRARY_BACKUP_KEEP kept. Metadata: "
                      "the file, its size, rows, memory versions, what was pruned.")
def library_backup(context: dg.AssetExecutionContext, config: BackupConfig,
                   library_db: LibraryDatabase) -> dg.MaterializeResult:
    settings = library_db.settings
    directory = backup_dir(settings)
    path = directory / f"library-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S%fZ}.backup"
    seen: set[str] = set()

    def progress(stage: str, done: int, total: int) -> None:
        if not stage.startswith("writing") and stage not in seen:
            seen.add(stage)
            context.log.debug(stage)

    result = backup(library_db.get(), path, memories_only=config.memories_only or settings.backup_memories_only,
                    progress=progress)
    gone = prune(directory, PATTERN, settings.backup_keep)
    m = result.manifest
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(result.path)), "kind": m.kind, "bytes": result.bytes,
        "size (MB)": round(result.bytes / 2**20, 2), "seconds": round(result.seconds, 2),
        "tables": len(m.counts), "rows": sum(m.counts.values()), "memory versions": len(m.memories),
        "snapshot at": m.created_at, "pruned": len(gone), "keep": settings.backup_keep})


@dg.asset_check(asset=library_backup, blocking=False,
                description="The newest backup restores: restored into a scratch database on the same server, "
                            "every table's row count and every memory version's content hash equal what was "
                            "saved.")
def library_backup_restorable(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    latest = latest_backup(library_db.settings)
    if latest is None:
        return dg.AssetCheckResult(passed=False, description=f"no backup in {backup_dir(library_db.settings)}")
    try:
        v = verify(library_db.get(), latest)
    except BackupError as exc:
        return dg.AssetCheckResult(passed=False, description=f"{latest.name} does not restore: {exc}",
                                   metadata={"path": dg.MetadataValue.path(str(latest))})
    rows = [f"| {t} | {a} | {b} |" for t, (a, b) in sorted(v.mismatched.items())]
    mismatches = "\n".join(["| table | saved | restored |", "|---|---|---|", *rows]) if rows else "none"
    missing = v.missing_memories[:10]
    return dg.AssetCheckResult(
        passed=v.ok,
        description=(f"{latest.name} restores: {len(v.counts)} tables and {len(v.manifest.memories)} memory "
                     "versions as saved" if v.ok else
                     f"{latest.name} restores differently: {len(v.mismatched)} tables differ, "
                     f"{len(v.missing_memories)} memory versions missing"),
        metadata={"path": dg.MetadataValue.path(str(latest)), "kind": v.manifest.kind,
                  "snapshot at": v.manifest.created_at, "tables compared": len(v.counts),
                  "memory versions": len(v.manifest.memories), "seconds": round(v.seconds, 2),
                  "mismatched tables": dg.MetadataValue.md(mismatches),
                  "missing memories (first 10)": dg.MetadataValue.json(missing)})


library_backup_job = dg.define_asset_job("library_backup_job", selection=[library_backup], tags=MAINTENANCE_LANE,
                                         description="Back up the library database and prove the backup restores.")
library_backup_nightly = dg.ScheduleDefinition(
    name="library_backup_nightly", job=library_backup_job, cron_schedule="0 2 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Nightly backup (LIBRARY_BACKUP_DIR, keeps LIBRARY_BACKUP_KEEP) and its restore check.")

defs = dg.Definitions(assets=[library_backup], asset_checks=[library_backup_restorable], jobs=[library_backup_job],
                      schedules=[library_backup_nightly])
