"""Agent-memory curation's domain logic, without Dagster (`curation`: near-duplicates,
decay, promotion, retention, the exact-duplicates invariant). The assets, check and
daily schedule in `library_pipeline.defs.memory` run it; the memories themselves are
written and read by `serving.memory`."""
