"""How partition work becomes Dagster runs: run lanes, and which partitions each run covers.

Run lanes. Run concurrency lives in the instance (DAGSTER_HOME/dagster.yaml, written by
`library_pipeline.instance.home` from `RUN_QUEUE` and `POOLS` below): the
QueuedRunCoordinator caps all runs and each lane by the `library/lane` run tag. Jobs and
run requests put themselves in a lane with the tags below, so a night of graph
extraction holds one slot and never the slots ingestion needs.

Ranges. Measured on the 2-core box (Dagster 1.13): one RunRequest per partition slows a
sensor tick super-linearly (~7.5 s per tick for 10k files), and each run costs ~0.5-8 s
against ~60-75 ms per extra partition inside a range. So work goes out as contiguous
ranges of partitions (in the order the dynamic keys were added) of at most RANGE_SIZE;
a handful of scattered keys (up to MAX_SINGLE_REQUESTS) go out one run each, more as
the span covering them - the partitions in between ride along and skip in milliseconds
on their unchanged content hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

LANE_TAG = "library/lane"  # run tag that puts a run in a lane
INGEST_LANE = {LANE_TAG: "ingest"}
ENRICH_LANE = {LANE_TAG: "enrich"}            # RAPTOR summaries, knowledge graph
MAINTENANCE_LANE = {LANE_TAG: "maintenance"}  # memory upkeep, reconcile, re-embed, housekeeping

RUN_QUEUE = {
    # Enrichment (RAPTOR, graph) and maintenance (memory upkeep, reconcile) get
    # one slot each, so at least two of the four always remain for ingestion
    # (runs without a lane tag, e.g. the folder sensor's, count only against
    # the total). Four, not more: on 2 cores each run holds a loaded embedder.
    "max_concurrent_runs": 4,
    "tag_concurrency_limits": [
        {"key": LANE_TAG, "value": ENRICH_LANE[LANE_TAG], "limit": 1},
        {"key": LANE_TAG, "value": MAINTENANCE_LANE[LANE_TAG], "limit": 1},
    ],
}
# Pools: the enrich assets (pool "enrich") get one slot, checked by the run queue before
# a run starts (granularity "run"), so automation may queue enrich runs after every
# ingest without two of them ever competing with ingestion for the 2 cores.
ENRICH_POOL = "enrich"
POOLS = {"default_limit": 1, "granularity": "run"}

RANGE_SIZE = 200
MAX_SINGLE_REQUESTS = 25
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def range_tags(keys: list[str]) -> dict[str, str]:
    """The run tags that make one run cover keys[0]..keys[-1]."""
    return {RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[-1]}


def digest(keys: Iterable[str], length: int = 12) -> str:
    """A short stable name for a set of keys (part of a run key)."""
    return hashlib.sha1("\n".join(keys).encode()).hexdigest()[:length]


def chunked(keys: list[str], size: int = RANGE_SIZE) -> list[list[str]]:
    return [keys[i:i + size] for i in range(0, len(keys), size)]


def covering_span(keys: list[str], key_order: list[str]) -> list[str]:
    """The stretch of `key_order` from the first to the last of `keys`."""
    position = {k: i for i, k in enumerate(key_order)}
    ordered = sorted(keys, key=lambda k: position.get(k, 0))
    return key_order[position.get(ordered[0], 0): position.get(ordered[-1], 0) + 1]


def plan_ranges(keys: list[str], key_order: list[str], *, size: int = RANGE_SIZE,
                max_single: int = MAX_SINGLE_REQUESTS) -> list[list[str]]:
    """The partitions of each run for scattered `keys`: one run per key up to
    `max_single`, else the span covering them in ranges of at most `size`."""
    keys = list(dict.fromkeys(keys))
    if len(keys) <= max_single:
        return [[k] for k in keys]
    return chunked(covering_span(keys, key_order), size)


def contiguous_spans(keys: list[str], order: list[str], batch: int) -> list[list[str]]:
    """Ranges (in partition order) that cover `keys`, each at most `batch` long, for
    runs launched in-process one after another (`library ingest`): keys up to three
    apart share a range, the ones in between ride along."""
    position = {k: i for i, k in enumerate(order)}
    wanted = sorted({position[k] for k in keys})
    spans: list[list[str]] = []
    for index in wanted:
        if spans and index - position[spans[-1][-1]] <= 3 and len(spans[-1]) < batch:
            spans[-1].extend(order[position[spans[-1][-1]] + 1: index + 1])
        else:
            spans.append([order[index]])
    return spans
