"""Obsidian vault sync on git push: the `vault` asset group."""

import dagster as dg

from library_pipeline.defs.vault.assets import (
    vault_freshness,
    vault_freshness_job,
    vault_freshness_schedule,
    vault_job,
    vault_note_sections,
)
from library_pipeline.defs.vault.partitions import vault_notes_partitions
from library_pipeline.defs.vault.resources import VaultResource
from library_pipeline.defs.vault.sensors import vault_push_sensor

defs = dg.Definitions(
    assets=[vault_note_sections],
    asset_checks=[vault_freshness],
    jobs=[vault_job, vault_freshness_job],
    schedules=[vault_freshness_schedule],
    sensors=[vault_push_sensor],
)

__all__ = ["defs", "VaultResource", "vault_note_sections", "vault_notes_partitions", "vault_freshness",
           "vault_push_sensor"]
