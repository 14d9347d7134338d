"""Dagster's instance lives in the same PostgreSQL as the library (runs,
event logs, schedules, sensor cursors), so the UI, the daemon's sensors and
`library ingest` on the command line all see one history."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from serving.db import Database

LANE_TAG = "library/lane"  # run tag that puts a run in a lane (library_pipeline.defs.ops)

RUN_QUEUE = {
    # Enrichment (RAPTOR, graph) and maintenance (memory upkeep, reconcile) get
    # one slot each, so at least two of the four always remain for ingestion
    # (runs without a lane tag, e.g. the folder sensor's, count only against
    # the total). Four, not more: on 2 cores each run holds a loaded embedder.
    "max_concurrent_runs": 4,
    "tag_concurrency_limits": [
        {"key": LANE_TAG, "value": "enrich", "limit": 1},
        {"key": LANE_TAG, "value": "maintenance", "limit": 1},
    ],
}


ENRICH_POOL = "enrich"
POOLS = {"default_limit": 1, "granularity": "run"}


def prepare_dagster_home(db: Database) -> Path:
    """Write DAGSTER_HOME/dagster.yaml for this database and export DAGSTER_HOME."""
    home = Path(os.environ.get("DAGSTER_HOME") or db.settings.home / "dagster")
    home.mkdir(parents=True, exist_ok=True)
    url = db.dagster_url()
    os.environ["LIBRARY_DAGSTER_PG_URL"] = url
    # an external server's URL may carry a password: reference it from the
    # environment rather than writing it to disk; the embedded one has none.
    postgres_url = url if db.embedded else {"env": "LIBRARY_DAGSTER_PG_URL"}
    config = {
        "storage": {"postgres": {"postgres_url": postgres_url}},
        "run_coordinator": {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"},
        # run limits live here once `concurrency` is used (Dagster refuses them in
        # the run coordinator's config then). Pools: the enrich assets (pool
        # "enrich") get one slot, checked by the run queue before a run starts
        # (granularity "run"), so automation may queue enrich runs after every
        # ingest without two of them ever competing with ingestion for the 2 cores.
        "concurrency": {"runs": RUN_QUEUE, "pools": POOLS},
        # step stdout/stderr viewable in the UI's run page (without it the
        # instance page showed `compute_logs: NoneType`)
        "compute_logs": {
            "module": "dagster._core.storage.local_compute_log_manager",
            "class": "LocalComputeLogManager",
            "config": {"base_dir": str(home / "compute_logs")},
        },
        "telemetry": {"enabled": False},
    }
    target = home / "dagster.yaml"
    text = yaml.safe_dump(config, sort_keys=False)
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    os.environ["DAGSTER_HOME"] = str(home)
    return home
