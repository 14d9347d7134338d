"""Generate the hostile-file corpus: files built to break an ingest pipeline,
laid among good files in a library folder.

    .venv/bin/python benchmarks/hostile_corpus.py DIR        # write the corpus into DIR
    .venv/bin/python benchmarks/hostile_corpus.py DIR --list # and print the expectations

The cases and their expectations are library_pipeline/testing/hostile_corpus.py
(library_pipeline_tests/test_hostile_corpus.py ingests the same corpus).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from library_pipeline.testing.hostile_corpus import write_corpus

log = logging.getLogger("benchmarks.hostile_corpus")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--list", action="store_true", help="print each case and its expectation")
    args = parser.parse_args()
    logging.basicConfig(level="INFO", format="%(message)s")
    written, good = write_corpus(args.dir)
    log.info("%d hostile cases and %d good files written to %s", len(written), len(good), args.dir)
    if args.list:
        for c in written:
            log.info("%-45r %-9s %s", c.name, c.expect, c.reason or c.note)


if __name__ == "__main__":
    main()
