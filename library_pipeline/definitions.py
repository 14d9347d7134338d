"""The code location: every domain's definitions, with resources bound from
the process's settings (serving.settings). The one place resources are built
from `Settings`: the celery location (library_pipeline.celery_ingest) and the
in-process launches (library_pipeline.launch) take theirs from here.

`defs` is built on first access (PEP 562 module `__getattr__`), not at import: Dagster's
loader and the tests read `library_pipeline.definitions.defs` as before, and importing
this module reads no environment.
"""

from __future__ import annotations

import threading

import dagster as dg

from library_pipeline.resources import EmbedderResource, LibraryDatabase
from serving.settings import Settings, get_settings

_built: dict[Settings, dg.Definitions] = {}
_lock = threading.Lock()


def build_resources(settings: Settings | None = None) -> dict[str, dg.ConfigurableResource]:
    """Every resource of the location, from `settings` (default: this process's own)."""
    from library_pipeline.defs.enrich.resources import GeneratorResource
    from library_pipeline.defs.vault.resources import VaultResource

    # an external DSN goes to Dagster as an EnvVar only when the settings are this
    # process's own (the variable then holds the same DSN); given settings bind values
    from_environment = settings is None
    settings = settings or get_settings()
    return {
        "library_db": (LibraryDatabase.for_definitions(settings) if from_environment
                       else LibraryDatabase.from_settings(settings)),
        "embedder": EmbedderResource.from_settings(settings),
        "vault": VaultResource.from_settings(settings),
        "llm": GeneratorResource.from_settings(settings),
    }


def build_definitions(settings: Settings | None = None, executor: dg.ExecutorDefinition | None = None
                      ) -> dg.Definitions:
    # the domain packages are imported here, so importing this module stays cheap
    from library_pipeline.defs import enrich, ingest, memory, ops, vault
    from library_pipeline.defs import eval as eval_defs

    # Measured (benchmarks/scale.py, 4 files, 2 cores): one range run of the ingest
    # chain took 16.2 s in-process and 63.7 s with the default multiprocess executor
    # (each step re-imports Dagster, torch and the model; the chain has nothing to run
    # in parallel). So the location's default executor, which UI backfills and
    # sensor runs use, is in-process; parallelism comes from concurrent runs.
    return dg.Definitions.merge(ingest.defs, memory.defs, eval_defs.defs, ops.defs, vault.defs, enrich.defs,
                                dg.Definitions(resources=build_resources(settings),
                                               executor=executor or dg.in_process_executor))


def definitions_for(settings: Settings | None = None) -> dg.Definitions:
    """The location's definitions for `settings` (default: this process's own), built once
    per distinct settings (a test's database, a benchmark's library). Keyed by the settings'
    values, never by "this process's": the settings a process reads can change (the test
    suite points one process at many databases), and definitions built for earlier ones
    ran a CLI ingest against another database than the one its files were registered in."""
    current = get_settings()
    key = settings or current
    with _lock:
        if key not in _built:
            # this process's own: the external DSN bound as an EnvVar (build_resources)
            _built[key] = build_definitions(None if key == current else key)
        return _built[key]


def __getattr__(name: str) -> dg.Definitions:
    if name != "defs":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return definitions_for()
