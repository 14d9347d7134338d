"""`library up`: the main job. Starts (or reuses) the embedded PostgreSQL,
ingests the library (the example library on first run), then runs the
Dagster webserver + daemon (`dagster dev`) and the MCP HTTP server, all on
127.0.0.1, until Ctrl-C or SIGTERM, and then stops all of them.

`dagster dev` started from a script ignores SIGTERM unless job control is on,
so each child gets its own process group and is signalled as a group:
SIGINT first (dagster dev shuts its webserver, daemon and code server down
cleanly on it), SIGTERM after a grace period, SIGKILL last.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from library_pipeline.instance.home import prepare_dagster_home
from serving.db import Database, StartError, file_lock, prune_stale_owners
from serving.settings import get_settings

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_LIBRARY = REPO / "examples" / "library"


class _Stop(BaseException):
    # a BaseException, like KeyboardInterrupt: a SIGTERM that lands inside a step guarded by
    # `except Exception` (the enrichment-progress query) was swallowed there, and `library up`
    # kept serving past its stop timeout
    pass


# The signals received. Python drops an exception raised while it runs a garbage-collection
# callback ("Exception ignored in: <function _collection_gced>", seen with SQLAlchemy's
# registry when a SIGTERM landed as Dagster's instance was created): `library up` then kept
# serving 90 s past its SIGTERM. The serving loop also looks here.
_requested: list[str] = []


def _raise_stop(signum: int, _frame) -> None:
    _requested.append(signal.Signals(signum).name)
    raise _Stop(signal.Signals(signum).name)


def _quiet_dropped_stop(previous):
    # the dropped _Stop is recorded in _requested and acted on; its "Exception ignored"
    # traceback on stderr read as a crash to whoever watched `library up` stop
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, _Stop):
            log.debug("a stop (%s) landed inside %r; acting on it from the serving loop",
                      unraisable.exc_value, unraisable.object)
            return
        previous(unraisable)
    return hook


def _install_stop_handlers() -> dict:
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, _raise_stop)
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    return previous


def seed_example_library(library_dir: Path) -> bool:
    """Copy the shipped example library into an empty or missing library folder.

    Two `library up` starting together on a fresh home would both see an empty
    folder and copy into it at once, and one that saw a half-filled folder
    would take it as the user's and ingest half-written files. So: one copier
    at a time (an flock beside the folder), each file copied to a hidden
    temporary name and renamed into place, so the folder only ever holds whole
    files.
    """
    if library_dir.exists() and any(library_dir.iterdir()):
        return False
    if not EXAMPLE_LIBRARY.is_dir():
        log.warning("no example library at %s; starting with an empty library", EXAMPLE_LIBRARY)
        return False
    library_dir.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(library_dir.parent / f".{library_dir.name}.seed.lock"):
        if library_dir.exists() and any(library_dir.iterdir()):
            return False  # another process seeded it while we waited
        library_dir.mkdir(parents=True, exist_ok=True)
        items = [item for item in EXAMPLE_LIBRARY.iterdir() if item.is_file()]
        for item in items:
            tmp = library_dir.parent / f".{library_dir.name}.seed.{os.getpid()}.tmp"
            shutil.copy2(item, tmp)
            os.replace(tmp, library_dir / item.name)
    log.info("copied the example library (%d files) into %s", len(items), library_dir)
    return True


def _spawn(name: str, argv: list[str], env: dict[str, str], logdir: Path) -> subprocess.Popen:
    logfile = (logdir / f"{name}.log").open("ab")
    log.info("starting %s: %s (log: %s)", name, " ".join(argv), logfile.name)
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=logfile, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop_child(name: str, proc: subprocess.Popen, grace: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            log.info("%s stopped (%s)", name, sig.name)
            return
        except subprocess.TimeoutExpired:
            continue


def _check_ports(webserver_port: int, mcp_port: int | None) -> None:
    """Fail before any work when a port is taken: found later, it surfaced as a
    child exiting with code 1 after the whole ingest had run."""
    from serving.cli import port_in_use

    for port, what in ((webserver_port, "Dagster UI port (--port)"), (mcp_port, "MCP port (--mcp-port)")):
        if port is not None and port_in_use("127.0.0.1", port):
            raise StartError(f"the {what} {port} on 127.0.0.1 is already in use")


PROGRESS_EVERY_S = 5.0
OWNERS_GRACE = 15.0  # seconds `up` waits, once its children stopped, for their runs to let go of the server


def enrichment_progress(db: Database) -> str | None:
    """One line on how far the summaries and the graph have followed the ingest
    (the automation sensor launches them after `dagster dev` starts), or None
    when there is nothing to enrich."""
    from serving.graph import coverage

    with db.connect() as conn:
        cov = coverage(conn)
        trees = conn.execute(
            "SELECT count(*) FROM documents d JOIN raptor_builds b ON b.document_id = d.id AND b.version = d.version "
            "WHERE d.source = 'library' AND d.status = 'ingested'").fetchone()[0]
        done, total = conn.execute(
            "SELECT coalesce(sum(k.passages_done), 0)::int, coalesce(sum(k.passages_total), 0)::int "
            "FROM kg_progress k JOIN documents d ON d.id = k.document_id AND k.version = d.version "
            "WHERE d.status = 'ingested'").fetchone()
    files = cov["files_ingested"]
    if not files:
        return None
    state = "complete" if trees == files and cov["files_extracted"] == files else "in progress"
    return (f"enrichment {state}: summary trees {trees}/{files} files, graph {cov['files_extracted']}/{files} "
            f"files ({done}/{total} passages of started files)")


def _knows_library_files(db: Database) -> bool:
    with db.connect() as conn:
        return conn.execute("SELECT EXISTS (SELECT 1 FROM documents WHERE source = 'library')").fetchone()[0]


def run_up(*, ingest: bool = True, webserver_port: int = 3000, mcp_port: int = 8765, mcp: bool = True) -> int:
    _check_ports(webserver_port, mcp_port if mcp else None)
    _requested.clear()
    settings = get_settings()
    db = Database(settings)
    children: dict[str, subprocess.Popen] = {}
    previous = _install_stop_handlers()
    previous_unraisable = sys.unraisablehook
    sys.unraisablehook = _quiet_dropped_stop(previous_unraisable)
    try:
        db.ensure_schema()
        if not settings.library_dir_explicit and not _knows_library_files(db):
            # a home restored from a backup whose files are not back in the folder yet is not a
            # first run: the example books would be ingested into the user's library
            seed_example_library(settings.library_dir)
        dagster_home = prepare_dagster_home(db)
        if ingest:
            from library_pipeline.launch.ingest_runner import run_ingest

            summary = run_ingest(db, instance=dagster_home.instance())
            log.info("ingested %d files (%d failed), %d passages live", summary["files"], summary["failed"],
                     summary["passages"])
            # in-process Dagster execution maps SIGTERM onto the SIGINT handler,
            # which a shell's background job has set to SIG_IGN: measured, a
            # `library up &` then ignored SIGTERM for good. Install ours again.
            _install_stop_handlers()
        if _requested:  # a stop that landed where its exception was dropped: serve nothing
            raise _Stop(_requested[-1])
        # the daemon, the webserver and their run workers open the home from disk
        env = dict(os.environ, **dagster_home.env(), LIBRARY_DIR=str(settings.library_dir),
                   LIBRARY_HOME=str(settings.home))
        logdir = settings.home / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        bindir = Path(sys.executable).parent
        children["dagster"] = _spawn("dagster", [str(bindir / "dagster"), "dev", "-w", str(REPO / "workspace.yaml"),
                                                 "-h", "127.0.0.1", "-p", str(webserver_port)], env, logdir)
        if mcp:
            children["mcp"] = _spawn("mcp", [sys.executable, "-m", "library_pipeline.cli.main", "serve", "--http",
                                             "--host", "127.0.0.1", "--port", str(mcp_port)], env, logdir)
        print(f"Dagster UI: http://127.0.0.1:{webserver_port}   MCP (streamable HTTP): "
              f"http://127.0.0.1:{mcp_port}/mcp   logs: {logdir}   Ctrl-C stops everything", flush=True)
        last_line, next_poll = None, 0.0
        while True:
            if _requested:
                raise _Stop(_requested[-1])
            for name, proc in children.items():
                if proc.poll() is not None:
                    log.error("%s exited with code %s; see %s", name, proc.returncode, logdir / f"{name}.log")
                    return proc.returncode or 1
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + PROGRESS_EVERY_S
                try:
                    line = enrichment_progress(db)
                except Exception as exc:  # progress is a courtesy: never stop the services over it
                    log.debug("enrichment progress unavailable: %s", exc)
                    line = None
                if line and line != last_line:
                    print(line, flush=True)
                    last_line = line
            time.sleep(1.0)
    except (KeyboardInterrupt, _Stop) as reason:
        log.info("stopping (%s)", reason or "interrupt")
        return 0
    finally:
        for name, proc in reversed(children.items()):
            _stop_child(name, proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = previous_unraisable
        if db.embedded and db._server is not None:
            # a child killed hard leaves its pid registered; drop it so our exit stops the
            # server. A run the daemon launched can still be exiting after its parent
            # stopped (the server outlived `library up` once, at load 5): give it a moment.
            deadline = time.monotonic() + OWNERS_GRACE
            while set(prune_stale_owners(settings.home)) - {os.getpid()} and time.monotonic() < deadline:
                time.sleep(0.5)
        db.stop()
