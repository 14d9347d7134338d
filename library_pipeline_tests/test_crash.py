"""Crash safety: the ingest SIGKILLed at 20 points and rerun (the scenario of
benchmarks/crash.py, library_pipeline/testing/crash.py, drives real forked ingest
processes against the session's Postgres), and the serving side's behaviour
while Postgres restarts under a search load."""

from __future__ import annotations

import logging
import threading
import time

import dagster as dg
import pytest

from library_pipeline.testing import crash
from library_pipeline_tests.ingest_helpers import ingest, write
from serving.db import Database
from serving.runtime import Library
from serving.settings import Settings

log = logging.getLogger(__name__)


@pytest.mark.slow  # ~2 min: 25 forked ingest runs; still run by default
def test_sigkill_at_20_points_then_rerun(server_db, tmp_path):
    # kills chain, with a checked clean rerun after every 4th (benchmarks/crash.py
    # reruns after each: 40 ingest runs took 145 s here, too long for the suite)
    report = crash.run_scenario(server_db, tmp_path, points=20, files=3, rerun_every=4)
    log.info("crash scenario: %s", report)
    points = report["points"]
    assert len(points) == 20 and report["reruns"] == 5
    kinds = {p["point"].split(":")[0] for p in points}
    assert kinds == {"executemany", "commit", "timer"}
    # the hooks fire unless the run ended first (a late timer, or a resumed run
    # with fewer commits left than the point's number)
    assert sum(p["killed"] for p in points) >= 12, points
    for p in points:
        assert p["duplicates_after_kill"] == 0, p
        assert p["partial_after_kill"] == [], p
        if "rerun_exit" in p:
            assert p["rerun_exit"] == 0 and p["all_ingested"] and p["rerun_matches_reference"], p
    assert report["ok"]


def test_postgres_restart_under_search_load(tmp_path, embedder):
    """Searches keep running while Postgres stops and starts again: while it is down
    every call fails fast with a ConnectionError that names the database, and within
    5 s of it coming back every client is served again."""
    home = tmp_path / "pg"
    home.mkdir()
    home.chmod(0o755)
    settings = Settings(library_dir=tmp_path / "library", home=home)
    db = Database(settings)
    write(settings.library_dir / "harbour.txt", "The harbour master kept tide tables for the northern coast. " * 30)
    with dg.DagsterInstance.ephemeral() as instance:
        assert ingest(db, instance)["ingested"] == 1
    lib = Library(settings, embedder=embedder)
    server = db._server
    events: list[tuple[float, float, str | None]] = []  # (start, end, error)
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                lib.search("tide tables", top_k=3)
                events.append((started, time.monotonic(), None))
            except Exception as exc:  # recorded and judged below
                events.append((started, time.monotonic(), f"{type(exc).__name__}: {exc}"))
                time.sleep(0.05)

    threads = [threading.Thread(target=client) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(2)
        down = time.monotonic()
        server.stop()  # pg_ctl stop (fast): open sessions are terminated
        time.sleep(7)  # longer than the pool's 5 s wait, so waiting callers fail too
        server.ensure_postgres_running()
        up = time.monotonic()
        time.sleep(8)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        lib.close()
        db.stop()
    before = [e for e in events if e[1] < down]
    outage = [e for e in events if e[2] is not None]
    after = [e for e in events if e[0] >= up + 5]
    log.info("restart: %d calls before, %d errors, %d calls 5 s after restart", len(before), len(outage), len(after))
    assert before and all(e[2] is None for e in before)
    assert outage, "stopping Postgres under load must be visible to clients"
    for start, end, error in outage:
        assert error.startswith("ConnectionError") and "database" in error, error
        assert "Traceback" not in error
        assert end - start < 6.5, f"an error took {end - start:.1f} s to arrive: {error}"
    first_ok = min(e[1] for e in events if e[2] is None and e[0] >= up)
    log.info("first search served %.2f s after Postgres was back", first_ok - up)
    assert first_ok - up < 5
    assert after and all(e[2] is None for e in after), [e for e in after if e[2]][:3]


def test_schema_start_up_under_live_traffic(db, caplog):
    """A process starting while another holds a write lock on `passages`: the
    schema's no-op ALTERs wait at most 2 s per attempt (never stalling readers
    queued behind them for long) and the attempt is retried, not failed - before,
    an ingest starting under the load benchmark died of a deadlock here."""
    import psycopg

    holder = psycopg.connect(db.dsn)
    holder.execute("UPDATE passages SET removed = removed WHERE false")  # RowExclusiveLock, held
    release = threading.Timer(3.0, holder.commit)
    release.start()
    try:
        caplog.set_level(logging.WARNING, logger="serving.db")
        started = time.monotonic()
        fresh = Database(db.settings)
        fresh.ensure_schema()
        elapsed = time.monotonic() - started
    finally:
        release.join()
        holder.close()
    assert 2.0 <= elapsed < 15, elapsed
    assert any("LockNotAvailable" in r.getMessage() for r in caplog.records)
