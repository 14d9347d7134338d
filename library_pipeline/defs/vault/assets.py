"""The vault stage: one dynamic partition per note file (`vault_notes`), one
asset that parses, chunks, embeds and upserts a note in one transaction, and
the freshness check.

Runs carry the commit they index (`vault/commit`) and the sync they belong
to (`vault/sync`): the last run of a sync closes it, which records
"N files processed, N chunks indexed" and moves the synced commit forward.
A run started by hand in the UI (no tags) indexes the branch head.
"""

import logging
import time

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.defs.vault.partitions import vault_notes_partitions
from library_pipeline.defs.vault.resources import VaultResource
from library_pipeline.documents import StepResult
from library_pipeline.resources import EmbedderResource, LibraryDatabase
from library_pipeline.vault.store import index_notes
from library_pipeline.vault.sync import finish_run, synced_commit
from serving.db import Database

progress_log = logging.getLogger("library_pipeline.progress")

OWNERS = ["team:library"]
GROUP = "vault"
FRESHNESS_LIMIT_HOURS = 24.0


class VaultNoteConfig(dg.Config):
    force: bool = False  # re-embed even when the note's blob is unchanged


@dg.asset(
    partitions_def=vault_notes_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name=GROUP,
    kinds={"python", "postgres", "pgvector", "git"},
    owners=OWNERS,
    description="Each Obsidian note parsed (front matter, `##` sections, links, callouts, tags), embedded "
                "and upserted in one transaction: previous version superseded (kept), links stored as "
                "graph edges. Rows: `passages` (source 'vault'), `note_links`, `vault_note_versions`.",
)
def vault_note_sections(context: dg.AssetExecutionContext, config: VaultNoteConfig, library_db: LibraryDatabase,
                        embedder: EmbedderResource, vault: VaultResource) -> dg.MaterializeResult:
    db = library_db.get()
    model = embedder.get(db)
    repo = vault.open()
    tags = context.run.tags
    commit = tags.get("vault/commit") or repo.head(vault.branch_name(repo))
    if commit is None:
        raise dg.Failure(description=f"branch {vault.branch_name(repo)!r} has no commits in {repo.path}")
    keys = context.partition_keys
    started = time.perf_counter()
    done = [0]

    def progress(result: StepResult) -> None:
        done[0] += 1
        progress_log.info("vault %d/%d %s %s", done[0], len(keys), result.status, result.path or result.key,
                          extra={"step": "vault", "key": result.key, "status": result.status})

    results = index_notes(db, repo, commit, keys, model, max_bytes=vault.max_note_bytes, force=config.force,
                          on_result=progress)
    ok = [r for r in results if r.status == "ok"]
    failed = [r for r in results if r.status == "failed"]
    chunks = sum(int(r.figures.get("passages", 0)) for r in ok)
    sync = tags.get("vault/sync")
    summary = None
    if sync:
        summary = finish_run(db, int(sync), processed=len(ok) + len(failed), chunks=chunks, failed=len(failed))
    context.log.info(f"vault: {len(ok) + len(failed)} files processed, {chunks} chunks indexed "
                     f"({len(failed)} failed, {len(results) - len(ok) - len(failed)} unchanged/skipped) "
                     f"at {commit[:12]}")
    if failed and len(results) == 1:
        raise dg.Failure(description=f"{failed[0].path or failed[0].key}: {failed[0].reason}",
                         metadata={"path": failed[0].path or "", "reason": failed[0].reason or ""})
    rows = ["| note | status | detail |", "|---|---|---|"]
    for r in results[:200]:
        detail = r.reason or ", ".join(f"{k}={v}" for k, v in r.figures.items())
        rows.append(f"| {(r.path or r.key).replace('|', '/')} | {r.status} | {detail.replace('|', '/')} |")
    metadata = {
        "commit": commit, "files_processed": len(ok) + len(failed), "chunks_indexed": chunks,
        "failed": len(failed), "unchanged_or_skipped": len(results) - len(ok) - len(failed),
        "embedded": sum(int(r.figures.get("embedded", 0)) for r in ok),
        "reused": sum(int(r.figures.get("reused", 0)) for r in ok),
        "embed_seconds": round(sum(float(r.figures.get("embed_seconds", 0.0)) for r in ok), 3),
        "seconds": round(time.perf_counter() - started, 3), "model": model.name,
        "per_note": dg.MetadataValue.md("\n".join(rows)),
    }
    if sync:
        metadata["sync_id"] = int(sync)
        metadata["sync_complete"] = summary is not None
    if failed:
        metadata["failures"] = dg.MetadataValue.md("\n".join(f"- `{r.path or r.key}`: {r.reason}" for r in failed[:100]))
    return dg.MaterializeResult(metadata=metadata)


def vault_lag(vault: VaultResource, db: Database, now: float | None = None) -> dict:
    """How long the branch head has been ahead of the last synced commit: the
    age of the oldest commit not yet indexed (0 when in sync)."""
    repo = vault.open()
    branch = vault.branch_name(repo)
    head = repo.head(branch)
    synced, synced_at = synced_commit(db, vault.repo_id(repo), branch)
    now = time.time() if now is None else now
    if head is None or head == synced:
        return {"head": head or "", "synced": synced or "", "lag_hours": 0.0, "unsynced_commits": 0,
                "synced_at": str(synced_at or "")}
    times = repo.unsynced_commit_times(head, synced)
    lag = max(0.0, (now - min(times)) / 3600) if times else 0.0
    return {"head": head, "synced": synced or "", "lag_hours": round(lag, 3), "unsynced_commits": len(times),
            "synced_at": str(synced_at or "")}


@dg.asset_check(asset=vault_note_sections, blocking=False,
                description=f"Fails when the vault's branch head has been ahead of the last synced commit for "
                            f"more than {FRESHNESS_LIMIT_HOURS:.0f} hours; `lag_hours` is the age of the oldest "
                            "commit not yet indexed.")
def vault_freshness(vault: VaultResource, library_db: LibraryDatabase) -> dg.AssetCheckResult:
    if not vault.configured:
        return dg.AssetCheckResult(passed=True, metadata={"vault": "not configured (LIBRARY_VAULT_REPO)"})
    lag = vault_lag(vault, library_db.get())
    with library_db.get().connect() as conn:
        failed = conn.execute("SELECT count(*) FROM documents WHERE source = 'vault' AND status = 'failed'").fetchone()[0]
    return dg.AssetCheckResult(
        passed=lag["lag_hours"] <= FRESHNESS_LIMIT_HOURS,
        metadata={"lag_hours": dg.MetadataValue.float(float(lag["lag_hours"])),
                  "unsynced_commits": lag["unsynced_commits"], "head": lag["head"], "synced_commit": lag["synced"],
                  "synced_at": lag["synced_at"], "failed_notes": failed, "limit_hours": FRESHNESS_LIMIT_HOURS})


vault_job = dg.define_asset_job(
    launch.VAULT_JOB,
    selection=dg.AssetSelection.assets(vault_note_sections),
    description="Index vault notes (one partition per note; the git-push sensor requests them).",
)

vault_freshness_job = dg.define_asset_job(
    "vault_freshness",
    selection=dg.AssetSelection.checks(vault_freshness),
    description="Evaluate the vault freshness check.",
)

vault_freshness_schedule = dg.ScheduleDefinition(
    job=vault_freshness_job, cron_schedule="17 * * * *", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Hourly: the freshness check must catch a stalled sync even when no push arrives.",
)
