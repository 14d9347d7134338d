"""`library`: the command line. Ingest runs the same Dagster assets as the UI,
in-process, recorded in the same instance."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from library_pipeline.backup import cli as backup_cli
from library_pipeline.eval.cli import eval_app
from library_pipeline.cli.migrate import migrate_app
from library_pipeline.launch.run_plan import RANGE_SIZE
from library_pipeline.cli.vault import vault_app
from serving import cli as serving_cli
from serving.memory_cli import memory_app
from library_pipeline.cli.graph import graph_app
from serving.cli_app import TopLevelApp
from serving.db import Database
from serving.settings import Settings, get_settings

console = Console(stderr=True)
log = logging.getLogger("library_pipeline.cli.main")
app = TopLevelApp(help="A local-first document library and memory for AI agents.", no_args_is_help=True)


@app.callback()
def main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging and full tracebacks.")) -> None:
    app.start_command(verbose)


def _relpaths(settings: Settings, paths: list[Path]) -> list[str] | None:
    if not paths:
        return None
    root = settings.library_dir.resolve()
    out = []
    for p in paths:
        absolute = p.expanduser().absolute()
        if not absolute.resolve().is_relative_to(root) and not absolute.is_relative_to(root):
            raise typer.BadParameter(f"{p} is not inside the library folder {root} (LIBRARY_DIR)")
        rel = absolute.relative_to(root) if absolute.is_relative_to(root) else absolute.resolve().relative_to(root)
        out.append(rel.as_posix())
    return out


@app.command()
def ingest(
    paths: list[Path] = typer.Argument(None, help="Files or folders inside LIBRARY_DIR (default: all)."),
    force: bool = typer.Option(False, help="Re-extract, re-chunk and re-embed even unchanged files."),
    batch: int = typer.Option(RANGE_SIZE, min=1, help="Files per Dagster run (the folder sensor's range size)."),
) -> None:
    """Ingest the library (or some files of it) through the Dagster assets, in-process."""
    from library_pipeline.launch.ingest_runner import run_ingest

    settings = get_settings()
    db = Database(settings)
    try:
        summary = run_ingest(db, _relpaths(settings, paths or []), force=force, batch=batch)
    finally:
        db.stop()
    console.print(f"[bold]{summary['files']}[/] files: {summary['ingested']} ingested, "
                  f"{summary['failed']} failed, {summary['removed']} marked removed; "
                  f"{summary['passages']} passages live; {summary['seconds']:.1f}s")
    for path, reason in summary["failures"]:
        console.print(f"  [red]failed[/] {path}: {reason}")


STATUS_SQL = """
SELECT d.path, d.status, d.pages, d.ocr_pages, d.error, d.language, d.format,
       (SELECT count(*) FROM passages p WHERE p.document_id = d.id AND p.summary_level = 0) AS passages
FROM documents d WHERE d.source = 'library' ORDER BY d.path
"""


def inventory(db: Database) -> dict:
    with db.connect() as conn:
        rows = conn.execute(STATUS_SQL).fetchall()
    documents = [{"path": r[0], "status": r[1], "pages": r[2], "ocr_pages": r[3], "passages": r[7],
                  "error": r[4], "language": r[5], "format": r[6]} for r in rows]
    totals: dict[str, int] = {"files": len(documents), "passages": sum(d["passages"] for d in documents),
                              "pages": sum(d["pages"] or 0 for d in documents),
                              "ocr_pages": sum(d["ocr_pages"] or 0 for d in documents)}
    for status in ("ingested", "pending", "failed", "removed"):
        totals[status] = sum(d["status"] == status for d in documents)
    return {"documents": documents, "totals": totals}


@app.command()
def status(json_out: bool = typer.Option(False, "--json", help="Machine-readable inventory.")) -> None:
    """The inventory: files, passages, failures with their reasons."""
    db = Database(get_settings())
    try:
        data = inventory(db)
        from library_pipeline.migrate.embedder import status as migration_status

        with db.connect() as conn:
            data["embedder"] = migration_status(conn)
    finally:
        db.stop()
    if json_out:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    table = Table(title=f"library: {db.settings.library_dir}")
    for col in ("path", "status", "pages", "ocr", "passages", "error"):
        table.add_column(col, overflow="fold")
    for d in data["documents"]:
        style = {"failed": "red", "removed": "dim", "pending": "yellow"}.get(d["status"])
        table.add_row(d["path"], d["status"], str(d["pages"] or "-"), str(d["ocr_pages"] or 0),
                      str(d["passages"]), d["error"] or "", style=style)
    Console().print(table)
    Console().print(", ".join(f"{k}: {v}" for k, v in data["totals"].items()))
    from library_pipeline.migrate.embedder import describe as describe_migration

    Console().print(describe_migration(data["embedder"]))


@app.command()
def purge(yes: bool = typer.Option(False, "--yes", help="Do it (otherwise only list).")) -> None:
    """Delete the rows of files marked removed (passages, pages, chunks, summaries, their graph)."""
    from library_pipeline.launch.ingest_runner import purge_removed_files

    db = Database(get_settings())
    try:
        with db.connect() as conn:
            paths = [r[0] for r in conn.execute(
                "SELECT path FROM documents WHERE source = 'library' AND status = 'removed' ORDER BY path")]
        if not paths:
            console.print("nothing to purge: no file is marked removed")
            return
        for p in paths:
            console.print(f"  {'purging' if yes else 'would purge'} {p}")
        if yes:
            purged = purge_removed_files(db)
            console.print(f"purged {len(purged)} removed file(s): their passages, summaries and graph")
        else:
            console.print("re-run with --yes to delete these rows")
    finally:
        db.stop()


# the read side's commands live with it (serving deploys without this package)
app.command("search")(serving_cli.search)
app.command("files")(serving_cli.files)
app.command("serve")(serving_cli.serve)
app.add_typer(memory_app, name="memory", help="Agent memory: index, search, get, forget.")
app.add_typer(graph_app, name="graph", help="Knowledge graph and RAPTOR summaries: build, entity, related, path, subgraph, top.")
app.add_typer(eval_app, name="eval", help="Retrieval evaluation: BEIR datasets, the regression set, pooled judgments.")
app.add_typer(vault_app, name="vault", help="Obsidian vault sync on git push: sync [--full], status.")
app.add_typer(migrate_app, name="migrate", help="Migrations: `migrate embedder start|status|resume|abort`.")
app.command("backup")(backup_cli.backup)
app.command("restore")(backup_cli.restore)


@app.command()
def up(
    ingest: bool = typer.Option(True, help="Ingest the library before serving."),
    port: int = typer.Option(3000, help="Dagster webserver port (127.0.0.1)."),
    mcp_port: int = typer.Option(8765, help="MCP streamable-HTTP port (127.0.0.1)."),
) -> None:
    """The main job: database, ingest (example library on first run), Dagster UI + daemon, MCP server."""
    from library_pipeline.cli.up import run_up

    raise typer.Exit(run_up(ingest=ingest, webserver_port=port, mcp_port=mcp_port))


if __name__ == "__main__":
    app()
