"""`library vault sync [--full]` and `library vault status`."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from serving.db import Database
from serving.settings import Settings, get_settings

vault_app = typer.Typer(help="Obsidian vault sync from a git repository (LIBRARY_VAULT_REPO).",
                        no_args_is_help=True)
console = Console(stderr=True)
log = logging.getLogger("library_pipeline.cli.vault")


def _settings(repo: Path | None, branch: str | None) -> Settings:
    settings = get_settings()
    if repo is not None:
        settings = dataclasses.replace(settings, vault_repo=repo.expanduser().absolute())
    if branch:
        settings = dataclasses.replace(settings, vault_branch=branch)
    if settings.vault_repo is None:
        raise typer.BadParameter("no vault repository: set LIBRARY_VAULT_REPO or pass --repo")
    return settings


@vault_app.command()
def sync(
    full: bool = typer.Option(False, "--full", help="Compare every note at the head with the index "
                                                   "(instead of diffing from the last synced commit)."),
    repo: Path = typer.Option(None, help="Vault git repository (default LIBRARY_VAULT_REPO)."),
    branch: str = typer.Option(None, help="Branch (default LIBRARY_VAULT_BRANCH, else the repository's HEAD)."),
    trigger: str = typer.Option("cli", hidden=True, help="Recorded in vault_syncs (the hook passes 'hook')."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable summary."),
) -> None:
    """Index what changed in the vault since the last sync, now (in-process Dagster runs)."""
    from library_pipeline.vault.git import GitError
    from library_pipeline.launch.vault_runner import run_sync

    settings = _settings(repo, branch)
    db = Database(settings)
    try:
        summary = run_sync(db, full=full, trigger=trigger)
    except (GitError, ValueError) as exc:
        console.print(f"[red]vault sync failed:[/] {exc}")
        raise typer.Exit(2) from None
    finally:
        db.stop()
    if json_out:
        typer.echo(json.dumps(summary, ensure_ascii=False, indent=2, default=str))
        return
    if summary["mode"] == "noop":
        console.print(f"vault already synced at {summary['head'][:12]}")
        return
    console.print(f"vault {summary['mode']} sync {summary['sync_id']} to {summary['head'][:12]}"
                  + (f" ({summary['reason']})" if summary.get("reason") else "")
                  + f": [bold]{summary['files_processed']}[/] files processed, "
                    f"[bold]{summary['chunks_indexed']}[/] chunks indexed, {summary['renamed']} renamed, "
                    f"{summary['removed']} removed, {len(summary['skipped'])} skipped; {summary['seconds']:.1f}s")
    for path, reason in summary["failures"]:
        console.print(f"  [red]failed[/] {path}: {reason}")
    if summary["failed_runs"]:
        raise typer.Exit(1)


def vault_status(db: Database, settings: Settings) -> dict:
    from library_pipeline.definitions import build_resources
    from library_pipeline.defs.vault.assets import vault_lag

    vault = build_resources(settings)["vault"]
    out: dict = {"repo": str(settings.vault_repo or ""), "configured": vault.configured}
    if vault.configured:
        try:
            out["freshness"] = vault_lag(vault, db)
        except Exception as exc:  # noqa: BLE001 - status must report, not crash
            out["freshness"] = {"error": str(exc)}
    with db.connect() as conn:
        out["notes"] = dict(conn.execute(
            "SELECT status, count(*) FROM documents WHERE source = 'vault' GROUP BY status").fetchall())
        out["passages"] = dict(conn.execute(
            "SELECT CASE WHEN removed THEN 'removed' WHEN superseded THEN 'superseded' ELSE 'live' END, count(*) "
            "FROM passages WHERE source = 'vault' GROUP BY 1").fetchall())
        out["links"] = conn.execute("SELECT count(*) FROM note_links").fetchone()[0]
        out["failures"] = [{"path": p, "error": e} for p, e in conn.execute(
            "SELECT path, error FROM documents WHERE source = 'vault' AND status = 'failed' ORDER BY path")]
        out["warnings"] = [{"path": p, "warning": e} for p, e in conn.execute(
            "SELECT path, error FROM documents WHERE source = 'vault' AND status = 'ingested' AND error IS NOT NULL "
            "ORDER BY path LIMIT 100")]
        keys = ("id", "trigger", "mode", "reason", "from", "to", "requested", "renamed", "removed", "skipped",
                "files_processed", "chunks_indexed", "failed", "started_at", "finished_at")
        out["syncs"] = [dict(zip(keys, r)) for r in conn.execute(
            "SELECT id, trigger, mode, reason, from_commit, to_commit, requested, renamed, removed, skipped, "
            "files_processed + removed, chunks_indexed, failed, started_at, finished_at "
            "FROM vault_syncs ORDER BY id DESC LIMIT 10")]
    return out


@vault_app.command()
def status(
    repo: Path = typer.Option(None, help="Vault git repository (default LIBRARY_VAULT_REPO)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable status."),
) -> None:
    """Head vs last synced commit (lag), notes by status, failures, recent syncs."""
    settings = get_settings()
    if repo is not None:
        settings = dataclasses.replace(settings, vault_repo=repo.expanduser().absolute())
    db = Database(settings)
    try:
        data = vault_status(db, settings)
    finally:
        db.stop()
    if json_out:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))
        return
    out = Console()
    fresh = data.get("freshness") or {}
    out.print(f"vault: {data['repo'] or '(not configured: LIBRARY_VAULT_REPO)'}")
    if "error" in fresh:
        out.print(f"  [red]{fresh['error']}[/]")
    elif fresh:
        out.print(f"  head {fresh['head'][:12]}  synced {fresh['synced'][:12] or '-'}  "
                  f"lag {fresh['lag_hours']:.2f} h ({fresh['unsynced_commits']} commit(s) not indexed)")
    out.print("  notes: " + (", ".join(f"{k} {v}" for k, v in sorted(data["notes"].items())) or "none")
              + "; passages: " + (", ".join(f"{k} {v}" for k, v in sorted(data["passages"].items())) or "none")
              + f"; links {data['links']}")
    for f in data["failures"]:
        out.print(f"  [red]failed[/] {f['path']}: {f['error']}")
    for w in data["warnings"]:
        out.print(f"  [yellow]warning[/] {w['path']}: {w['warning']}")
    if data["syncs"]:
        table = Table(title="recent syncs")
        for col in ("id", "trigger", "mode", "commits", "files", "chunks", "failed", "skipped", "finished"):
            table.add_column(col, overflow="fold")
        for s in data["syncs"]:
            finished = s["finished_at"].strftime("%Y-%m-%d %H:%M") if s["finished_at"] else "running"
            table.add_row(str(s["id"]), s["trigger"], s["mode"], f"{(s['from'] or '-')[:7]}..{s['to'][:7]}",
                          str(s["files_processed"]), str(s["chunks_indexed"]), str(s["failed"]),
                          str(len(s["skipped"] or {})), finished)
        out.print(table)
        latest = data["syncs"][0]
        out.print(f"last sync: {latest['files_processed']} files processed, {latest['chunks_indexed']} chunks indexed"
                  + (f" ({latest['mode']}: {latest['reason']})" if latest["reason"] else ""))
