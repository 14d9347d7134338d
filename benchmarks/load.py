"""Load: concurrent MCP clients over streamable HTTP (the real `mcp` client, one
bearer token = one agent each) searching the library and agent memory while an
ingest and the memory upkeep run beside them. Reports errors and p50/p95.

    .venv/bin/python benchmarks/load.py                       # 20 clients, 60 s
    .venv/bin/python benchmarks/load.py --clients 20 --seconds 10

The scenario (server process, clients, forked ingest, upkeep thread) is
library_pipeline/testing/load.py, which library_pipeline_tests/test_load.py runs
for 10 s.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

from library_pipeline.testing.crash import write_small_library
from library_pipeline.testing.load import run_load

REPO = Path(__file__).resolve().parent.parent
log = logging.getLogger("benchmarks.load")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--no-background", action="store_true", help="no ingest / upkeep beside the clients")
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per MCP request otherwise
    import dagster as dg

    from library_pipeline.launch.ingest_runner import run_ingest
    from serving.db import Database
    from serving.settings import Settings

    work = Path(tempfile.mkdtemp(prefix="load-bench-"))
    work.chmod(0o755)
    library = work / "library"
    write_small_library(library, files=12)
    alice = REPO / "examples" / "library" / "Carroll - Alice's Adventures in Wonderland.epub"
    if alice.exists():
        (library / alice.name).write_bytes(alice.read_bytes())
    db = Database(Settings(library_dir=library, home=work))
    try:
        with dg.DagsterInstance.ephemeral() as instance:
            summary = run_ingest(db, instance=instance, progress=False)
        log.info("library: %d files, %d passages", summary["files"], summary["passages"])
        figures = run_load(db.dsn, library, work, clients=args.clients, seconds=args.seconds,
                           background=not args.no_background)
    finally:
        db.stop()
    log.info(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
