"""The library-folder sensor: new, changed and removed files.

Cursor = {relative path: "size:mtime"} of what it has already requested. A
file the database already holds as ingested with the same size and mtime is
known even with an empty cursor, so enabling the sensor on an ingested
library requests nothing.

One add request plus a few range requests keeps a tick at ~20 ms on the 2-core box
(library_pipeline.run_plan has the measurement): new files, added in one request and
so contiguous in partition order, go out in ranges of at most RANGE_SIZE; changed
files, scattered in that order, as `run_plan.plan_ranges` groups them.
"""


import json
from pathlib import Path

import dagster as dg

from library_pipeline.defs.ingest.assets import ingest_job
from library_pipeline.defs.ingest.partitions import library_files_partitions, scan_library
from library_pipeline.ingest.store import mark_removed, register_files
from library_pipeline.resources import LibraryDatabase
from library_pipeline.run_plan import RANGE_SIZE, MAX_SINGLE_REQUESTS, chunked, plan_ranges, range_request

__all__ = ["MAX_SINGLE_REQUESTS", "RANGE_SIZE", "library_folder_sensor", "plan_runs", "range_request"]

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


def plan_runs(new_keys: list[str], changed_keys: list[str], key_order: list[str]) -> list[dg.RunRequest]:
    return ([range_request(part, "new") for part in chunked(new_keys)]
            + [range_request(part, "changed") for part in plan_ranges(changed_keys, key_order)])


@dg.sensor(
    job=ingest_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Watches the library folder: registers new files as partitions and ingests them in "
                "batched range runs, re-ingests changed files, marks removed files `removed`.",
)
def library_folder_sensor(context: dg.SensorEvaluationContext, library_db: LibraryDatabase) -> dg.SensorResult:
    db = library_db.get()
    root = Path(library_db.library_dir)
    cursor: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    files = scan_library(root)
    current = {rel: fingerprint(path) for rel, path in files.items()}

    unseen = [rel for rel in current if rel not in cursor]
    if unseen:
        with db.connect() as conn:
            known = {p: f"{s}:{m:.6f}" for p, s, m in conn.execute(KNOWN_SQL).fetchall() if s is not None}
        for rel in unseen:
            if known.get(rel) == current[rel]:
                cursor[rel] = current[rel]
    new_or_changed = {rel: files[rel] for rel, fp in current.items() if cursor.get(rel) != fp}
    removed = [rel for rel in cursor if rel not in current]

    keys = register_files(db, new_or_changed) if new_or_changed else {}
    existing = set(context.instance.get_dynamic_partitions(library_files_partitions.name))
    to_add = [k for k in keys.values() if k not in existing]
    changed = [k for k in keys.values() if k in existing]
    key_order = context.instance.get_dynamic_partitions(library_files_partitions.name) + to_add
    n_removed = mark_removed(db, removed)

    if to_add or changed or removed:
        context.log.info(f"library folder: {len(to_add)} new, {len(changed)} changed, "
                         f"{n_removed} removed, {len(current)} files")
    return dg.SensorResult(
        run_requests=plan_runs(to_add, changed, key_order),
        dynamic_partitions_requests=[library_files_partitions.build_add_request(to_add)] if to_add else [],
        cursor=json.dumps(current, sort_keys=True),
    )
