"""Evaluation definitions: the retrieval regression check and data invariants.
Merge with `dg.Definitions.merge(..., eval.defs, ...)` in library_pipeline/definitions.py."""

import dagster as dg

from library_pipeline.defs.eval.checks import (library_questions, memory_locomo_recall, memory_search_precision,
                                               no_orphan_passages, retrieval_quality)

defs = dg.Definitions(asset_checks=[retrieval_quality, library_questions, no_orphan_passages, memory_search_precision,
                                     memory_locomo_recall])
