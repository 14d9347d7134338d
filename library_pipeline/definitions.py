"""The code location: every domain's definitions, with resources bound from
the environment (serving.settings.Settings)."""

from __future__ import annotations

import dagster as dg

from library_pipeline.defs import eval as eval_defs
from library_pipeline.defs import ingest, memory, ops
from library_pipeline.defs import vault
from library_pipeline.defs import enrich
from library_pipeline.resources import EmbedderResource, LibraryDatabase
from serving.settings import Settings


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    settings = settings or Settings.from_env()
    resources = {
        "library_db": LibraryDatabase.from_settings(settings),
        "embedder": EmbedderResource.from_settings(settings),
        "vault": vault.VaultResource.from_settings(settings),
    }
    return dg.Definitions.merge(ingest.defs, memory.defs, eval_defs.defs, ops.defs, vault.defs, enrich.defs,
                                 dg.Definitions(resources=resources))


defs = build_definitions()
