"""How work starts: one run plan, launched by a sensor, a schedule or in-process.

Every caller that starts work (the folder and git-push sensors, the reconcile and
nightly schedules, `library ingest`, `library vault sync`, `library graph build`, the
celery launcher) does two things here:

1. asks its domain what changed (`library_changes`, `vault_changes`, `enrich_keys`)
   and turns the answer into a `RunPlan`: a job of the code location, the partitions
   of each run, the reason, the lane;
2. hands the plan on: `sensor_result` / `run_requests` in a sensor or schedule (the
   daemon launches the runs), `execute` in a process of its own (the runs execute
   here, on the SAME job taken from the code location, whose resources
   library_pipeline.definitions bound once).

What every run carries is written once, in `run_tags`: its partition or range, the
reason (`library/reason`), the lane and the plan's own tags. Partitions a plan adds or
deletes are requests in a sensor and instance calls in-process (`register`). What the
daemon's automation does after an ingest (the corpus statistics and first vector
indexes: the eager, unpartitioned assets downstream of the job) `execute` does right
after the plan's runs, so no caller refreshes anything itself.

This module imports the domain logic, run_plan and the instance's home only; the
definitions import the sensors, which import this module, so an in-process caller
passes the code location in (`execute(plan, instance, definitions_for(settings))`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from library_pipeline.instance.home import prepare_dagster_home
from library_pipeline.ingest.files import scan_library
from library_pipeline.ingest.store import mark_removed, register_files
from library_pipeline.launch.run_plan import (
    ENRICH_LANE,
    MAINTENANCE_LANE,
    RANGE_SIZE,
    chunked,
    contiguous_spans,
    digest,
    plan_ranges,
    range_tags,
)
from library_pipeline.vault.sync import AppliedSync, SyncPlan, apply_plan, set_runs
from serving.db import Database

REASON_TAG = "library/reason"
PARTITION_TAG = "dagster/partition"
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
AUTOMATION_SENSOR = "library_automation"  # the daemon's sensor for eager assets outside enrich

INGEST_JOB = "ingest_files"
VAULT_JOB = "vault_sync"
ENRICH_JOB = "enrich_files"
LIBRARY_FILES = "library_files"
VAULT_NOTES = "vault_notes"


@dataclass(frozen=True)
class RunPlan:
    """Runs of one job: each entry of `runs` is one run's partition keys (one key, or
    a contiguous range in partition order)."""

    job: str
    runs: list[list[str]]
    reason: str
    lane: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    run_config: Mapping | None = None
    assets: list[str] | None = None        # a subset of the job's assets (by name)
    partitions: str | None = None          # the dynamic partitions `add` / `delete` belong to
    add: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    run_key: str | None = None             # a sensor's run-key prefix (each request once)
    changed: bool = False                  # live passages changed beyond the runs (removals)

    @property
    def files(self) -> int:
        return sum(len(keys) for keys in self.runs)


def run_tags(plan: RunPlan, keys: list[str]) -> dict[str, str]:
    """Every tag a run of `plan` over `keys` carries."""
    where = {PARTITION_TAG: keys[0]} if len(keys) == 1 else range_tags(keys)
    return {**where, REASON_TAG: plan.reason, **plan.lane, **plan.tags}


def _run_key(plan: RunPlan, keys: list[str]) -> str | None:
    if plan.run_key is None:
        return None
    span = keys[0] if len(keys) == 1 else f"{keys[0]}:{keys[-1]}"
    return f"{plan.run_key}:{span}:{digest(keys)}"


# -- in a sensor or schedule: requests the daemon launches ------------------------------

def run_requests(plan: RunPlan) -> list[dg.RunRequest]:
    selection = [dg.AssetKey(name) for name in plan.assets] if plan.assets else None
    return [dg.RunRequest(run_key=_run_key(plan, keys), job_name=plan.job, run_config=dict(plan.run_config or {}),
                          partition_key=keys[0] if len(keys) == 1 else None, tags=run_tags(plan, keys),
                          asset_selection=selection)
            for keys in plan.runs]


def partition_requests(plan: RunPlan) -> list:
    if plan.partitions is None:
        return []
    definition = dg.DynamicPartitionsDefinition(name=plan.partitions)
    return ([definition.build_add_request(plan.add)] if plan.add else []) + \
        ([definition.build_delete_request(plan.delete)] if plan.delete else [])


def sensor_result(plans: list[RunPlan], cursor: str) -> dg.SensorResult:
    return dg.SensorResult(run_requests=[r for plan in plans for r in run_requests(plan)],
                           dynamic_partitions_requests=[r for plan in plans for r in partition_requests(plan)],
                           cursor=cursor)


# -- in-process: the same jobs, executed here ----------------------------------------

@dataclass
class Launched:
    runs: int = 0
    run_ids: list[str] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)


def register(plan: RunPlan, instance: dg.DagsterInstance) -> None:
    """The plan's partition changes, made on the instance (a sensor returns them as requests)."""
    if plan.partitions is None:
        return
    existing = set(instance.get_dynamic_partitions(plan.partitions))
    new = [k for k in dict.fromkeys(plan.add) if k not in existing]
    if new:
        instance.add_dynamic_partitions(plan.partitions, new)
    for key in plan.delete:
        if key in existing:
            instance.delete_dynamic_partition(plan.partitions, key)


def open_instance(db: Database) -> dg.DagsterInstance:
    """The shared instance of `db`'s library, opened in this process (its home prepared)."""
    return prepare_dagster_home(db).instance()


def follow_ups(defs: dg.Definitions, job: str) -> list[dg.AssetKey]:
    """What the daemon's automation sensor materializes after `job`: its eager,
    unpartitioned assets downstream of the job's (the keyword lane's corpus
    statistics, the vector indexes a first sync left to be built once)."""
    graph = defs.resolve_asset_graph()
    targets = defs.resolve_sensor_def(AUTOMATION_SENSOR).asset_selection.resolve(graph)
    own = defs.resolve_job_def(job).asset_layer.selected_asset_keys
    below = dg.AssetSelection.assets(*own).downstream(include_self=False).resolve(graph)
    return sorted((k for k in below & targets
                   if not graph.get(k).is_partitioned and graph.get(k).automation_condition is not None),
                  key=lambda k: k.to_user_string())


def _assets_only(job: dg.JobDefinition, keys) -> dg.JobDefinition:
    """`job` over `keys` without their asset checks: an in-process run is the work
    itself (as `library ingest` has always run it); the checks, some of them a search
    evaluation, are the daemon's runs' and the UI's to evaluate."""
    return job.get_subset(asset_selection=set(keys), asset_check_selection=set())


def execute(plan: RunPlan, instance: dg.DagsterInstance, defs: dg.Definitions, *,
            resources: Mapping[str, object] | None = None) -> Launched:
    """Run `plan` in this process, one run after the other, recorded in `instance`
    (the runs show in the UI), then the job's automation follow-ups when anything
    ran or changed. `defs`: the code location whose job runs, bound to the library's
    settings (`library_pipeline.definitions.definitions_for`); the caller passes it, so
    this module never reaches back up to the definitions that import its sensors'
    helpers. `resources` replaces bound ones (a test's or benchmark's embedder)."""
    register(plan, instance)
    job = defs.resolve_job_def(plan.job)
    job = _assets_only(job, [dg.AssetKey(name) for name in plan.assets] if plan.assets
                       else job.asset_layer.selected_asset_keys)
    run_config = {**QUIET_RUN_CONFIG, **(plan.run_config or {})}
    launched = Launched()
    for keys in plan.runs:
        result = job.execute_in_process(run_config=run_config, instance=instance,
                                        partition_key=keys[0] if len(keys) == 1 else None,
                                        tags=run_tags(plan, keys), resources=resources, raise_on_error=False)
        launched.runs += 1
        launched.run_ids.append(result.run_id)
        if not result.success:
            launched.failed_runs.append(result.run_id)
    if plan.runs or plan.changed:
        follow_up(plan, instance, launched, defs)
    return launched


def follow_up(plan: RunPlan, instance: dg.DagsterInstance, launched: Launched, defs: dg.Definitions) -> None:
    """The automation follow-ups of `plan`'s job, as one run (none when the job has none)."""
    keys = follow_ups(defs, plan.job)
    if not keys:
        return
    result = _assets_only(defs.resolve_implicit_global_asset_job_def(), keys).execute_in_process(
        run_config=QUIET_RUN_CONFIG, instance=instance, tags={REASON_TAG: plan.reason}, raise_on_error=False)
    launched.runs += 1
    launched.run_ids.append(result.run_id)
    if not result.success:
        launched.failed_runs.append(result.run_id)


# -- ingest: what changed in the library folder -----------------------------------------

KNOWN_SQL = """
SELECT path, size_bytes, mtime FROM documents
WHERE source = 'library' AND status = 'ingested'
"""


def fingerprint(path: Path) -> str:
    try:
        st = path.lstat()
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime:.6f}"


@dataclass
class LibraryChanges:
    keys: dict[str, str]        # {relative path: partition key} of the files to run
    new: list[str]              # their keys that are not partitions yet
    changed: list[str]          # their keys that are
    removed: int                # files marked removed
    order: list[str]            # every partition key in range order, the new ones last
    cursor: dict[str, str]      # {relative path: "size:mtime"} of the folder as seen now


def _selected(root: Path, files: dict[str, Path], relpaths: list[str]) -> dict[str, Path]:
    selected: dict[str, Path] = {}
    for rel in relpaths:
        if rel in files:
            selected[rel] = files[rel]
            continue
        below = {k: v for k, v in files.items() if k.startswith(rel.rstrip("/") + "/") or rel in (".", "")}
        if not below and not (root / rel).exists():
            raise FileNotFoundError(f"{rel}: no such file in the library folder")
        selected.update(below or {rel: root / rel})
    return selected


def library_changes(db: Database, instance: dg.DagsterInstance, *, cursor: dict[str, str] | None = None,
                    relpaths: list[str] | None = None) -> LibraryChanges:
    """What to ingest. With a `cursor` (the folder sensor's: what it already
    requested), the files whose size or mtime differ from it and from their ingested
    row, and the files gone since; without (`library ingest`), every file of the
    folder or of `relpaths`, and (for the whole folder) the rows of files gone.
    Registers the files as documents and marks the gone ones removed."""
    root = db.settings.library_dir
    files = scan_library(root)
    current = {rel: fingerprint(path) for rel, path in files.items()}
    if cursor is not None:
        cursor = dict(cursor)
        unseen = [rel for rel in current if rel not in cursor]
        if unseen:
            with db.connect() as conn:
                known = {p: f"{s}:{m:.6f}" for p, s, m in conn.execute(KNOWN_SQL).fetchall() if s is not None}
            for rel in unseen:
                if known.get(rel) == current[rel]:
                    cursor[rel] = current[rel]
        selected = {rel: files[rel] for rel, fp in current.items() if cursor.get(rel) != fp}
        gone = [rel for rel in cursor if rel not in current]
    elif relpaths is None:
        selected = files
        with db.connect() as conn:
            known_paths = [r[0] for r in conn.execute(
                "SELECT path FROM documents WHERE source = 'library' AND status <> 'removed'")]
        gone = [p for p in known_paths if p not in files]
    else:
        selected, gone = _selected(root, files, relpaths), []
    keys = register_files(db, selected) if selected else {}
    partitions = instance.get_dynamic_partitions(LIBRARY_FILES)
    existing = set(partitions)
    new = [k for k in dict.fromkeys(keys.values()) if k not in existing]
    changed = [k for k in keys.values() if k in existing]
    removed = mark_removed(db, gone) if gone else 0
    return LibraryChanges(keys=keys, new=new, changed=changed, removed=removed, order=list(partitions) + new,
                          cursor=current)


def ingest_plan(changes: LibraryChanges, reason: str, *, batch: int = RANGE_SIZE, force: bool = False,
                in_order: bool = False) -> RunPlan:
    """The files of `changes` as runs of contiguous ranges, at most `batch` long: keys up
    to three apart share a range (in-process runs one after another), or with
    `in_order` every run exactly `batch` files in partition order (the celery runs)."""
    wanted = set(changes.keys.values())
    runs = (chunked([k for k in changes.order if k in wanted], batch) if in_order
            else contiguous_spans(list(changes.keys.values()), changes.order, batch))
    run_config = ({"ops": {name: {"config": {"force": True}} for name in ("extracted_text", "chunks", "embeddings")}}
                  if force else None)
    return RunPlan(INGEST_JOB, runs, reason, run_config=run_config, partitions=LIBRARY_FILES, add=changes.new,
                   changed=changes.removed > 0)


def ingest_sensor_plans(changes: LibraryChanges) -> list[RunPlan]:
    """New files (contiguous: added in one request) in ranges of RANGE_SIZE; changed
    files, scattered in partition order, as `run_plan.plan_ranges` groups them."""
    return [RunPlan(INGEST_JOB, chunked(changes.new), "new", partitions=LIBRARY_FILES, add=changes.new,
                    run_key="new"),
            RunPlan(INGEST_JOB, plan_ranges(changes.changed, changes.order), "changed", run_key="changed")]


def reconcile_plan(keys: list[str], stamp: str | None = None) -> RunPlan:
    """Every file partition in contiguous ranges, in the maintenance lane."""
    return RunPlan(INGEST_JOB, chunked(keys), "reconcile", lane=MAINTENANCE_LANE,
                   run_key=f"{stamp}:reconcile" if stamp else "reconcile")


def cursor_text(changes: LibraryChanges) -> str:
    return json.dumps(changes.cursor, sort_keys=True)


# -- vault: what a sync changed -------------------------------------------------------

def vault_changes(db: Database, sync: SyncPlan, trigger: str, instance: dg.DagsterInstance, *,
                  batch: int | None = None) -> tuple[AppliedSync, RunPlan]:
    """A sync the vault domain planned (`plan_sync`: the git-push sensor from its cursor,
    `library vault sync` from the last synced commit), applied to the documents rows and
    turned into runs (`vault_plan`); the sync records how many runs it waits for."""
    applied = apply_plan(db, sync, trigger)
    runs = vault_plan(applied, sync.head, trigger, instance.get_dynamic_partitions(VAULT_NOTES), batch=batch)
    set_runs(db, applied.sync_id, len(runs.runs))
    return applied, runs


def vault_plan(applied: AppliedSync, commit: str, trigger: str, partitions: list[str], *,
               batch: int | None = None) -> RunPlan:
    """The notes a sync applied as runs of `vault_sync`: in a sensor (no `batch`) one
    run per note for a handful, else the span covering them in ranges (the notes in
    between ride along and skip on their unchanged blob); in-process, contiguous
    ranges of at most `batch`. Renamed-away notes leave the partitions."""
    keys = list(dict.fromkeys(applied.keys))
    existing = set(partitions)
    add = [k for k in keys if k not in existing]
    delete = [k for k in applied.old_keys if k in existing and k not in keys]
    order = [k for k in partitions if k not in delete] + add
    if not keys:
        runs = []
    elif batch is None:
        runs = plan_ranges(keys, order)
    else:
        runs = contiguous_spans(keys, order, batch)
    return RunPlan(VAULT_JOB, runs, trigger, tags={"vault/sync": str(applied.sync_id), "vault/commit": commit},
                   partitions=VAULT_NOTES, add=add, delete=delete, run_key=f"vault:{applied.sync_id}",
                   changed=applied.removed > 0)


# -- enrich: the files summary trees and the graph cover --------------------------------

def enrich_keys(instance: dg.DagsterInstance, db: Database | None = None) -> list[str]:
    """The library partitions to enrich, in order: every one, or with `db` the ingested ones."""
    partitions = instance.get_dynamic_partitions(LIBRARY_FILES)
    if db is None:
        return list(partitions)
    with db.connect() as conn:
        wanted = {r[0] for r in conn.execute(
            "SELECT partition_key FROM documents WHERE source = 'library' AND status = 'ingested'")}
    return [k for k in partitions if k in wanted]


def enrich_plan(keys: list[str], reason: str, *, run_config: Mapping | None = None,
                assets: list[str] | None = None) -> RunPlan:
    """One range run over `keys` in the enrich lane."""
    return RunPlan(ENRICH_JOB, [keys] if keys else [], reason, lane=ENRICH_LANE, run_config=run_config,
                   assets=assets)
