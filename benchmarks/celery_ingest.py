"""Files/s through Dagster's celery executor with 1 and with 2 workers.

Needs the external services (`make services-up`; the script reads their
`scripts/services.py env`). For each worker count: a fresh library database and
Dagster run storage on the external PostgreSQL, N short files (BEIR SciFact
abstracts as .txt), that many `dagster-celery` workers, one
`library_pipeline.launch.celery_ingest ingest --parallel <workers>`; prints files/s.

    .venv/bin/python benchmarks/celery_ingest.py --files 60 --workers 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from ingest import write_small_files  # noqa: E402


def services_env() -> dict[str, str]:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "services.py"), "env"], check=True,
                         capture_output=True, text=True).stdout
    env = {}
    for line in out.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value.strip("'")
    return env


def fresh_database(admin_dsn: str, prefix: str) -> tuple[str, str]:
    name = f"t_{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    dsn = psycopg.conninfo.make_conninfo(**{**info, "dbname": name})
    url = (f"postgresql+psycopg2://{quote(info['user'])}:{quote(info['password'], safe='')}"
           f"@{info['host']}:{info['port']}/{name}")
    return dsn, url


def own_redis_databases(broker: str) -> tuple[str, str]:
    """Redis databases 14/15, flushed: a worker left running on the default ones
    (another library, another run storage) must not take these runs' steps - it
    would fail them with "Could not load run"."""
    import redis

    base = broker.rsplit("/", 1)[0]
    for n in (14, 15):
        redis.Redis.from_url(f"{base}/{n}").flushdb()
    return f"{base}/14", f"{base}/15"


def measure(workers: int, files: int, base_env: dict[str, str], tmp: Path) -> dict:
    library = tmp / f"library-{workers}"
    broker, backend = own_redis_databases(base_env["LIBRARY_CELERY_BROKER"])
    write_small_files(library, files)
    dsn, _ = fresh_database(base_env["LIBRARY_TEST_PG_DSN"], "bench")
    _, dagster_url = fresh_database(base_env["LIBRARY_TEST_PG_DSN"], "bench_dagster")
    home = tmp / f"home-{workers}"
    env = {**os.environ, **base_env, "LIBRARY_DB_DSN": dsn, "LIBRARY_DAGSTER_DSN": dagster_url,
           "LIBRARY_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "LIBRARY_DIR": str(library),
           "LIBRARY_CELERY_BROKER": broker, "LIBRARY_CELERY_BACKEND": backend,
           "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    procs, logs = [], []
    try:
        for i in range(workers):
            log = open(tmp / f"worker-{workers}-{i}.log", "w")
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, "-m", "library_pipeline.launch.celery_ingest", "worker",
                                           "-n", f"bench{i}-{uuid.uuid4().hex[:6]}"], env=env, cwd=str(REPO),
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 300
        while sum(" ready." in (tmp / f"worker-{workers}-{i}.log").read_text() for i in range(workers)) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.5)
        load_before = open("/proc/loadavg").read().split()[:3]
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "library_pipeline.launch.celery_ingest", "ingest",
                              "--parallel", str(workers)], env=env, cwd=str(REPO), capture_output=True, text=True)
        wall = time.perf_counter() - started
        summary = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, 15)
                proc.wait(30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for log in logs:
            log.close()
    return {"workers": workers, "files": summary["files"], "ingested": summary["ingested"],
            "failed": summary["failed"], "passages": summary["passages"], "runs": len(summary["runs"]),
            "wall_s": round(wall, 2), "files_per_s": round(summary["files"] / wall, 3),
            "loadavg_before": load_before, "loadavg_after": open("/proc/loadavg").read().split()[:3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    base_env = services_env()
    tmp = Path(tempfile.mkdtemp(prefix="bench-celery-"))
    try:
        results = [measure(n, args.files, base_env, tmp) for n in args.workers]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {"results": results, "loadavg": open("/proc/loadavg").read().split()[:3], "cpu_count": os.cpu_count()}
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
