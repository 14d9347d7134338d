"""Ingest's domain logic, without Dagster: which files count (`files`), text out of
PDF / EPUB / plain text (`extract`), chunking (`chunking`), a passage's heading and
token budget (`passage_text`), the per-file steps that write them atomically (`store`;
the `documents` row itself through `library_pipeline.documents`) and embedding across
files (`batching`). The assets, sensors and partitions in `library_pipeline.defs.ingest`
run these; the vault sync, the evaluation loader and the summary trees use the same
steps and text rules."""
