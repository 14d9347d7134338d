"""The git-push sensor: cursor = the last commit whose changes it requested.

Each tick diffs the cursor against the branch head (`git diff-tree -M`) and
requests runs only for added, modified and renamed notes; deletions and
renames are applied to the `documents` rows in the tick itself (cheap, and a
rename must move the row before its partition runs). A missing cursor, a
cursor commit gone after a gc, or a head that does not descend from it (a
force-push) falls back to a full comparison of the head's tree with the
database, blob by blob.

A sync whose runs all ended with a failure (the embedder could not load, the
run crashed) never closes, so the synced commit stays behind; once its last
run is RETRY_AFTER_S old the sensor abandons it and requests the changes
again from the last fully indexed commit (`vault_state.last_commit`).

A sync started outside the sensor (`library vault sync`, the post-receive
hook) is noticed through `vault_syncs`: when the latest requested commit
descends from the cursor, the tick diffs from there instead, so the same
push is not indexed twice.
"""

import time

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.defs.vault.assets import vault_job
from library_pipeline.defs.vault.resources import VaultResource
from library_pipeline.resources import LibraryDatabase
from library_pipeline.vault.git import GitError
from library_pipeline.vault.sync import (
    AppliedSync,
    abandon_sync,
    latest_requested_commit,
    open_sync,
    plan_sync,
    synced_commit,
)

# a failed sync is retried once its last run is this old: a broken embedder
# must not turn the 30 s tick into a run storm
RETRY_AFTER_S = 600.0
_TERMINAL = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


def failed_sync(instance: dg.DagsterInstance, db, repo_id: str, branch: str) -> int | None:
    """The latest sync, if every run it requested has ended and one did not succeed."""
    pending = open_sync(db, repo_id, branch)
    if pending is None or pending[1] == 0:
        return None
    records = instance.get_run_records(filters=dg.RunsFilter(tags={"vault/sync": str(pending[0])}))
    if len(records) < pending[1] or any(r.dagster_run.status not in _TERMINAL for r in records):
        return None
    if all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records):
        return None
    ended = max((r.end_time or 0.0) for r in records)
    return pending[0] if time.time() - ended >= RETRY_AFTER_S else None


def plan_run_requests(applied: AppliedSync, commit: str, key_order: list[str]) -> list[dg.RunRequest]:
    """The sensor's requests for a sync (library_pipeline.launch.vault_plan): the run key
    names the sync, so a note changed again in a later push gets a new run."""
    return launch.run_requests(launch.vault_plan(applied, commit, "sensor", key_order))


@dg.sensor(
    job=vault_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Watches the Obsidian vault's git branch (LIBRARY_VAULT_REPO): indexes added, modified and "
                "renamed notes, marks deleted ones removed; full comparison after a force-push.",
)
def vault_push_sensor(context: dg.SensorEvaluationContext, library_db: LibraryDatabase,
                      vault: VaultResource) -> dg.SensorResult | dg.SkipReason:
    if not vault.configured:
        return dg.SkipReason("no vault configured (LIBRARY_VAULT_REPO)")
    db = library_db.get()
    try:
        repo = vault.open()
        branch = vault.branch_name(repo)
        head = repo.head(branch)
    except GitError as exc:
        return dg.SkipReason(f"vault repository unreadable: {exc}")
    if head is None:
        return dg.SkipReason(f"branch {branch!r} has no commits yet")
    repo_id = vault.repo_id(repo)
    cursor = context.cursor or None
    retry_of = failed_sync(context.instance, db, repo_id, branch)
    if retry_of is not None:
        abandon_sync(db, retry_of, "runs failed; retried by the sensor")
        base = synced_commit(db, repo_id, branch)[0]
        plan = plan_sync(db, repo, branch, base)
        plan.reason = "; ".join(r for r in (f"retry of sync {retry_of}, whose runs failed", plan.reason) if r)
    else:
        if cursor == head:
            return dg.SkipReason(f"vault at {head[:12]}: nothing new")
        base = cursor
        elsewhere = latest_requested_commit(db, repo_id, branch)
        if elsewhere == head:
            return dg.SensorResult(run_requests=[], cursor=head)  # the hook / CLI already requested this head
        if (elsewhere and base and elsewhere != base and repo.has_commit(elsewhere)
                and repo.is_ancestor(base, elsewhere)):
            base = elsewhere  # the hook / CLI already requested up to there
        plan = plan_sync(db, repo, branch, base)
    applied, runs = launch.vault_changes(db, plan, "sensor", context.instance)
    context.log.info(
        f"vault {plan.mode} sync {applied.sync_id} {(plan.base or '-')[:12]}..{head[:12]}"
        f"{' (' + plan.reason + ')' if plan.reason else ''}: {len(applied.keys)} to index, "
        f"{applied.renamed} renamed, {applied.removed} removed, {len(plan.skipped)} skipped; "
        f"{len(runs.runs)} run(s)")
    return launch.sensor_result([runs], head)
