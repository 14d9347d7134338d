"""Server settings the embedded PostgreSQL starts with. A server of the user's own
(LIBRARY_DB_DSN) keeps the configuration its operator gave it.

initdb's shared_buffers is 128 MB. At 100k passages the two HNSW indexes alone are 237 MB,
the passages 480 MB and the keyword lane's postings 1 GB, so every search read most of its
pages from the operating system's cache through that small pool. Measured on
benchmarks/search.py's 100k corpus (searches as served, with a second connection): idle box,
p50 / p95 54.8 / 68.7 -> 45.8 / 56.8 ms at 1 GB (vector lane 10.1 -> 6.0 ms, multilingual
13.6 -> 8.0), filtered to 2% of rows 133.6 -> 79.4 ms; the box shared with another benchmark,
128 MB and 1 GB alternating by restarts, each warmed by 500 other queries first: 67.3 vs
53.9 ms; 512 MB / 1 GB / 2 GB in one round under load 46.8 / 46.2 / 46.9 ms (128 MB: 60.5).

Postgres's own guidance is about a quarter of RAM for a dedicated server
(https://www.postgresql.org/docs/current/runtime-config-resource.html), and that is the
default here, of the memory the process may use (a container's limit when it is lower than
the machine's), at most 8 GB (LIBRARY_PG_SHARED_BUFFERS_MB sets it). It had been capped at
1 GB to leave room for the models beside it, which take well under 1 GB. At a million
passages 1 GB was too small: the two HNSW indexes alone are 2.6 GB, so every graph walk read
pages from the operating system's cache, copied each and verified its checksum (a fifth of
the server's CPU in `perf`). benchmarks/search.py's 1M corpus, 300 searches as served after
one pass over the same queries, 1 GB and 4 GB alternating by restarts: the server's CPU per
search 75.6 / 64.2 -> 47.2 / 50.3 ms. The benchmark itself, eight runs each alternated, 1 GB
and 6 GB (a quarter of this 24 GB box): p50 53.2 -> 44.9 ms, filtered to 2% of rows 82.8 ->
63.0 ms; at 100k the same within noise. Shared memory is touched only as pages are read, so
an idle or small library costs nothing for it.

The values go to `library.conf` in the data directory, which postgresql.conf includes; they
are written before each start of the server, so a changed setting counts from the next start
(a server already running for another process keeps its own until then).
"""

from __future__ import annotations

import os
from pathlib import Path

CONF_NAME = "library.conf"
INCLUDE = f"include_if_exists = '{CONF_NAME}'"
MIN_MB = 128          # initdb's own default
AUTO_MAX_MB = 8192
# a container's memory limit, cgroup v2 then v1 ("max", or v1's huge number, when unlimited):
# sysconf reports the host's memory inside a container, and a quarter of a large host's
# memory in a small container would be killed for it once the pages are read
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def usable_memory_mb(limits: tuple[Path, ...] = CGROUP_LIMITS) -> int | None:
    """The memory this process may use: the machine's, or its container's limit when lower
    (None: unknown)."""
    try:
        usable = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):   # no sysconf (Windows) or no such name
        return None
    for path in limits:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit():
            usable = min(usable, int(text))
    return usable // 2**20


def shared_buffers_mb(setting: int, limits: tuple[Path, ...] = CGROUP_LIMITS) -> int:
    """`setting` when given (> 0), else a quarter of the usable memory within
    [MIN_MB, AUTO_MAX_MB]."""
    if setting > 0:
        return setting
    memory = usable_memory_mb(limits)
    if memory is None:
        return MIN_MB
    return max(MIN_MB, min(AUTO_MAX_MB, memory // 4))


def server_conf(shared_mb: int) -> str:
    return ("# Written by library-pipeline before each start of the embedded server "
            "(serving/pgconf.py); edits here are overwritten.\n"
            f"shared_buffers = '{shared_mb}MB'\n")


def _replace(path: Path, text: str, like: Path) -> None:
    """Write `text` to `path` in one step, with `like`'s owner and mode (initdb may have run
    as another user than this process: pgserver's own when started as root)."""
    st = like.stat()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, st.st_mode & 0o777)
        if hasattr(os, "chown") and os.geteuid() == 0:
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_server_conf(pgdata: Path, shared_mb: int) -> None:
    """Point postgresql.conf at `library.conf` (once) and write the values there. Runs
    under the embedded server's start lock, after initdb and before the server starts."""
    main = pgdata / "postgresql.conf"
    text = main.read_text(encoding="utf-8")
    if INCLUDE not in text.splitlines():
        _replace(main, text.rstrip("\n") + f"\n\n{INCLUDE}\n", main)
    wanted = server_conf(shared_mb)
    ours = pgdata / CONF_NAME
    if not ours.exists() or ours.read_text(encoding="utf-8") != wanted:
        _replace(ours, wanted, main)
