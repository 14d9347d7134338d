"""`library-serve`: the read side's commands alone (search, files, serve, memory),
for an MCP server installed with `pip install .[serve]`. The `library` command
registers the same functions, but importing it loads the pipeline's command
groups (Dagster, the eval harness), which that install does not have."""

from __future__ import annotations

import typer

from serving import cli as serving_cli
from serving.cli_app import TopLevelApp
from serving.memory_cli import memory_app

app = TopLevelApp(help="The library's read side: search, files, memory and the MCP server.", no_args_is_help=True)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging and full tracebacks.")) -> None:
    app.start_command(verbose)


app.command("search")(serving_cli.search)
app.command("files")(serving_cli.files)
app.command("serve")(serving_cli.serve)
app.add_typer(memory_app, name="memory", help="Agent memory: index, search, get, forget.")


if __name__ == "__main__":
    app()
