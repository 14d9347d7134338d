"""Corpus document frequency per lexeme, per text-search configuration: the
table the keyword lane ranks on (AND the rarest terms, treat >10% as noise,
BM25 idf). The rebuild itself is the schema's `lexeme_df_rebuild()` (which
population, which length measure, why DELETE not TRUNCATE: see schema.sql), so
a schema migration that changes the tsvectors can refresh the statistics too.
The Dagster asset `lexeme_df` wraps this function and shows the returned dict
as metadata.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

log = logging.getLogger(__name__)


def refresh_lexeme_df(conn: psycopg.Connection) -> dict[str, Any]:
    """Rebuild lexeme_df and lexeme_df_totals. Returns counts and timings."""
    started = time.perf_counter()
    with conn.transaction():
        lexemes = conn.execute("SELECT lexeme_df_rebuild()").fetchone()[0]
        per_config = {
            name: {"passages": n, "avg_length": round(float(avg), 2), "lexemes": int(lx)}
            for name, n, avg, lx in conn.execute(
                "SELECT t.ts_config::text, t.passages, t.avg_length, "
                "(SELECT count(*) FROM lexeme_df d WHERE d.ts_config = t.ts_config) "
                "FROM lexeme_df_totals t ORDER BY 1")
        }
    seconds = time.perf_counter() - started
    result = {
        "lexemes": int(lexemes),
        "passages": sum(c["passages"] for c in per_config.values()),
        "configs": per_config,
        "seconds": round(seconds, 3),
    }
    log.info("lexeme_df refreshed: %d lexemes over %d passages in %.2fs (%s)", result["lexemes"],
             result["passages"], seconds, ", ".join(per_config))
    return result
