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

from library_pipeline.launch import plans as launch
from library_pipeline.definitions import definitions_for
from library_pipeline.defs.vault.resources import VaultResource
from library_pipeline.resources import EmbedderResource
from library_pipeline.vault.sync import plan_sync, synced_commit
from serving.db import Database

log = logging.getLogger(__name__)

SYNC_LOCK_ID = 7_301_007  # pg_advisory_lock key: one `library vault sync` at a time


def run_sync(db: Database, vault: VaultResource | None = None, *, full: bool = False, trigger: str = "cli",
             instance: dg.DagsterInstance | None = None, embedder: EmbedderResource | None = None,
             batch: int = 200) -> dict:
    started = time.perf_counter()
    # the location's vault for these settings, unless the caller brings its own
    vault = vault or definitions_for(db.settings).resources["vault"]
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
        instance = instance or launch.open_instance(db)
        applied, runs = launch.vault_changes(db, plan, trigger, instance, batch=batch)
        # the vault the caller names (--repo, --branch), and a caller's embedder, replace the bound ones
        resources = {"vault": vault, **({"embedder": embedder} if embedder is not None else {})}
        launched = launch.execute(runs, instance, definitions_for(db.settings), resources=resources)
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
            "runs": len(runs.runs), "failed_runs": launched.failed_runs, "seconds": time.perf_counter() - started}
