"""Ingest through Dagster's celery executor (~400 lines, one responsibility: a celery
deployment's code location, its launcher and the failure handling below): the run's steps
go to a Redis queue and execute in `dagster-celery` worker processes, which share the run storage
(an external PostgreSQL, LIBRARY_DAGSTER_DSN) and the library database
(LIBRARY_DB_DSN) with the process that launched the run.

Not part of the main code location (`library_pipeline.definitions`), which must
load without dagster-celery: this module is its own code location for a celery
deployment, and the target workers reconstruct the job from.

    # workers (each its own process; same environment as the launcher)
    dagster-celery worker start -A dagster_celery.app -y deploy/celery/run_config.yaml -n w1
    # a library ingest through them
    python -m library_pipeline.launch.celery_ingest ingest --config deploy/celery/run_config.yaml

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
- a run whose step was running on a worker that is gone as a whole (its main
  process killed too, the machine lost: with early acks the task is lost with it,
  no result ever comes and the run would wait forever) is found by the launcher's
  watchdog: the worker that started the step (its "Executing steps" event in the
  run's event log) no longer answers celery pings. The run's orchestrator is
  stopped, the run is marked failed with that reason and run again, on the workers
  that remain;
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
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import yaml
from dagster_celery import celery_executor

from library_pipeline.launch import plans as launch
from library_pipeline.instance.home import DagsterHome, prepare_dagster_home
from library_pipeline.definitions import build_resources, definitions_for
from library_pipeline.defs.ingest.assets import chunks, embeddings, extracted_text
from library_pipeline.defs.ingest.assets import ingest_job as ingest_files_job
from library_pipeline.documents import record_failure_by_key
from serving.db import Database
from serving.settings import Settings, get_settings

log = logging.getLogger(__name__)

CELERY_JOB = launch.INGEST_JOB   # the same job as the main location's, on another executor
REPO = Path(__file__).resolve().parents[2]
DEFAULT_RUN_CONFIG = REPO / "deploy" / "celery" / "run_config.yaml"


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    """The ingest job of the main location with the celery executor: each step goes to
    a worker. Its resources are the main location's (library_pipeline.definitions)."""
    resources = build_resources(settings)
    return dg.Definitions(
        assets=[extracted_text, chunks, embeddings],
        jobs=[ingest_files_job],
        resources={name: resources[name] for name in ("library_db", "embedder")},
        executor=celery_executor,
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

def execute_range(home: DagsterHome, first: str, last: str, run_config: dict, reason: str = "celery",
                  attempt: str | None = None) -> tuple[bool, str, str]:
    """One range run through the celery executor, in this process (the run's
    orchestrator: it submits the steps and waits for their results).
    Returns (success, run id, error text)."""
    plan = launch.RunPlan(CELERY_JOB, [], reason, tags={ATTEMPT_TAG: attempt} if attempt else {})
    tags = launch.run_tags(plan, [first] if first == last else [first, last])
    # opened from dagster.yaml, not with the URL in hand: the celery executor sends this
    # instance's reference to the workers, which resolve the URL from their environment
    with dg.DagsterInstance.from_config(str(home.path)) as instance:
        result = dg.execute_job(dg.reconstructable(ingest_job), instance=instance, run_config=run_config,
                                tags=tags, raise_on_error=False)
        error = ""
        if not result.success:
            failures = [e for e in result.all_events if e.is_failure]
            error = "; ".join(" ".join(str(e.message or "").split())[:300] for e in failures[-3:])
        return result.success, result.run_id, error


ATTEMPT_TAG = "library/attempt"   # one per launch: the watchdog finds the run by it
WATCH_EVERY_S = 5.0               # how often the watchdog looks at a run in flight
WORKER_LOST_AFTER_S = 20.0        # a worker missing from every ping for this long is gone
NO_WORKER_TIMEOUT_S = 600.0       # no worker at all answered for this long: the run cannot go on


def _broker_urls(run_config: dict) -> tuple[str | None, str | None]:
    """The executor's broker and result backend, as the run config gives them ({env: VAR} or a URL)."""
    config = (run_config.get("execution") or {}).get("config") or {}

    def value(raw):
        if isinstance(raw, dict) and "env" in raw:
            return os.environ.get(raw["env"])
        return raw

    return value(config.get("broker")), value(config.get("backend"))


class WorkerRoster:
    """Which celery workers answer a ping; one ping at most every WATCH_EVERY_S for
    all the runs in flight (the launcher's threads share it)."""

    def __init__(self, broker: str | None, backend: str | None) -> None:
        from celery import Celery

        self.app = Celery("library-watchdog", broker=broker, backend=backend)
        self._lock = threading.Lock()
        self.last_seen: dict[str, float] = {}
        self.first_ping: float | None = None   # the first ping that got through the broker
        self.last_ping: float | None = None
        self.last_any: float | None = None     # the last time any worker answered
        self.idle_since: float | None = None   # since when every answering worker runs no task

    def refresh(self) -> None:
        with self._lock:
            now = time.monotonic()
            if self.last_ping is not None and now - self.last_ping < WATCH_EVERY_S:
                return
            try:
                replies = self.app.control.ping(timeout=2.0)
            except Exception as exc:  # the broker itself is unreachable: say nothing about workers
                log.warning("watchdog: celery ping failed (%s: %s)", type(exc).__name__, exc)
                return
            now = time.monotonic()
            self.first_ping = self.first_ping or now
            self.last_ping = now
            for reply in replies:
                for name in reply:
                    self.last_seen[name] = now
            if replies:
                self.last_any = now
            # what the workers run only matters once one has gone missing (all_idle is
            # asked only then), so the inspect broadcast is skipped while all answer
            missing = any(seen < now for seen in self.last_seen.values())
            self.idle_since = self._idle_since(now) if replies and missing else None

    def _idle_since(self, now: float) -> float | None:
        try:
            active = self.app.control.inspect(timeout=2.0).active() or {}
        except Exception as exc:
            log.warning("watchdog: celery inspect failed (%s: %s)", type(exc).__name__, exc)
            return None
        return None if any(active.values()) else (self.idle_since or now)

    def lost_workers(self) -> list[str]:
        return sorted(w for w in self.last_seen if self.gone(w))

    def all_idle(self) -> bool:
        """True when every worker that answers has run no task for WORKER_LOST_AFTER_S.
        Prefetch is off, so an idle worker takes a queued step at once: a step handed
        to celery that no one runs through such a stretch went to a worker now lost."""
        return (self.idle_since is not None and self.last_ping is not None
                and self.last_ping - self.idle_since >= WORKER_LOST_AFTER_S)

    def gone(self, worker: str) -> bool:
        """True when pings have got through for WORKER_LOST_AFTER_S and `worker` answered none of them."""
        if self.last_ping is None:
            return False
        seen = self.last_seen.get(worker, self.first_ping)
        return self.last_ping - seen >= WORKER_LOST_AFTER_S

    def none_left(self) -> bool:
        if self.last_ping is None:
            return False
        return self.last_ping - (self.last_any or self.first_ping) >= NO_WORKER_TIMEOUT_S


def _step_on_worker(instance: dg.DagsterInstance, run_id: str) -> tuple[str, str] | None:
    """(step key, worker) of the run's step a celery worker started and has not
    finished: the worker writes an "Executing steps … in celery worker" engine event
    (with its node name) to the run's event log when it starts the step."""
    from dagster._core.events import DagsterEventType

    started: dict[str, str] = {}
    finished: set[str] = set()
    records = instance.get_records_for_run(
        run_id, of_type={DagsterEventType.ENGINE_EVENT, DagsterEventType.STEP_SUCCESS,
                         DagsterEventType.STEP_FAILURE}).records
    for record in records:
        event = record.event_log_entry.dagster_event
        if event is None or not event.step_key:
            continue
        if event.event_type == DagsterEventType.ENGINE_EVENT:
            metadata = event.engine_event_data.metadata or {}
            worker = metadata.get("Celery worker")
            if worker is not None:
                started[event.step_key] = str(getattr(worker, "value", worker))
        else:
            finished.add(event.step_key)
    running = [(key, worker) for key, worker in started.items() if key not in finished]
    return running[-1] if running else None


def _silent_for(instance: dg.DagsterInstance, run_id: str) -> float:
    """Seconds since the run's last event."""
    last = instance.get_records_for_run(run_id, limit=1, ascending=False).records
    return time.time() - last[0].event_log_entry.timestamp if last else 0.0


def _lost(instance: dg.DagsterInstance, roster: WorkerRoster, attempt: str) -> tuple[dg.DagsterRun, str] | None:
    """The run of this launch and why it cannot finish, or None while it can."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={ATTEMPT_TAG: attempt}), limit=1)
    if not runs or runs[0].is_finished:
        return None
    run = runs[0]
    roster.refresh()
    holder = _step_on_worker(instance, run.run_id)
    if holder is not None and roster.gone(holder[1]):
        return run, (f"celery worker {holder[1]} was lost while running step {holder[0]} "
                     f"(no answer to pings for {WORKER_LOST_AFTER_S:.0f} s)")
    # A worker can die holding a step without its name on it: after taking the step
    # from the queue but before starting it, or after the step's success was written
    # but before its result reached the run. Either way the run waits for that result
    # forever, with no step running, no worker busy and nothing written to its log.
    lost = roster.lost_workers()
    if (holder is None and lost and roster.all_idle()
            and _silent_for(instance, run.run_id) >= WORKER_LOST_AFTER_S):
        return run, (f"celery worker {', '.join(lost)} was lost while holding a step of this run "
                     f"(no step running, every worker that answers idle and the run silent for "
                     f"{WORKER_LOST_AFTER_S:.0f} s)")
    if roster.none_left():
        return run, f"no celery worker answered for {NO_WORKER_TIMEOUT_S:.0f} s"
    return None


def _launch(home: DagsterHome, instance: dg.DagsterInstance, first: str, last: str, config_path: Path,
            reason: str, roster: WorkerRoster | None = None) -> dict:
    """A range run in its own process: Dagster's run orchestration is not made for
    several runs in one interpreter at once. With `roster`, a watchdog stops the run
    when the worker running its step is gone (see `_lost`)."""
    attempt = uuid.uuid4().hex
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "library_pipeline.launch.celery_ingest", "run-range", first, last,
                                 "--config", str(config_path), "--reason", reason, "--attempt", attempt],
                                stdout=out, stderr=err, text=True, cwd=str(REPO), env={**os.environ, **home.env()})
        lost = None
        if roster is None:
            proc.wait()
        else:
            while proc.poll() is None:
                try:
                    proc.wait(timeout=WATCH_EVERY_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                try:
                    lost = _lost(instance, roster, attempt)
                except Exception as exc:  # the watchdog must never be what stops a run
                    log.warning("watchdog: %s: %s", type(exc).__name__, exc)
                    continue
                if lost is not None:
                    run, why = lost
                    log.warning("run %s (%s..%s): %s; stopping it", run.run_id, first, last, why)
                    # the orchestrator only waits for a result that will never come: SIGTERM
                    # would make it wait for that result before exiting
                    proc.kill()
                    proc.wait()
                    instance.report_run_failed(run, why)
                    return {"success": False, "run_id": run.run_id, "error": why, "lost": True}
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    return {"success": False, "run_id": "", "error": f"launcher exited {proc.returncode}: "
            + " ".join(stderr.split()[-60:])}


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
                      batch: int | None = None, home: DagsterHome | None = None) -> dict:
    """Ingest the whole library folder through the celery workers, `parallel` runs
    in flight. Returns the same summary as `run_ingest` plus the runs' history."""
    from library_pipeline.launch.ingest_runner import ingest_summary

    started = time.perf_counter()
    home = home or prepare_dagster_home(db)
    instance = home.instance()
    changes = launch.library_changes(db, instance)
    batch = batch or max(1, -(-len(set(changes.keys.values())) // (2 * parallel)))  # two rounds per worker
    plan = launch.ingest_plan(changes, "celery", batch=batch, in_order=True)
    launch.register(plan, instance)
    history: list[dict] = []
    roster = WorkerRoster(*_broker_urls(load_run_config(config_path)))

    def attempt(span: list[str], reason: str) -> dict:
        outcome = _launch(home, instance, span[0], span[-1], config_path, reason, roster)
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
            outcome = attempt(span, "celery-retry")
        if outcome.get("error", "").startswith("no celery worker answered"):
            # a run per file would wait as long again for each: the files fail now, with the reason
            for key in _unfinished(db, span):
                record_failure_by_key(db, key, f"could not be ingested: {outcome['error']}")
            return
        for key in _unfinished(db, span):
            single = attempt([key], "celery-single")
            if key in _unfinished(db, [key]):
                record_failure_by_key(db, key, "could not be ingested through the celery workers "
                                               f"(three runs failed; last: {single.get('error') or 'no error text'})")

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(one_span, plan.runs))

    launch.follow_up(plan, instance, launch.Launched(), definitions_for(db.settings))
    return {**ingest_summary(db, changes.keys, changes.removed), "runs": history,
            "seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run-range", help="one range run (prints a JSON line)")
    one.add_argument("first")
    one.add_argument("last")
    one.add_argument("--config", type=Path, default=DEFAULT_RUN_CONFIG)
    one.add_argument("--reason", default="celery")
    one.add_argument("--attempt", default=None, help="tag the run with this attempt id (the watchdog's handle)")
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
    home = prepare_dagster_home(db)
    if args.command == "worker":
        # the worker's tasks open the run storage from the instance reference the
        # launcher sends (dagster.yaml, its URL named by a variable): the worker gets
        # the home's environment, as the launcher's run processes do
        venv_bin = str(Path(sys.executable).parent)
        env = {**os.environ, **home.env(), "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")}
        cli = Path(venv_bin) / "dagster-celery"
        command = [str(cli), "worker", "start", "-A", "dagster_celery.app", "-y", str(args.config),
                   "-n", args.name, "--", "--pool", "prefork", "--concurrency", "1", *args.celery_args]
        os.execve(command[0], command, env)
    if args.command == "run-range":
        success, run_id, error = execute_range(home, args.first, args.last, load_run_config(args.config),
                                               args.reason, args.attempt)
        print(json.dumps({"success": success, "run_id": run_id, "error": error}))
        return 0 if success else 1
    summary = run_ingest_celery(db, config_path=args.config, parallel=args.parallel, batch=args.batch, home=home)
    print(json.dumps(summary, default=str))
    return 0 if not summary["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
