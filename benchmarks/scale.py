"""Dagster at library scale: 10,000 file partitions, and the executors on 2 cores.

Everything runs against a throwaway embedded PostgreSQL with the same
Postgres-backed Dagster instance `library up` uses (prepare_dagster_home), so
the figures include real storage round trips:

1. sensor: 10,000 tiny text files in a temp folder; `library_folder_sensor`
   ticks (first enable: every file new; steady state: nothing changed; 10
   files touched), with the tick's dynamic-partition add applied as the
   daemon would apply it;
2. partition status: with 10,000 partitions registered and a share of them
   materialized (runless materialization events), the queries the UI's
   Partitions tab and the catalog make: the dynamic partition keys, the
   materialized-partition set, and the partition status cache
   (`get_and_update_asset_status_cache_value`, what the UI's partition
   health bar reads);
3. executors: the ingest assets over a few small files through the CLI
   (`dagster asset materialize --partition-range`, as an operator would),
   once with the in-process executor (sequential steps in one process) and
   once with the default multiprocess executor (one process per step), plus
   two concurrent in-process range runs over halves (what the run queue
   does with two free slots).

    .venv/bin/python benchmarks/scale.py                  # all of it
    .venv/bin/python benchmarks/scale.py --files 10000 --skip-executors
    .venv/bin/python benchmarks/scale.py --json out.json

The 1M-passage search measurement is benchmarks/search.py --rows 1000000 (figures in
docs/operations.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("benchmarks.scale")


def _timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def make_files(folder: Path, n: int) -> None:
    for i in range(n):
        sub = folder / f"shelf{i // 1000:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"note {i:05d}.txt").write_text(f"Note {i}: harbour tides and lighthouse keepers, entry {i}.\n")


def bench_sensor_and_status(home: Path, n_files: int, n_materialized: int) -> dict:
    import dagster as dg

    from library_pipeline.instance.home import prepare_dagster_home
    from library_pipeline.defs.ingest.partitions import library_files_partitions
    from library_pipeline.defs.ingest.sensors import library_folder_sensor
    from library_pipeline.resources import LibraryDatabase
    from serving.db import Database
    from serving.settings import Settings

    library = home / "library"
    make_files(library, n_files)
    settings = Settings(library_dir=library, home=home)
    db = Database(settings)
    db.ensure_schema()
    dagster_home = prepare_dagster_home(db, home / "dagster")
    figures: dict = {"files": n_files}
    resources = {"library_db": LibraryDatabase.from_settings(settings)}
    with dagster_home.instance() as instance:
        def tick(cursor):
            with dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
                return library_folder_sensor(ctx)

        first, figures["sensor_first_tick_s"] = _timed(tick, None)
        figures["first_tick_run_requests"] = len(first.run_requests)
        (add,) = first.dynamic_partitions_requests
        _, figures["add_partitions_s"] = _timed(
            instance.add_dynamic_partitions, library_files_partitions.name, list(add.partition_keys))
        steady_times = []
        cursor = first.cursor
        for _ in range(3):
            steady, seconds = _timed(tick, cursor)
            steady_times.append(seconds)
            cursor = steady.cursor
        figures["sensor_steady_tick_s"] = round(statistics.median(steady_times), 3)
        figures["steady_tick_run_requests"] = len(steady.run_requests)
        for path in sorted(library.rglob("*.txt"))[:10]:
            path.write_text(path.read_text() + "edited\n")
        changed, figures["sensor_10_changed_tick_s"] = _timed(tick, cursor)
        figures["changed_tick_run_requests"] = len(changed.run_requests)

        # partition status with a share of the partitions materialized
        keys = instance.get_dynamic_partitions(library_files_partitions.name)
        started = time.perf_counter()
        for key in keys[:n_materialized]:
            instance.report_runless_asset_event(dg.AssetMaterialization("extracted_text", partition=key))
        write_s = time.perf_counter() - started
        figures["materialized"] = n_materialized
        figures["materialization_event_write_ms"] = round(1000 * write_s / max(n_materialized, 1), 2)

        from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value

        asset_key = dg.AssetKey("extracted_text")
        _, figures["get_dynamic_partitions_s"] = _timed(instance.get_dynamic_partitions,
                                                        library_files_partitions.name)
        mat, figures["materialized_partitions_query_s"] = _timed(instance.get_materialized_partitions, asset_key)
        assert len(mat) == n_materialized, len(mat)

        def status():
            return get_and_update_asset_status_cache_value(instance, asset_key, library_files_partitions)

        _, figures["partition_status_cold_s"] = _timed(status)
        _, figures["partition_status_warm_s"] = _timed(status)
    db.stop()
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}


# every variant redoes the full work (force), so they compare like for like
FORCE = {"ops": {name: {"config": {"force": True}} for name in ("extracted_text", "chunks", "embeddings")}}


def _materialize_argv(start: str, end: str, in_process: bool) -> list[str]:
    config = dict(FORCE, execution={"config": {"in_process": {}}}) if in_process else FORCE
    return [str(Path(sys.executable).parent / "dagster"), "asset", "materialize",
            "-m", "library_pipeline.definitions", "-a", "defs",
            "--select", "extracted_text,chunks,embeddings", "--partition-range", f"{start}...{end}",
            "--config-json", json.dumps(config)]


def _materialize_cli(env: dict, start: str, end: str, in_process: bool) -> float:
    started = time.perf_counter()
    proc = subprocess.run(_materialize_argv(start, end, in_process), env=env, cwd=REPO, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"materialize failed: {proc.stderr[-2000:]}")
    return seconds


def bench_executors(home: Path, n_files: int) -> dict:
    from library_pipeline.instance.home import prepare_dagster_home
    from library_pipeline.defs.ingest.partitions import library_files_partitions
    from library_pipeline.ingest.store import register_files
    from library_pipeline.defs.ingest.partitions import scan_library
    from serving.db import Database
    from serving.settings import Settings

    library = home / "library"
    library.mkdir(parents=True, exist_ok=True)
    for i in range(n_files):
        paragraphs = "\n\n".join(f"Paragraph {p} of note {i}: the harbour master logs tides, ships and the "
                                 f"lighthouse keeper's reports, day {p}." for p in range(40))
        (library / f"note {i:02d}.md").write_text(f"# Note {i}\n\n{paragraphs}\n")
    settings = Settings(library_dir=library, home=home)
    db = Database(settings)
    db.ensure_schema()
    dagster_home = prepare_dagster_home(db, home / "dagster")
    env = dict(os.environ, **dagster_home.env(), LIBRARY_HOME=str(home), LIBRARY_DIR=str(library),
               HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    keys = list(register_files(db, scan_library(library)).values())
    with dagster_home.instance() as instance:
        instance.add_dynamic_partitions(library_files_partitions.name, keys)
        keys = instance.get_dynamic_partitions(library_files_partitions.name)
    figures: dict = {"files": n_files}
    # warm-up (page cache, first embedder load), not counted
    _materialize_cli(env, keys[0], keys[-1], in_process=True)
    figures["cli_in_process_s"] = round(_materialize_cli(env, keys[0], keys[-1], in_process=True), 2)
    figures["cli_multiprocess_s"] = round(_materialize_cli(env, keys[0], keys[-1], in_process=False), 2)
    half = len(keys) // 2
    started = time.perf_counter()
    procs = []
    for lo, hi in ((0, half - 1), (half, len(keys) - 1)):
        procs.append(subprocess.Popen(_materialize_argv(keys[lo], keys[hi], in_process=True), env=env, cwd=REPO,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(err[-2000:])
    figures["two_parallel_in_process_runs_s"] = round(time.perf_counter() - started, 2)
    with db.connect() as conn:
        figures["passages"] = conn.execute("SELECT count(*) FROM passages").fetchone()[0]
    db.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--materialized", type=int, default=1_000,
                        help="partitions given a materialization before the status queries")
    parser.add_argument("--executor-files", type=int, default=4)
    parser.add_argument("--skip-sensor", action="store_true")
    parser.add_argument("--skip-executors", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results: dict = {}
    for name, enabled, fn, n in (("sensor_and_status", not args.skip_sensor, bench_sensor_and_status, args.files),
                                 ("executors", not args.skip_executors, bench_executors, args.executor_files)):
        if not enabled:
            continue
        # Postgres runs as another user when we are root: a 0755 home outside /tmp/pytest-*
        home = Path(tempfile.mkdtemp(prefix=f"library-scale-{name}-"))
        home.chmod(0o755)
        try:
            if fn is bench_sensor_and_status:
                results[name] = fn(home, n, min(args.materialized, n))
            else:
                results[name] = fn(home, n)
        finally:
            shutil.rmtree(home, ignore_errors=True)
        print(json.dumps({name: results[name]}, indent=2), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
