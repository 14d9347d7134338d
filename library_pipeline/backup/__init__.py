"""Backups of the library database: `library backup` / `library restore` and the nightly
asset's work (library_pipeline/defs/ops/backup.py), no Dagster here."""
