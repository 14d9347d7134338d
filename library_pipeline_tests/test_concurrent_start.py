"""Every command started at the same moment on a fresh home: none fails.

An agent host, a shell and the UI all start around the same time, so a first
start races with other first starts: initdb of one `pgdata`, CREATE DATABASE
of `library` and `dagster`, the schema, the Dagster instance tables, the
example library. Each round here makes a fresh home and starts, at once,
`library up` (its own ports), `status --json`, `search`, `graph stats`,
`memory search`, `vault status` and `serve --http`; every one-shot command
must exit 0 with its answer, `serve --http` must answer an MCP tool call,
`library up` must serve (Dagster UI and its MCP server) and exit 0 on
SIGTERM, and when all are gone the embedded server must be stopped with no
owner left registered. The same runs against an external server when
LIBRARY_TEST_PG_DSN is set (a fresh database per round on it).

Rounds: LIBRARY_CONCURRENT_ROUNDS (default 10). Only the first round's
`library up` ingests (a one-file library) and is awaited until the Dagster UI
serves; in the others it is stopped once its start-up is done (`run_round`).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from library_pipeline_tests.http_helpers import free_port

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
ROUNDS = int(os.environ.get("LIBRARY_CONCURRENT_ROUNDS", "10"))
# The external server is one shared server (no per-home data directory to race on), so
# fewer rounds cover its races: database and schema creation, Dagster's tables.
EXTERNAL_ROUNDS = int(os.environ.get("LIBRARY_CONCURRENT_ROUNDS_EXTERNAL", "3"))
EXTERNAL_DSN = os.environ.get("LIBRARY_TEST_PG_DSN") or None
ROUND_TIMEOUT = 600.0  # seconds; on the shared 2-core box a cold `library search` alone took 31 s
STOP_TIMEOUT = 90.0
NOTE = "The harbour master kept tide tables for the northern coast and the lighthouse log. " * 20

ONE_SHOT = {
    "status": ["status", "--json"],
    "search": ["search", "harbour tide tables", "--json"],
    "graph": ["graph", "stats"],
    "memory": ["memory", "search", "harbour", "--agent", "concurrent-start-test"],
    "vault": ["vault", "status", "--json"],
}
JSON_OUTPUT = {"status", "search", "memory", "vault"}


@dataclass
class Round:
    number: int
    home: Path
    env: dict[str, str]
    full: bool
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def out(self, name: str) -> str:
        return (self.home / f"{name}.out").read_text(errors="replace")

    def err(self, name: str) -> str:
        return (self.home / f"{name}.err").read_text(errors="replace")

    def fail(self, name: str, what: str) -> None:
        self.failures.append(f"round {self.number} {name}: {what}\n--- stderr tail ---\n{self.err(name)[-2500:]}")


def _start(r: Round, name: str, args: list[str]) -> None:
    out = (r.home / f"{name}.out").open("wb")
    err = (r.home / f"{name}.err").open("wb")
    r.procs[name] = subprocess.Popen([sys.executable, "-m", "library_pipeline.cli.main", *args], cwd=REPO, env=r.env,
                                     stdout=out, stderr=err, start_new_session=True)
    out.close()
    err.close()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status == 200
    except OSError:
        return False


def _mcp_files(url: str) -> dict | None:
    """A real MCP client's `library_files` call: the server answered from the database."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def call() -> dict:
        async with Client(streamable_http_client(url), read_timeout_seconds=120) as client:
            result = await client.call_tool("library_files", {"pattern": ""})
            assert not result.is_error, result
            return result.structured_content

    try:
        return asyncio.run(call())
    except Exception:  # noqa: BLE001 - not up yet; the caller retries until its deadline
        return None


def _terminate(r: Round, name: str) -> None:
    """SIGTERM, as a service manager stops a service; `_reap` checks the exit."""
    if r.procs[name].poll() is None:
        r.procs[name].send_signal(signal.SIGTERM)


def _reap(r: Round, name: str) -> None:
    proc = r.procs[name]
    try:
        code = proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        r.fail(name, f"still running {STOP_TIMEOUT:.0f} s after SIGTERM")
        return
    if code != 0:
        r.fail(name, f"exit code {code} after SIGTERM")


def _check_one_shot(r: Round, name: str) -> None:
    code = r.procs[name].returncode
    if code != 0:
        r.fail(name, f"exit code {code}")
        return
    text = r.out(name)
    if name in JSON_OUTPUT:
        try:
            answer = json.loads(text)
        except ValueError as exc:
            r.fail(name, f"no JSON answer ({exc}): {text[:300]!r}")
            return
        if name == "status" and "totals" not in answer:
            r.fail(name, f"no inventory in {text[:300]!r}")
    elif not text.strip():
        r.fail(name, "no answer on stdout")


def run_round(number: int, home: Path, env: dict[str, str], full: bool) -> Round:
    """One fresh home, every command at once. In a `full` round `library up`
    ingests and must serve the Dagster UI and its MCP server before it is
    stopped; in the others it runs with --no-ingest and is stopped as soon as
    its start-up is done (it printed where it serves: database, schema, Dagster
    instance and children launched) - the races are all in that part, and
    letting `dagster dev` load in every round would take a round from ~30 s to
    over a minute on 2 cores."""
    r = Round(number, home, env, full)
    up_port, up_mcp_port, serve_port = free_port(), free_port(), free_port()
    commands = dict(ONE_SHOT)
    commands["up"] = ["up", "--port", str(up_port), "--mcp-port", str(up_mcp_port)] + ([] if full else ["--no-ingest"])
    commands["serve"] = ["serve", "--http", "--port", str(serve_port)]
    started = time.monotonic()
    for name, args in commands.items():  # at once: no wait between the starts
        _start(r, name, args)

    def up_serves() -> bool:
        if "Dagster UI:" not in r.out("up"):
            return False
        return not full or (_http_ok(f"http://127.0.0.1:{up_port}/server_info")
                            and _mcp_files(f"http://127.0.0.1:{up_mcp_port}/mcp") is not None)

    waiting = set(commands)
    try:
        deadline = started + ROUND_TIMEOUT
        while waiting and time.monotonic() < deadline:
            for name in sorted(waiting):
                proc = r.procs[name]
                if name in ONE_SHOT:
                    if proc.poll() is not None:
                        _check_one_shot(r, name)
                        waiting.discard(name)
                    continue
                if proc.poll() is not None:
                    r.fail(name, f"exited with {proc.returncode} before serving")
                    waiting.discard(name)
                elif name == "serve":
                    files = _mcp_files(f"http://127.0.0.1:{serve_port}/mcp")
                    if files is not None:
                        if "total" not in files:
                            r.fail(name, f"library_files answered {files}")
                        _terminate(r, name)
                        waiting.discard(name)
                elif up_serves():
                    _terminate(r, name)
                    waiting.discard(name)
            time.sleep(0.5)
        for name in sorted(waiting):
            r.fail(name, f"no answer within {ROUND_TIMEOUT:.0f} s")
        for name in ("serve", "up"):
            if name not in waiting and r.procs[name].returncode is None:
                _reap(r, name)
    finally:
        for name, proc in r.procs.items():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    for name in r.procs:
        if "Traceback" in r.err(name):
            r.fail(name, "a traceback on stderr")
    log.info("round %d: %d processes, %.1f s, %d failure(s)", number, len(r.procs), time.monotonic() - started,
             len(r.failures))
    return r


def _fresh_home() -> Path:
    # outside pytest's basetemp: the embedded server runs as the `pgserver` user when we
    # are root, and pytest makes its basetemp 0700 (see conftest.pg_home)
    home = Path(tempfile.mkdtemp(prefix="library-concurrent-"))
    home.chmod(0o755)
    library = home / "library"
    library.mkdir()
    (library / "harbour.txt").write_text(NOTE, encoding="utf-8")
    return home


def _base_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, LIBRARY_HOME=str(home), LIBRARY_DIR=str(home / "library"), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
    for key in ("DAGSTER_HOME", "LIBRARY_DB_DSN", "LIBRARY_DAGSTER_DSN", "LIBRARY_VAULT_REPO", "LIBRARY_DEBUG"):
        env.pop(key, None)
    return env


def _server_stopped(home: Path, timeout: float = 30.0) -> tuple[bool, str]:
    """The last process to leave stops the embedded server: no postmaster, no owner left."""
    pgdata = home / "pgdata"
    deadline = time.monotonic() + timeout
    while (pgdata / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    owners = (pgdata / ".handle_pids.json").read_text().strip() if (pgdata / ".handle_pids.json").exists() else ""
    running = (pgdata / "postmaster.pid").exists()
    return (not running and owners in ("", "[]")), f"postmaster running: {running}, owners: {owners!r}"


def _report(rounds: list[Round]) -> None:
    failures = [f for r in rounds for f in r.failures]
    processes = sum(len(r.procs) for r in rounds)
    log.info("concurrent start: %d rounds x %d processes = %d starts, %d failure(s)", len(rounds),
             processes // max(1, len(rounds)), processes, len(failures))
    assert not failures, "\n\n".join(failures[:6])


# 10 rounds x 7 commands; a round took 74-256 s on the shared 2-core box at load
# average 13-22 (1,226 s for 10), hence 300 s per round instead of the suite's 900 s
@pytest.mark.slow
@pytest.mark.timeout(300 + 300 * ROUNDS)
def test_all_commands_start_at_once_on_fresh_homes():
    rounds = []
    for number in range(ROUNDS):
        home = _fresh_home()
        try:
            r = run_round(number, home, _base_env(home), full=number == 0)
            stopped, detail = _server_stopped(home)
            if not stopped:
                r.failures.append(f"round {number}: the embedded server outlived every command ({detail})")
            if number == 0 and not r.failures:
                status = json.loads(r.out("status"))  # taken while `up` was still ingesting: any count
                assert status["totals"]["files"] in (0, 1), status
            rounds.append(r)
        finally:
            shutil.rmtree(home, ignore_errors=True)
    _report(rounds)


@pytest.mark.slow
@pytest.mark.external
@pytest.mark.timeout(300 + 300 * EXTERNAL_ROUNDS)
@pytest.mark.skipif(EXTERNAL_DSN is None, reason="LIBRARY_TEST_PG_DSN is not set (an external Postgres with pgvector)")
def test_all_commands_start_at_once_on_an_external_server():
    assert EXTERNAL_DSN is not None
    rounds = []
    for number in range(EXTERNAL_ROUNDS):
        home = _fresh_home()
        name = f"library_concurrent_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(EXTERNAL_DSN, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        info = psycopg.conninfo.conninfo_to_dict(EXTERNAL_DSN)
        info["dbname"] = name
        env = _base_env(home)
        env["LIBRARY_DB_DSN"] = psycopg.conninfo.make_conninfo(**info)
        try:
            r = run_round(number, home, env, full=number == 0)
            if (home / "pgdata").exists():
                r.failures.append(f"round {number}: an embedded server was started beside the external one")
            rounds.append(r)
        finally:
            shutil.rmtree(home, ignore_errors=True)
            with psycopg.connect(EXTERNAL_DSN, autocommit=True) as conn:
                conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    psycopg.sql.Identifier(name)))
    _report(rounds)


# -- the example-library copy: many first `library up`s on one home -----------------

def _seed(library_dir: str, results) -> None:
    from library_pipeline.cli.up import seed_example_library

    results.put(seed_example_library(Path(library_dir)))


def test_example_library_is_copied_once_by_concurrent_starts(tmp_path):
    from library_pipeline.cli.up import EXAMPLE_LIBRARY

    library = tmp_path / "home" / "library"
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_seed, args=(str(library), results)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    copied = sorted(results.get(timeout=5) for _ in procs)
    assert copied == [False] * 5 + [True]  # one copier; the others found it seeded
    expected = {p.name: p.read_bytes() for p in EXAMPLE_LIBRARY.iterdir() if p.is_file()}
    assert {p.name: p.read_bytes() for p in library.iterdir()} == expected
    assert not [p for p in library.parent.iterdir() if p.name.endswith(".tmp")]


# -- a start that fails for a real reason: one line naming it --------------------

def _library(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "library_pipeline.cli.main", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_unusable_home_is_one_line(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the home should be")
    env = _base_env(blocker / "home")
    done = _library(["status", "--json"], env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert _error_lines(done.stderr) == [f"error: cannot create the library home {blocker / 'home'}: Not a directory"]


def test_port_taken_is_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _base_env(tmp_path / "home")
        serve = _library(["serve", "--http", "--port", str(port)], env)
        up = _library(["up", "--port", str(port), "--mcp-port", str(free_port())], env)
    assert "Traceback" not in serve.stderr + up.stderr
    assert serve.returncode == 2 and _error_lines(serve.stderr) == [
        f"error: port {port} on 127.0.0.1 is already in use: stop what listens there or pass --port"]
    assert up.returncode == 1 and _error_lines(up.stderr) == [
        f"error: the Dagster UI port (--port) {port} on 127.0.0.1 is already in use"]
    assert not (tmp_path / "home").exists()  # refused before any work


def test_disk_full_is_named():
    from serving.cli import describe_failure

    with pytest.raises(OSError) as caught, open("/dev/full", "w") as full:  # noqa: PT012
        full.write("x" * 65536)
        full.flush()
    assert caught.value.errno == errno.ENOSPC
    assert describe_failure(caught.value).startswith("no space left on the device")
