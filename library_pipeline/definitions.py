"""The code location: every domain's definitions, with resources bound from
the process's settings (serving.settings).

`defs` is built on first access (PEP 562 module `__getattr__`), not at import: Dagster's
loader and the tests read `library_pipeline.definitions.defs` as before, and importing
this module reads no environment.
"""

from __future__ import annotations

import threading

import dagster as dg

from library_pipeline.resources import EmbedderResource, LibraryDatabase
from serving.settings import Settings, get_settings

_built: dict[str, dg.Definitions] = {}
_lock = threading.Lock()


def build_definitions(settings: Settings | None = None) -> dg.Definitions:
    # the domain packages are imported here, so importing this module stays cheap
    from library_pipeline.defs import enrich, ingest, memory, ops, vault
    from library_pipeline.defs import eval as eval_defs
    from library_pipeline.defs.enrich.resources import GeneratorResource

    # an external DSN goes to Dagster as an EnvVar only when the settings are this
    # process's own (the variable then holds the same DSN); given settings bind values
    from_environment = settings is None
    settings = settings or get_settings()
    resources = {
        "library_db": (LibraryDatabase.for_definitions(settings) if from_environment
                       else LibraryDatabase.from_settings(settings)),
        "embedder": EmbedderResource.from_settings(settings),
        "vault": vault.VaultResource.from_settings(settings),
        "llm": GeneratorResource.from_settings(settings),
    }
    return dg.Definitions.merge(ingest.defs, memory.defs, eval_defs.defs, ops.defs, vault.defs, enrich.defs,
                                 dg.Definitions(resources=resources))


def __getattr__(name: str) -> dg.Definitions:
    if name != "defs":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _lock:
        if "defs" not in _built:
            _built["defs"] = build_definitions()
        return _built["defs"]
