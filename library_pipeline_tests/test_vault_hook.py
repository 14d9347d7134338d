"""The post-receive hook on a real bare repository: a push from a clone starts
`library vault sync` (a real subprocess of the installed CLI) and the pushed
note becomes searchable; the sensor then does not index the push again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

from library_pipeline_tests.vault_helpers import commit_all, git, last_sync, notes, tick, write
from serving.search.engine import search
from serving.search.types import SearchConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
HOOK = REPO_ROOT / "scripts" / "post-receive"
CLI = Path(sys.executable).parent / "library"


def _wait_for(predicate, timeout: float) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if predicate():
            return time.perf_counter() - started
        time.sleep(0.5)
    raise AssertionError(f"condition not met within {timeout:.0f} s")


def test_post_receive_hook_syncs_a_push(make_db, embedder, tmp_path):
    db = make_db()
    home = tmp_path / "home"
    bare = tmp_path / "vault.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    shutil.copy(HOOK, bare / "hooks" / "post-receive")
    (bare / "hooks" / "library.env").write_text("\n".join([
        f"LIBRARY_HOME={home}", f"DAGSTER_HOME={home / 'dagster'}", f"LIBRARY_DB_DSN='{db.settings.db_dsn}'",
        f"LIBRARY_CLI={CLI}", "HF_HUB_OFFLINE=1", "TOKENIZERS_PARALLELISM=false", ""]))

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(bare), str(clone))
    git(clone, "checkout", "-q", "-b", "main")
    write(clone / "Projects/Heron survey.md", "---\ntags: [birds]\n---\n## Method\n\nWe counted grey herons "
                                              "along the estuary with a spotting scope.\n\n## Links\n\n[[Estuary]]\n")
    write(clone / "Estuary.md", "# Estuary\n\nMudflats and salt marsh.\n")
    commit_all(clone, "first notes")
    proc = subprocess.run(["git", "-C", str(clone), "push", "-q", "origin", "main"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    pushed = time.perf_counter()
    assert proc.returncode == 0, proc.stderr
    assert "vault sync started in the background" in proc.stderr  # the hook's message, relayed by git

    def synced() -> bool:
        with db.connect() as conn:
            return bool(conn.execute("SELECT 1 FROM vault_syncs WHERE trigger = 'hook' AND finished_at IS NOT NULL")
                        .fetchone())

    try:
        _wait_for(synced, timeout=300)
    except AssertionError:
        log = home / "logs" / "vault-hook.log"
        raise AssertionError(log.read_text()[-3000:] if log.exists() else "no hook log") from None
    latency = time.perf_counter() - pushed
    rows = notes(db)
    assert rows["Projects/Heron survey.md"]["status"] == "ingested" and rows["Estuary.md"]["status"] == "ingested"
    sync = last_sync(db)
    assert sync["trigger"] == "hook" and sync["files_processed"] == 2 and sync["chunks_indexed"] >= 3
    with db.connect() as conn:
        hits = search(conn, embedder, "counting grey herons on the estuary", top_k=3,
                      config=SearchConfig(rerank=False)).results
    assert hits[0].path == "Projects/Heron survey.md" and hits[0].heading == "Method"
    assert latency < 240, latency

    # the sensor sees that the hook already requested this head: no second indexing
    head = git(bare, "rev-parse", "main")
    with dg.DagsterInstance.ephemeral() as instance:
        result = tick(instance, db, bare, cursor=None)
        assert isinstance(result, dg.SensorResult) and result.run_requests == [] and result.cursor == head

    # `library vault status --json` reports it
    env = {**os.environ, "LIBRARY_HOME": str(home), "LIBRARY_DB_DSN": db.settings.db_dsn,
           "LIBRARY_VAULT_REPO": str(bare)}
    status = subprocess.run([str(CLI), "vault", "status", "--json"], capture_output=True, text=True, env=env,
                            timeout=300)
    assert status.returncode == 0, status.stderr[-2000:]
    data = json.loads(status.stdout)
    assert data["freshness"]["head"] == head and data["freshness"]["lag_hours"] == 0.0
    assert data["notes"] == {"ingested": 2} and data["syncs"][0]["trigger"] == "hook"
