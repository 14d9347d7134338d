"""The crash scenario of `library ingest` (benchmarks/crash.py measures it,
library_pipeline_tests/test_crash.py runs it shorter): SIGKILL the ingest at N
points (inside the per-file transactions and at random moments between them),
rerun, and check that no file is left half-stored, no passage is duplicated and
the final run completes with the same passages as a clean ingest.

Starting Python with Dagster, torch and MiniLM costs 6-10 s on the 2-core box,
so 40 ingest processes would spend minutes just starting. A "zygote" process
imports everything and loads the embedder once (no forward pass: libgomp's
thread pool does not survive fork), then forks one child per ingest run; the
child is a real process running the real `run_ingest` against Postgres, and it
dies by a real SIGKILL (sent to itself from a hook or a timer, so the test
needs no race to pick the moment). Fork costs milliseconds.

Kill points:
- `executemany:N` - inside a transaction, right after the N-th bulk insert
  (pages, chunks or passages rows written, commit not reached);
- `commit:N` - right after the N-th commit of the process returned (between
  transactions: one file's step is durable, the next not begun);
- `timer:S` - S seconds after the child starts, wherever it is.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# the folder holding the packages: the repository in a checkout, site-packages
# when installed; the zygote child imports them from there
PACKAGES_ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("library_pipeline.testing.crash")


# -- the zygote (runs in its own process) -----------------------------------------

def _install_kill(spec: str | None) -> None:
    if not spec:
        return
    kind, _, arg = spec.partition(":")
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    if kind == "timer":
        timer = threading.Timer(float(arg), die)
        timer.daemon = True
        timer.start()
        return
    import psycopg

    target, seen = int(arg), [0]
    if kind == "executemany":
        original = psycopg.Cursor.executemany

        def executemany(self, *a, **kw):
            result = original(self, *a, **kw)
            seen[0] += 1
            if seen[0] == target:
                die()
            return result

        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]
    elif kind == "commit":
        original_exit = psycopg.Transaction.__exit__

        def exit_(self, exc_type, exc, tb):
            result = original_exit(self, exc_type, exc, tb)
            if exc_type is None and self._outer_transaction:
                seen[0] += 1
                if seen[0] == target:
                    die()
            return result

        psycopg.Transaction.__exit__ = exit_  # type: ignore[method-assign]
    else:
        raise ValueError(f"unknown kill point {spec!r}")


def _child(request: dict[str, Any]) -> None:
    import dagster as dg

    from library_pipeline.launch.ingest_runner import run_ingest
    from serving.db import Database
    from serving.settings import Settings, reset_settings

    os.environ.update(request.get("env", {}))
    reset_settings()  # this run's environment, not the one the zygote read its settings from
    _install_kill(request.get("kill"))
    db = Database(Settings.from_env())
    with dg.DagsterInstance.ephemeral() as instance:
        summary = run_ingest(db, request.get("paths"), instance=instance, progress=False,
                             force=bool(request.get("force")))
    Path(request["out"]).write_text(json.dumps(summary, default=str))


def serve_zygote() -> None:
    """Read one JSON request per stdin line, fork a child for it, answer one JSON
    line: {"pid", "killed", "signal", "exit", "maxrss_mb", "seconds", "summary"}."""
    from serving.settings import get_settings

    # the multilingual lane's model is loaded and warmed before fork too, on one BLAS
    # thread (a thread pool started before fork is not the child's); set before the
    # settings are read
    os.environ.setdefault("LIBRARY_USEM3_THREADS", "1")
    settings = get_settings()
    logging.basicConfig(level=settings.log_level, stream=sys.stderr)
    import dagster  # noqa: F401  (imported before fork so children start warm)

    import library_pipeline.launch.ingest_runner  # noqa: F401
    # the code location's modules, which each child's in-process run builds its job from
    for domain in ("enrich", "eval", "ingest", "memory", "ops", "vault"):
        importlib.import_module(f"library_pipeline.defs.{domain}")
    import torch

    from serving.embedding import load_embedder

    # one intra-op thread before any torch work: a forked child's first forward
    # pass hung forever on the thread pool the zygote had started (measured here)
    torch.set_num_threads(1)
    load_embedder(settings.embed_backend)
    from serving.embedding import multilingual_embedder

    multilingual_embedder()
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"ready": True, "base_rss_mb": base_rss}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _child(request)
            except BaseException:  # reported through the exit code; the traceback goes to stderr
                log.exception("ingest child failed")
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status, usage = os.wait4(pid, 0)
        answer: dict[str, Any] = {
            "pid": pid, "killed": os.WIFSIGNALED(status),
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "maxrss_mb": usage.ru_maxrss // 1024, "seconds": round(time.perf_counter() - started, 3),
        }
        out = Path(request["out"])
        if out.exists():
            answer["summary"] = json.loads(out.read_text())
            out.unlink()
        print(json.dumps(answer), flush=True)


class Zygote:
    """Client side: `with Zygote(env) as z: z.run(kill="executemany:3")`."""

    def __init__(self, env: dict[str, str], log_path: Path | None = None) -> None:
        # the zygote logs warnings only unless the caller's environment says otherwise
        self.env = {"LIBRARY_LOG_LEVEL": "WARNING", **os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "LIBRARY_TORCH_THREADS": "1", "PYTHONPATH": str(PACKAGES_ROOT), **env}
        self.log_path = log_path
        self.base_rss_mb = 0
        self._n = 0

    def __enter__(self) -> Zygote:
        stderr = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "library_pipeline.testing.crash", "--zygote"],
                                     cwd=str(PACKAGES_ROOT),
                                     env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     text=True)
        hello = self.proc.stdout.readline()
        if not hello:
            raise RuntimeError(f"crash zygote did not start; see {self.log_path}")
        self.base_rss_mb = json.loads(hello)["base_rss_mb"]
        return self

    def run(self, kill: str | None = None, **request: Any) -> dict[str, Any]:
        self._n += 1
        out = Path(tempfile.gettempdir()) / f"crash-zygote-{os.getpid()}-{self._n}.json"
        self.proc.stdin.write(json.dumps({"kill": kill, "out": str(out), **request}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"crash zygote died; see {self.log_path}")
        return json.loads(line)

    def __exit__(self, *exc: object) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- invariants ---------------------------------------------------------------------

def snapshot(conn) -> dict[str, Any]:
    """What must hold after any crash, and what a clean run must reproduce."""
    dup = conn.execute(
        "SELECT count(*) FROM (SELECT document_id, ordinal FROM passages WHERE summary_level = 0 AND NOT removed "
        "GROUP BY 1, 2 HAVING count(*) > 1) d").fetchone()[0]
    # a live passage set is whole: exactly one passage per chunk of the version it was built from
    # (the files never change between runs, so a whole passage set has one row per chunk)
    partial = conn.execute(
        "SELECT d.path FROM documents d, LATERAL (SELECT "
        " (SELECT count(*) FROM passages p WHERE p.document_id = d.id AND p.summary_level = 0) AS passages, "
        " (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks, "
        " (SELECT count(*) FROM pages g WHERE g.document_id = d.id) AS pages) n "
        "WHERE (n.passages > 0 AND n.passages <> n.chunks) OR (d.pages IS NOT NULL AND n.pages <> d.pages) "
        "   OR (d.status = 'ingested' AND n.passages = 0)").fetchall()
    per_doc = dict(conn.execute(
        "SELECT d.path, md5(string_agg(p.content_hash, ',' ORDER BY p.ordinal)) FROM documents d "
        "JOIN passages p ON p.document_id = d.id AND p.summary_level = 0 AND NOT p.removed "
        "GROUP BY d.path").fetchall())
    status = dict(conn.execute("SELECT path, status FROM documents").fetchall())
    return {"duplicates": dup, "partial": [r[0] for r in partial], "passages": per_doc, "status": status}


def kill_points(n: int, inserts: int, commits: int, seconds: float, seed: int = 9) -> list[str]:
    """n points: a third inside transactions, a third between them, a third at random times."""
    rng = random.Random(seed)
    points = []
    for i in range(n):
        kind = ("executemany", "commit", "timer")[i % 3]
        if kind == "executemany":
            points.append(f"executemany:{rng.randint(1, max(1, inserts))}")
        elif kind == "commit":
            points.append(f"commit:{rng.randint(1, max(1, commits))}")
        else:
            points.append(f"timer:{rng.uniform(0.05, max(0.1, seconds)):.2f}")
    return points


def write_small_library(root: Path, files: int = 6) -> None:
    """Small generated texts (a harbour log): enough prose to chunk and embed, no outside material."""
    root.mkdir(parents=True, exist_ok=True)
    words = ("harbour tide keeper lantern north shore ebb flood chart sounding fathom reef pilot "
             "schooner rigging mooring dawn squall beacon").split()
    rng = random.Random(1)
    for i in range(files):
        paras = [" ".join(rng.choice(words) for _ in range(60)).capitalize() + "." for _ in range(12)]
        (root / f"log {i:02d}.txt").write_text(f"Harbour log {i}\n\n" + "\n\n".join(paras), encoding="utf-8")


def run_scenario(server, work: Path, points: int, files: int, rerun_every: int = 1) -> dict[str, Any]:
    """Reference ingest, then `points` killed runs each followed by a rerun; the
    caller's `server` is any Database on the Postgres server to create test DBs on."""
    import uuid

    import psycopg

    def fresh_db(lib: Path) -> str:
        name = f"crash_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        info = psycopg.conninfo.conninfo_to_dict(server.dsn)
        info["dbname"] = name
        write_small_library(lib, files)
        return psycopg.conninfo.make_conninfo(**info)

    def env(dsn: str, lib: Path) -> dict[str, str]:
        return {"LIBRARY_DB_DSN": dsn, "LIBRARY_DIR": str(lib), "LIBRARY_HOME": str(work / "home")}

    ref_lib, lib = work / "ref-library", work / "library"
    ref_dsn, dsn = fresh_db(ref_lib), fresh_db(lib)
    with Zygote(env(ref_dsn, ref_lib), log_path=work / "zygote.log") as z:
        # count the reference run's bulk inserts and commits, to aim the kill points
        counted = z.run(kill=None, env=env(ref_dsn, ref_lib))
        assert counted["exit"] == 0, counted
        with psycopg.connect(ref_dsn) as conn:
            reference = snapshot(conn)
        # per file: pages, chunks and passages inserts, each in its own commit;
        # plus registration and the model's index set-up
        inserts, commits = 3 * files, 3 * files + 2
        ref_seconds = counted["seconds"]
        results = []
        for n, point in enumerate(kill_points(points, inserts, commits, ref_seconds), 1):
            killed = z.run(kill=point, env=env(dsn, lib))
            with psycopg.connect(dsn) as conn:
                after_kill = snapshot(conn)
            result = {"point": point, "killed": killed["killed"], "kill_seconds": killed["seconds"],
                      "duplicates_after_kill": after_kill["duplicates"], "partial_after_kill": after_kill["partial"]}
            # killed runs chain (each resumes what the last one left); every
            # `rerun_every` points a clean rerun must complete and match the reference,
            # then the database starts empty again so kills also land in first ingests
            if n % rerun_every == 0 or n == points:
                rerun = z.run(kill=None, env=env(dsn, lib))
                with psycopg.connect(dsn) as conn:
                    after_rerun = snapshot(conn)
                result.update({"rerun_exit": rerun["exit"], "rerun_seconds": rerun["seconds"],
                               "rerun_matches_reference": after_rerun["passages"] == reference["passages"],
                               "all_ingested": set(after_rerun["status"].values()) == {"ingested"}})
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("TRUNCATE documents CASCADE")
            results.append(result)
    reruns = [r for r in results if "rerun_exit" in r]
    return {"reference_seconds": ref_seconds, "points": results, "killed": sum(r["killed"] for r in results),
            "reruns": len(reruns),
            "ok": all(not r["duplicates_after_kill"] and not r["partial_after_kill"] for r in results)
            and all(r["rerun_matches_reference"] and r["all_ingested"] and r["rerun_exit"] == 0 for r in reruns)}


if __name__ == "__main__":
    # the zygote process (Zygote starts it as `python -m library_pipeline.testing.crash --zygote`)
    if sys.argv[1:] != ["--zygote"]:
        raise SystemExit("usage: python -m library_pipeline.testing.crash --zygote (see benchmarks/crash.py)")
    serve_zygote()
