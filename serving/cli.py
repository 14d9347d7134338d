"""CLI command functions for the read side. Plain typer-annotated functions, no
app object: `library_pipeline.cli.main` registers them as `library search`, `library files`,
`library serve`.

`library search --json` prints exactly the list of results the MCP tool
returns (source, location, kind, score, lanes, text, ...), so a shell user and
an agent see the same thing.
"""

from __future__ import annotations

import errno
import json
import logging
import signal
import socket
import subprocess
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from serving.db import StartError
from serving.search.types import MAX_TOP_K, SearchError

log = logging.getLogger(__name__)
T = TypeVar("T")


def _library():
    from serving.runtime import Library

    return Library()


def describe_failure(exc: BaseException) -> str:
    """One line naming why a command could not run, for a user rather than a
    developer: the cause (disk full, permission, port, database unreachable),
    never a traceback of the internals it surfaced through."""
    import psycopg

    from serving.db import StartError

    def first(text: object) -> str:
        return (str(text).strip().splitlines() or [""])[0][:300]

    if isinstance(exc, (StartError, ConnectionError)):
        return first(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        where = f": {exc.filename}" if exc.filename else ""
        if exc.errno == errno.ENOSPC:
            return f"no space left on the device{where}"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return f"permission denied{where}"
        if exc.errno == errno.EROFS:
            return f"read-only file system{where}"
        if exc.errno == errno.EADDRINUSE:
            return f"address already in use{where}"
        return f"{exc.strerror or type(exc).__name__}{where}"
    if isinstance(exc, psycopg.errors.DiskFull):
        return f"the database server is out of disk space: {first(exc)}"
    if isinstance(exc, psycopg.OperationalError):
        return f"the library database is unreachable: {first(exc)}"
    if isinstance(exc, psycopg.Error):
        return f"database error ({type(exc).__name__}): {first(exc)}"
    if isinstance(exc, subprocess.CalledProcessError):
        cmd = exc.cmd[0] if isinstance(exc.cmd, (list, tuple)) and exc.cmd else exc.cmd
        return f"{cmd} failed with exit code {exc.returncode}"
    return f"{type(exc).__name__}: {first(exc)} (run with --verbose for the traceback)"


def port_in_use(host: str, port: int) -> bool:
    """True if `host:port` cannot be bound now (someone listens there)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # the option uvicorn and the Dagster webserver set too: a port in TIME_WAIT is free
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def with_library(fn: Callable[[Any], T], errors: tuple[type[Exception], ...] = (SearchError,)) -> T:
    """Run `fn(Library)` and close it; a user-fixable error (and a database
    that cannot be reached) becomes a one-line message and exit code 2."""
    lib = _library()
    try:
        return fn(lib)
    except (*errors, ConnectionError, StartError) as exc:
        fail(str(exc))
    finally:
        lib.close()


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2))


def search(
    query: Annotated[str, typer.Argument(help="What to look for: words, a title, a question.")],
    top_k: Annotated[int, typer.Option("--top-k", "-k", help=f"Results to return (1-{MAX_TOP_K}).")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON (what the MCP tool returns).")] = False,
    source: Annotated[str | None, typer.Option(help="Only this source: library, vault or memory.")] = None,
    path: Annotated[str | None, typer.Option(help="Only this document (exact path, see `library files`).")] = None,
    summaries: Annotated[bool, typer.Option("--summaries/--no-summaries", help="Also show the summaries lane.")] = True,
) -> None:
    """Hybrid search of the library (vector + keyword + title lanes, fused; reranked when configured)."""
    filters: dict[str, Any] = {}
    if source:
        filters["source"] = source
    if path:
        filters["path"] = path
    response = with_library(lambda lib: lib.search(query, top_k=top_k, filters=filters))
    if json_out:
        _print_json([r.to_dict() for r in response.results])
        return
    _print_table(response, summaries)


def _print_table(response, show_summaries: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{len(response.results)} results for {response.query!r} (score: {response.score_kind})",
                  show_lines=True, expand=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("lanes", no_wrap=True)
    table.add_column("document / location", ratio=2)
    table.add_column("text", ratio=5)
    for i, r in enumerate(response.results, start=1):
        lanes = " ".join(f"{lane}:{rank}" for lane, rank in r.lanes.items())
        where = f"[bold]{r.path or r.source}[/bold]\n{r.location}" + (f" [dim]({r.kind})[/dim]" if r.kind != "text" else "")
        table.add_row(str(i), f"{r.score:.4f}", lanes, where, _snippet(r.text))
    console.print(table)
    if show_summaries and response.summaries:
        st = Table(title="summaries (ranked separately)", expand=True)
        st.add_column("sim", justify="right", no_wrap=True)
        st.add_column("document", ratio=2)
        st.add_column("summary", ratio=5)
        for r in response.summaries:
            st.add_row(f"{r.score:.3f}", r.path or r.source, _snippet(r.text))
        console.print(st)
    notes = [f"{stage}: {status}" for stage, status in response.stages.items() if not status.startswith("ok")]
    for line in notes + response.warnings:
        console.print(f"[dim]{line}[/dim]")
    console.print(f"[dim]{response.timings.get('total', 0):.0f} ms[/dim]")


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def files(
    pattern: Annotated[str, typer.Argument(help="Title, author or file name (or part of one); empty lists all.")] = "",
    json_out: Annotated[bool, typer.Option("--json", help="Print the inventory answer as JSON.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Files to list at most.")] = 50,
) -> None:
    """Is a work in the library? Matches file names and titles; matched = 0 means it is not."""
    answer = with_library(lambda lib: lib.files(pattern, limit))
    if json_out:
        _print_json(answer)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if answer["matched"] == 0:
        console.print(f"No file matches {answer['pattern']!r} (matched 0 of {answer['total']}): "
                      "it is not in the library.")
        return
    table = Table(title=f"matched {answer['matched']} of {answer['total']}"
                        + (f", showing {answer['returned']}" if answer["truncated"] else ""))
    for column in ("path", "title", "status", "match"):
        table.add_column(column)
    for f in answer["files"]:
        table.add_row(f["path"], f.get("title") or "", f["status"], f["match"])
    console.print(table)


def serve(
    http: Annotated[bool, typer.Option("--http", help="Streamable HTTP instead of stdio.")] = False,
    host: Annotated[str, typer.Option(help="HTTP bind address; anything but loopback needs LIBRARY_MCP_TOKEN.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8765,
) -> None:
    """Serve library_search and library_files to agents over MCP."""
    from serving import mcp_server

    if http and port_in_use(host, port):
        fail(f"port {port} on {host} is already in use: stop what listens there or pass --port")
    argv = ["--http", "--host", host, "--port", str(port)] if http else []
    # uvicorn shuts down gracefully on SIGTERM, then restores the previous handler and
    # raises the signal again: with the default handler the process died by the signal
    # (exit -15) and skipped its exit hooks, so its claim on the embedded PostgreSQL
    # stayed registered and the server outlived it. This handler makes that a normal exit.
    signal.signal(signal.SIGTERM, _exit_normally)
    mcp_server.main(argv)


def _exit_normally(signum: int, _frame) -> None:
    raise SystemExit(0)
