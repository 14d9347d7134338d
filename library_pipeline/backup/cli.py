"""`library backup FILE` and `library restore FILE`: the commands (registered on the
`library` app in library_pipeline/cli/main.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

from library_pipeline.backup.archive import BackupError
from serving.db import Database
from serving.settings import get_settings

T = TypeVar("T")
console = Console(stderr=True, soft_wrap=True)  # a path or a reason is one line, never folded


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


class _Bar:
    """One progress line: the stage's text, and a bar when the stage has a total."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("starting", total=None)

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.progress.update(self.task, description=stage, completed=done, total=total or None)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description:<28}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def _with_progress(work: Callable[..., T], file: Path, **options: Any) -> T:
    """`work(db, file, progress=…, **options)` on this process's library database, with a
    progress line; a refusal is one line and exit status 2."""
    db = Database(get_settings())
    try:
        with _progress() as progress:
            return work(db, file, progress=_Bar(progress), **options)
    except BackupError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    finally:
        db.stop()


def backup(
    file: Path = typer.Argument(..., help="Where to write the backup (replaced only once the new one is complete)."),
    memories_only: bool = typer.Option(False, "--memories-only", help=(
        "Only what cannot be ingested again: memories and their versions, access log, curation "
        "state, vault note versions, query log.")),
) -> None:
    """A consistent snapshot of the library database while it serves (embedded or LIBRARY_DB_DSN)."""
    from library_pipeline.backup.backup import backup as run_backup

    result = _with_progress(run_backup, file, memories_only=memories_only)
    m = result.manifest
    rows = sum(m.counts.values())
    console.print(f"[bold]{result.path}[/]: {m.kind} backup, {_size(result.bytes)}, {rows:,} rows of "
                  f"{len(m.counts)} tables, {len(m.memories):,} memory versions; {result.seconds:.1f} s")


def restore(
    file: Path = typer.Argument(..., help="A file written by `library backup`."),
    force: bool = typer.Option(False, "--force", help=(
        "Replace what the target holds (a full backup: everything; a memories-only one: its "
        "memories and vault).")),
) -> None:
    """Restore a backup into an empty home or empty database (LIBRARY_HOME / LIBRARY_DB_DSN).
    The file is checked whole before anything is touched."""
    from library_pipeline.backup.restore import restore as run_restore

    result = _with_progress(run_restore, file, force=force)
    t = result.totals
    console.print(f"restored {result.manifest.kind} backup of {result.manifest.created_at} in "
                  f"{result.seconds:.1f} s: {t['files']:,} files, {t['vault notes']:,} vault notes, "
                  f"{t['passages']:,} passages, {t['memories']:,} memories ({t['versions']:,} versions)")
    if result.inserted:
        console.print("added: " + ", ".join(f"{n:,} {table}" for table, n in result.inserted.items() if n))
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
