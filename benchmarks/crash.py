"""Crash safety of `library ingest`: SIGKILL the ingest at 20 points (inside the
per-file transactions and at random moments between them), rerun after each,
and check that no file is left half-stored, no passage is duplicated and the
final run completes with the same passages as a clean ingest.

    .venv/bin/python benchmarks/crash.py                 # 20 kill points, embedded Postgres in a temp dir
    .venv/bin/python benchmarks/crash.py --points 40     # more

The scenario (the forking zygote, the kill points, the invariants) is
library_pipeline/testing/crash.py, which library_pipeline_tests/test_crash.py
runs shorter.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path

from library_pipeline.testing.crash import run_scenario

log = logging.getLogger("benchmarks.crash")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--rerun-every", type=int, default=1, help="clean rerun + check after every N kills")
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(message)s")
    from serving.db import Database
    from serving.settings import Settings

    home = Path(tempfile.mkdtemp(prefix="crash-bench-"))
    home.chmod(0o755)
    server = Database(Settings(library_dir=home / "unused", home=home))
    try:
        report = run_scenario(server, home, args.points, args.files, args.rerun_every)
    finally:
        server.stop()
    log.info(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
