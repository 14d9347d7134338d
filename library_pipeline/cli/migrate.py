"""`library migrate embedder ...`: the re-embed migration (library_pipeline.migrate.embedder)
from the command line."""

from __future__ import annotations

import json
import logging
from typing import Any

import typer

from library_pipeline.migrate.embedder import (
    DEFAULT_BATCH,
    BatchResult,
    EmbedderSpec,
    MigrationError,
    abort,
    describe,
    fill_multilingual,
    run,
    start,
    status,
)
from serving.db import Database
from serving.settings import DEFAULT_OLLAMA_URL, get_settings

migrate_app = typer.Typer(help="Migrations of the library's data.", no_args_is_help=True)
embedder_app = typer.Typer(help="Re-embed every passage with another model, search answering throughout.",
                           no_args_is_help=True)
migrate_app.add_typer(embedder_app, name="embedder")


def _cli_db() -> Database:
    return Database(get_settings())


def _progress(res: BatchResult, left: dict[str, int]) -> None:
    typer.echo(f"batch: {res.passages} passages ({res.embedded} embedded, {res.reused} reused) in "
               f"{res.seconds:.1f}s; {left['done']}/{left['total']} done, {left['remaining']} remaining", err=True)


def _run_cli(db: Database, max_batches: int, max_seconds: float, pause: float) -> None:
    try:
        out = run(db, max_batches=max_batches or None, max_seconds=max_seconds or None, pause_seconds=pause,
                  on_batch=_progress)
    except MigrationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(out, indent=2, ensure_ascii=False))


@embedder_app.command("start")
def start_cmd(
    backend: str = typer.Option(..., "--backend", help="minilm | sentence-transformers | onnx | ollama"),
    model: str = typer.Option(None, "--model", help="Model directory / .onnx file / Ollama model."),
    dims: int = typer.Option(None, "--dims", help="Matryoshka truncation (Ollama)."),
    ollama_url: str = typer.Option(DEFAULT_OLLAMA_URL, "--ollama-url"),
    batch: int = typer.Option(DEFAULT_BATCH, "--batch", min=1, help="Passages per committed batch."),
    run_now: bool = typer.Option(True, "--run/--no-run", help="Run it now (else: `resume` or the "
                                                               "reembed_migration asset runs it)."),
    max_batches: int = typer.Option(0, "--max-batches", min=0, help="Stop after N batches (0 = finish)."),
    pause: float = typer.Option(0.0, "--pause", min=0, help="Seconds to sleep between batches (throttle)."),
) -> None:
    """Record a migration to a new model and (by default) run it to the switch."""
    db = _cli_db()
    try:
        try:
            record = start(db, EmbedderSpec(backend.strip().lower(), model, dims, ollama_url), batch_size=batch)
        except (MigrationError, ValueError, RuntimeError) as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"migration to {record['target']['name']} recorded (from {record['source']})", err=True)
        if run_now:
            _run_cli(db, max_batches, 0, pause)
    finally:
        db.stop()


@embedder_app.command("resume")
def resume_cmd(
    max_batches: int = typer.Option(0, "--max-batches", min=0, help="Stop after N batches (0 = finish)."),
    max_seconds: float = typer.Option(0, "--max-seconds", min=0, help="Stop after about this long."),
    pause: float = typer.Option(0.0, "--pause", min=0, help="Seconds to sleep between batches (throttle)."),
) -> None:
    """Continue the running migration where it stopped, then switch."""
    db = _cli_db()
    try:
        _run_cli(db, max_batches, max_seconds, pause)
    finally:
        db.stop()


@embedder_app.command("multilingual")
def multilingual_cmd(
    batch: int = typer.Option(DEFAULT_BATCH, "--batch", min=1, help="Passages per committed batch."),
    max_seconds: float = typer.Option(0, "--max-seconds", min=0, help="Stop after about this long."),
    pause: float = typer.Option(0.0, "--pause", min=0, help="Seconds to sleep between batches (throttle)."),
) -> None:
    """Embed the passages that lack a vector of the multilingual lane (a library ingested
    before the lane existed); resumable, search uses each batch as soon as it commits."""
    db = _cli_db()
    try:
        def progress(res: BatchResult, left: dict[str, Any]) -> None:
            typer.echo(f"batch: {res.passages} passages ({res.embedded} embedded, {res.reused} reused) in "
                       f"{res.seconds:.1f}s; {left['done']} done, {left['remaining']} remaining", err=True)

        out = fill_multilingual(db, batch_size=batch, max_seconds=max_seconds or None, pause_seconds=pause,
                                on_batch=progress)
    except MigrationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        db.stop()
    typer.echo(json.dumps(out, indent=2, ensure_ascii=False))


@embedder_app.command("status")
def status_cmd(json_out: bool = typer.Option(False, "--json")) -> None:
    """State, target, done / remaining."""
    db = _cli_db()
    try:
        with db.connect() as conn:
            out = status(conn)
    finally:
        db.stop()
    if json_out:
        typer.echo(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        typer.echo(describe(out))


@embedder_app.command("abort")
def abort_cmd() -> None:
    """Stop the running migration and drop its vectors (search never used them)."""
    db = _cli_db()
    try:
        out = abort(db)
    except MigrationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        db.stop()
    typer.echo(f"aborted the migration to {out['target']['name']}; dropped {out['dropped_vectors']} vectors")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    migrate_app()


if __name__ == "__main__":
    main()
