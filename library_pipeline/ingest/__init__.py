"""Ingest's domain logic, without Dagster: which files count (`files`), text out of
PDF / EPUB / plain text (`extract`), chunking (`chunking`), the per-file steps that
write them atomically (`store`) and embedding across files (`batching`). The assets,
sensors and partitions in `library_pipeline.defs.ingest` run these; the vault sync and
the evaluation loader use the same steps and text rules."""
