"""One dynamic partition per note file. Keys come from the ingest stage's
`partition_key_for(path)` (Dagster-safe slug + hash of the exact path); the
real path is in `documents.path`."""

import dagster as dg

from library_pipeline.launch import plans as launch

vault_notes_partitions = dg.DynamicPartitionsDefinition(name=launch.VAULT_NOTES)
