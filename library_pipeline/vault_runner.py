"""`library vault sync` and the post-receive hook: the sensor's work, done now.

The hook cannot make Dagster's daemon tick early (a sensor's interval is the
daemon's; GraphQL has no "evaluate now" that also launches runs), so it
launches the runs itself: this module plans the sync exactly as the sensor
does, registers the partitions and materializes `vault_note_sections`
in-process, recorded in the shared Dagster instance (the runs show in the
UI). The sensor's next tick sees the sync in `vault_syncs` and does not
index the same push again. A session-level advisory lock serialises
concurrent hooks (two quick pushes): the second waits and then diffs from
where the first ended.
"""

from __future__ import annotations

import logging
import time

import dagster as dg

from library_pipeline.dagster_home import prepare_dagster_home
from library_pipeline.defs.vault.assets import vault_note_sections
from library_pipeline.defs.vault.partitions import vault_notes_partitions
from library_pipeline.defs.vault.resources import VaultResource
from library_pipeline.ingest_runner import QUIET_RUN_CONFIG, refresh_corpus_indexes
from library_pipeline.resources import EmbedderResource, LibraryDatabase
from library_pipeline.run_plan import contiguous_spans, range_tags
from library_pipeline.vault.sync import apply_plan, plan_sync, set_runs, synced_commit
from serving.db import Database

log = logging.getLogger(__name__)

SYNC_LOCK_ID = 7_301_007  # pg_advisory_lock key: one `library vault sync` at a time


def run_sync(db: Database, vault: VaultResource, *, full: bool = False, trigger: str = "cli",
             instance: dg.DagsterInstance | None = None, embedder: EmbedderResource | None = None,
             batch: int = 200) -> dict:
    started = time.perf_counter()
    repo = vault.open()
    branch = vault.branch_name(repo)
    lock = db.connect(autocommit=True)
    try:
        lock.execute("SELECT pg_advisory_lock(%s)", (SYNC_LOCK_ID,))
        base, _ = synced_commit(db, vault.repo_id(repo), branch)
        plan = plan_sync(db, repo, branch, base, full=full, full_reason="--full" if full else None)
        if plan.mode == "incremental" and plan.base == plan.head:
            return {"sync_id": None, "head": plan.head, "mode": "noop", "files_processed": 0, "chunks_indexed": 0,
                    "failed": 0, "failures": [], "skipped": {}, "seconds": time.perf_counter() - started}
        applied = apply_plan(db, plan, trigger)
        if instance is None:
            prepare_dagster_home(db)
            instance = dg.DagsterInstance.get()
        existing = set(instance.get_dynamic_partitions(vault_notes_partitions.name))
        new = [k for k in dict.fromkeys(applied.keys) if k not in existing]
        if new:
            instance.add_dynamic_partitions(vault_notes_partitions.name, new)
        for old in applied.old_keys:
            if old in existing and old not in applied.keys:
                instance.delete_dynamic_partition(vault_notes_partitions.name, old)
        order = instance.get_dynamic_partitions(vault_notes_partitions.name)
        spans = contiguous_spans(applied.keys, order, batch) if applied.keys else []
        set_runs(db, applied.sync_id, len(spans))
        resources = {"library_db": LibraryDatabase.from_settings(db.settings),
                     "embedder": embedder or EmbedderResource.from_settings(db.settings), "vault": vault}
        run_config = dict(QUIET_RUN_CONFIG)
        failed_runs = []
        for span in spans:
            tags = {**range_tags(span), "vault/sync": str(applied.sync_id), "vault/commit": plan.head, "library/reason": trigger}
            result = dg.materialize([vault_note_sections], instance=instance, resources=resources, tags=tags,
                                    run_config=run_config, raise_on_error=False)
            if not result.success:
                failed_runs.append(result.run_id)
        if spans or applied.removed:
            # vault sections are keyword-searchable: their terms belong in the corpus statistics
            failed = refresh_corpus_indexes(instance, resources["library_db"], reason=trigger)
            if failed:
                failed_runs.append(failed)
    finally:
        lock.execute("SELECT pg_advisory_unlock(%s)", (SYNC_LOCK_ID,))
        lock.close()
    with db.connect() as conn:
        row = conn.execute("SELECT files_processed + removed, chunks_indexed, failed, finished_at IS NOT NULL "
                           "FROM vault_syncs WHERE id = %s", (applied.sync_id,)).fetchone()
        failures = conn.execute("SELECT path, error FROM documents WHERE source = 'vault' AND status = 'failed' "
                                "ORDER BY path").fetchall()
    return {"sync_id": applied.sync_id, "head": plan.head, "base": plan.base, "mode": plan.mode,
            "reason": plan.reason, "files_processed": row[0], "chunks_indexed": row[1], "failed": row[2],
            "complete": row[3], "renamed": applied.renamed, "removed": applied.removed,
            "requested": len(applied.keys), "skipped": plan.skipped, "failures": [tuple(f) for f in failures],
            "runs": len(spans), "failed_runs": failed_runs, "seconds": time.perf_counter() - started}
