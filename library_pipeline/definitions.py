"""The code location: every domain's definitions, with resources bound from
the process's settings (serving.settings). The one place resources are built
from `Settings`: the celery location (library_pipeline.launch.celery_ingest) and the
in-process launches (library_pipeline.launch.plans) take theirs from here.

`defs` is built on first access (PEP 562 module `__getattr__`), not at import: Dagster's
loader and the tests read `library_pipeline.definitions.defs` as before, and importing
this module reads no environment.
"""

from __future__ import annotations

import threading

import dagster as dg

from library_pipeline.resources import EmbedderResource, LibraryDatabase, LibrarySettings
from serving.settings import Settings, get_settings

_built: dict[Settings, dg.Definitions] = {}
_lock = threading.Lock()


def build_resources(settings: Settings | None = None) -> dict[str, dg.ConfigurableResource]:
    """Every resource of the location, from `settings` (default: this process's own): the
    one settings resource, and the resources that turn it into a database, an embedder,
    a vault and a text generator, all holding that same instance."""
    from library_pipeline.defs.enrich.resources import GeneratorResource
    from library_pipeline.defs.vault.resources import VaultResource

    # secrets go to Dagster as EnvVars only when the settings are this process's own
    # (the variables then hold the same values); given settings bind values
    config = (LibrarySettings.for_definitions(get_settings()) if settings is None
              else LibrarySettings.from_settings(settings))
    return {
        "settings": config,
        "library_db": LibraryDatabase(config=config),
        "embedder": EmbedderResource(config=config),
        "vault": VaultResource(config=config),
        "llm": GeneratorResource(config=config),
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
