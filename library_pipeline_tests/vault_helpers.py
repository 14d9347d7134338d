"""Helpers for the vault tests: real git repositories, the real sensor and assets."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import dagster as dg

from library_pipeline.defs.vault import VaultResource, vault_note_sections, vault_notes_partitions
from library_pipeline.defs.vault.sensors import vault_push_sensor
from library_pipeline.launch.plans import QUIET_RUN_CONFIG
from library_pipeline.resources import EmbedderResource, LibraryDatabase
from serving.db import Database

GIT_ENV = {"GIT_AUTHOR_NAME": "Vault Test", "GIT_AUTHOR_EMAIL": "vault@example.org",
           "GIT_COMMITTER_NAME": "Vault Test", "GIT_COMMITTER_EMAIL": "vault@example.org",
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent-for-git"}


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    for var in ("GIT_DIR", "GIT_WORK_TREE"):
        full_env.pop(var, None)
    proc = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", "-C", str(repo),
                           *args], capture_output=True, text=True, env=full_env, timeout=120)
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout.strip()


def init_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def commit_all(repo: Path, message: str, date: str | None = None) -> str:
    git(repo, "add", "-A")
    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else None
    git(repo, "commit", "-q", "--allow-empty", "-m", message, env=env)
    return git(repo, "rev-parse", "HEAD")


def copy_vaults(test_data: Path, repo: Path) -> None:
    """Both test vaults, side by side, as one vault repository."""
    for name in ("kepano_vault", "quartz_docs"):
        shutil.copytree(test_data / "obsidian_vaults" / name, repo / name)


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def resources(db: Database, repo: Path, embedder_resource: EmbedderResource | None = None) -> dict:
    return {"library_db": LibraryDatabase.from_settings(db.settings),
            "embedder": embedder_resource or EmbedderResource.from_settings(db.settings),
            "vault": VaultResource.from_settings(dataclasses.replace(db.settings, vault_repo=repo))}


def tick(instance: dg.DagsterInstance, db: Database, repo: Path, cursor: str | None = None):
    res = resources(db, repo)
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources={"library_db": res["library_db"], "vault": res["vault"]}) as ctx:
        return vault_push_sensor(ctx)


def execute(instance: dg.DagsterInstance, db: Database, repo: Path, result,
            embedder_resource: EmbedderResource | None = None) -> list[dg.ExecuteInProcessResult]:
    """Apply a sensor result as the daemon would: partition requests, then each run."""
    for req in result.dynamic_partitions_requests or []:
        if isinstance(req, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        else:
            for key in req.partition_keys:
                instance.delete_dynamic_partition(req.partitions_def_name, key)
    runs = []
    for request in result.run_requests or []:
        runs.append(dg.materialize([vault_note_sections], instance=instance,
                                   resources=resources(db, repo, embedder_resource),
                                   partition_key=request.partition_key, tags=request.tags,
                                   run_config=QUIET_RUN_CONFIG, raise_on_error=False))
    return runs


def sync_by_sensor(instance: dg.DagsterInstance, db: Database, repo: Path, cursor: str | None):
    result = tick(instance, db, repo, cursor)
    runs = execute(instance, db, repo, result) if isinstance(result, dg.SensorResult) else []
    return result, runs


def notes(db: Database) -> dict[str, dict]:
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT d.id, d.path, d.status, d.error, d.version, d.title, d.partition_key, "
            "(SELECT count(*) FROM passages p WHERE p.document_id = d.id AND NOT p.superseded AND NOT p.removed), "
            "(SELECT count(*) FROM passages p WHERE p.document_id = d.id AND p.superseded) "
            "FROM documents d WHERE d.source = 'vault' ORDER BY d.path").fetchall()
    keys = ("id", "path", "status", "error", "version", "title", "key", "live", "superseded")
    return {r[1]: dict(zip(keys, r)) for r in rows}


def last_sync(db: Database) -> dict:
    with db.connect() as conn:
        cur = conn.execute("SELECT * FROM vault_syncs ORDER BY id DESC LIMIT 1")
        names = [d.name for d in cur.description]
        return dict(zip(names, cur.fetchone()))


__all__ = ["git", "init_repo", "commit_all", "copy_vaults", "write", "resources", "tick", "execute",
           "sync_by_sensor", "notes", "last_sync", "vault_notes_partitions"]
