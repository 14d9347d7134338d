"""Agent-memory curation (its logic: `library_pipeline.memory.curation`): near-duplicates,
decay, promotion, retention (daily), and the "0 exact duplicates in global" check. Merge with
`dg.Definitions.merge(..., memory.defs, ...)` in library_pipeline/definitions.py;
it needs the `library_db` resource from there and brings its own `memory_clock`."""

import dagster as dg

from library_pipeline.defs.memory.assets import (MEMORY_ASSETS, MemoryClock, memory_curation_job,
                                                 memory_daily_schedule, no_exact_duplicates_in_global)

defs = dg.Definitions(assets=MEMORY_ASSETS, asset_checks=[no_exact_duplicates_in_global],
                      jobs=[memory_curation_job], schedules=[memory_daily_schedule],
                      resources={"memory_clock": MemoryClock()})
