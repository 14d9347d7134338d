"""Ingest through Dagster's celery executor: the run's steps go to a Redis queue
and execute in `dagster-celery` worker processes, which share the run storage
(an external PostgreSQL, LIBRARY_DAGSTER_DSN) and the library database
(LIBRARY_DB_DSN) with the process that launched the run.

Not part of the main code location (`library_pipeline.definitions`), which must
load without dagster-celery: this module is its own code location for a celery
deployment, and the target workers reconstruct the job from.

    # workers (each its own process; same environment as the launcher)
    dagster-celery worker start -A dagster_celery.app -y deploy/celery/run_config.yaml -n w1
    # a library ingest through them
    python -m library_pipeline.celery_ingest ingest --config deploy/celery/run_config.yaml

An ingest range runs its three steps (extract -> chunk -> embed) one after the
other, so one run keeps one worker busy: `run_ingest_celery` splits the files into
contiguous partition ranges and keeps `parallel` runs in flight, one per worker.

Failure isolation, in three layers:
- a bad file fails alone inside its step (recorded `failed` with its reason; the
  step and the run go on), as in-process;
- a run whose step died with its worker (the process executing it was killed:
  celery reports WorkerLostError, the run fails) is run again once: files that
  finished skip on their content hash, the file that was being written had not
  committed its swap (one transaction per file), so it is redone from scratch;
- a range that fails twice is split into one run per unfinished file, and a file
  whose own run still cannot finish is recorded `failed` with the run's error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import yaml
from dagster_celery import celery_executor

from library_pipeline.dagster_home import prepare_dagster_home
from library_pipeline.defs.ingest.assets import chunks, embeddings, extracted_text
from library_pipeline.defs.ingest.store import record_failure_by_key
from library_pipeline.resources import EmbedderResource, LibraryDatabase
from library_pipeline.run_plan import range_tags
from serving.db import Database
from serving.settings import Settings, get_settings

log = logging.getLogger(__name__)

CELERY_JOB = "ingest_files_celery"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_RUN_CONFIG = REPO / "deploy" / "celery" / "run_config.yaml"

ingest_celery_job = dg.define_asset_job(
    CELERY_JOB,
    selection=dg.AssetSelection.assets(extracted_text, chunks, embeddings),
    executor_def=celery_executor,
    description="The ingest assets with each step sent to a celery worker (Redis broker).",
)


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    settings = settings or get_settings()
    return dg.Definitions(
        assets=[extracted_text, chunks, embeddings],
        jobs=[ingest_celery_job],
        resources={"library_db": LibraryDatabase.from_settings(settings),
                   "embedder": EmbedderResource.from_settings(settings)},
    )


_built: list[dg.Definitions] = []


def _defs() -> dg.Definitions:
    if not _built:
        _built.append(build_definitions())
    return _built[0]


def __getattr__(name: str) -> dg.Definitions:
    """`defs`, built on first access (the code location loads it) rather than at
    import: the settings are read when a process starts using them."""
    if name == "defs":
        return _defs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ingest_job() -> dg.JobDefinition:
    """The reconstructable target: workers import this module and call it."""
    return _defs().resolve_job_def(CELERY_JOB)


def load_run_config(path: Path = DEFAULT_RUN_CONFIG) -> dict:
    """The run config file: its `execution` block is also what the workers are
    started with (`dagster-celery worker start -y`), so both sides agree on the
    broker, the result backend and the task settings."""
    config = yaml.safe_load(path.read_text()) or {}
    config.setdefault("loggers", {"console": {"config": {"log_level": "WARNING"}}})
    return config


# -- one run ---------------------------------------------------------------------------

def execute_range(first: str, last: str, run_config: dict, reason: str = "celery") -> tuple[bool, str, str]:
    """One range run through the celery executor, in this process (the run's
    orchestrator: it submits the steps and waits for their results).
    Returns (success, run id, error text)."""
    tags = {"library/reason": reason}
    if first == last:
        tags["dagster/partition"] = first
    else:
        tags.update(range_tags([first, last]))
    with dg.DagsterInstance.get() as instance:
        result = dg.execute_job(dg.reconstructable(ingest_job), instance=instance, run_config=run_config,
                                tags=tags, raise_on_error=False)
        error = ""
        if not result.success:
            failures = [e for e in result.all_events if e.is_failure]
            error = "; ".join(" ".join(str(e.message or "").split())[:300] for e in failures[-3:])
        return result.success, result.run_id, error


def _launch(first: str, last: str, config_path: Path, reason: str) -> dict:
    """A range run in its own process: Dagster's run orchestration is not made for
    several runs in one interpreter at once."""
    proc = subprocess.run([sys.executable, "-m", "library_pipeline.celery_ingest", "run-range", first, last,
                           "--config", str(config_path), "--reason", reason],
                          capture_output=True, text=True, cwd=str(REPO))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    return {"success": False, "run_id": "", "error": f"launcher exited {proc.returncode}: "
            + " ".join(proc.stderr.split()[-60:])}


# -- a library ---------------------------------------------------------------------------

def _unfinished(db: Database, keys: list[str]) -> list[str]:
    """Files of `keys` that neither hold current passages nor failed with a reason."""
    with db.connect() as conn:
        return [r[0] for r in conn.execute(
            "SELECT partition_key FROM documents WHERE source = 'library' AND partition_key = ANY(%s) "
            "AND status NOT IN ('failed', 'removed') "
            "AND (status = 'pending' OR content_hash IS NULL OR indexed_hash IS DISTINCT FROM content_hash)",
            (keys,)).fetchall()]


def run_ingest_celery(db: Database, *, config_path: Path = DEFAULT_RUN_CONFIG, parallel: int = 2,
                      batch: int | None = None) -> dict:
    """Ingest the whole library folder through the celery workers, `parallel` runs
    in flight. Returns the same summary as `run_ingest` plus the runs' history."""
    from library_pipeline.ingest_runner import ingest_summary, refresh_lexeme_statistics, register_library

    started = time.perf_counter()
    prepare_dagster_home(db)
    with dg.DagsterInstance.get() as instance:
        keys, order, removed = register_library(db, instance)
    wanted = [k for k in order if k in set(keys.values())]
    batch = batch or max(1, -(-len(wanted) // (2 * parallel)))  # two rounds per worker
    spans = [wanted[i:i + batch] for i in range(0, len(wanted), batch)]
    history: list[dict] = []

    def attempt(span: list[str], reason: str) -> dict:
        outcome = _launch(span[0], span[-1], config_path, reason)
        outcome.update(first=span[0], last=span[-1], files=len(span), reason=reason)
        history.append(outcome)
        return outcome

    def one_span(span: list[str]) -> None:
        outcome = attempt(span, "celery")
        if outcome["success"] and not _unfinished(db, span):
            return
        if _unfinished(db, span):
            log.warning("range %s..%s did not finish (%s); running it again", span[0], span[-1],
                        outcome.get("error"))
            attempt(span, "celery-retry")
        for key in _unfinished(db, span):
            single = attempt([key], "celery-single")
            if key in _unfinished(db, [key]):
                record_failure_by_key(db, key, "could not be ingested through the celery workers "
                                               f"(three runs failed; last: {single.get('error') or 'no error text'})")

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(one_span, spans))

    with dg.DagsterInstance.get() as instance:
        refresh_lexeme_statistics(instance, LibraryDatabase.from_settings(db.settings), reason="celery")
    return {**ingest_summary(db, keys, removed), "runs": history, "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run-range", help="one range run (prints a JSON line)")
    one.add_argument("first")
    one.add_argument("last")
    one.add_argument("--config", type=Path, default=DEFAULT_RUN_CONFIG)
    one.add_argument("--reason", default="celery")
    worker = sub.add_parser("worker", help="a celery worker for these runs: `dagster-celery worker start` "
                                           "with DAGSTER_HOME prepared for the library's database")
    worker.add_argument("--config", type=Path, default=DEFAULT_RUN_CONFIG)
    worker.add_argument("--name", "-n", required=True)
    worker.add_argument("celery_args", nargs="*", help="after --: passed to `celery worker`")
    every = sub.add_parser("ingest", help="the whole library folder through the workers")
    every.add_argument("--config", type=Path, default=DEFAULT_RUN_CONFIG)
    every.add_argument("--parallel", type=int, default=2, help="runs in flight (one per worker)")
    every.add_argument("--batch", type=int, default=None, help="files per run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    db = Database(get_settings())
    prepare_dagster_home(db)
    if args.command == "worker":
        # the worker's tasks open the run storage from the instance the launcher
        # describes (DAGSTER_HOME/dagster.yaml, its URL read from the environment):
        # prepare_dagster_home sets both, as the launcher does
        venv_bin = str(Path(sys.executable).parent)
        os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
        cli = Path(venv_bin) / "dagster-celery"
        command = [str(cli), "worker", "start", "-A", "dagster_celery.app", "-y", str(args.config),
                   "-n", args.name, "--", "--pool", "prefork", "--concurrency", "1", *args.celery_args]
        os.execv(command[0], command)
    if args.command == "run-range":
        success, run_id, error = execute_range(args.first, args.last, load_run_config(args.config), args.reason)
        print(json.dumps({"success": success, "run_id": run_id, "error": error}))
        return 0 if success else 1
    summary = run_ingest_celery(db, config_path=args.config, parallel=args.parallel, batch=args.batch)
    print(json.dumps(summary, default=str))
    return 0 if not summary["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
