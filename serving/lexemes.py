"""Corpus document frequency per lexeme, per text-search configuration and source: the
statistics the keyword lane's BM25 takes its IDF, N and average length from
(serving/search/keyword.py). The rebuild itself is the schema's `lexeme_df_rebuild()` (which
population, which length measure, why DELETE not TRUNCATE: see schema.sql), so
a schema migration that changes the tsvectors can refresh the statistics too.
The Dagster asset `lexeme_df` wraps this function and shows the returned dict
as metadata.

The same refresh checks the `postings` inverted index against the tsvectors it
mirrors (row count = total distinct lexemes of verbatim passages) and rebuilds
it when they differ - the triggers keep it in step, so a difference means
something wrote tsvectors without firing them (ALTER COLUMN ... SET EXPRESSION,
a restore with triggers disabled).
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
            name: {"passages": int(n), "avg_length": round(float(avg), 2), "lexemes": int(lx), "sources": by_source}
            for name, n, avg, lx, by_source in conn.execute(
                "SELECT t.ts_config::text, sum(t.passages), sum(t.passages * t.avg_length) / sum(t.passages), "
                "(SELECT count(DISTINCT d.lexeme) FROM lexeme_df d WHERE d.ts_config = t.ts_config), "
                "jsonb_object_agg(t.source, t.passages) "
                "FROM lexeme_df_totals t GROUP BY t.ts_config ORDER BY 1")
        }
        expected, have = conn.execute(
            "SELECT (SELECT coalesce(sum(length(tsv)), 0) FROM passages WHERE summary_level = 0), "
            "(SELECT count(*) FROM postings)").fetchone()
        rebuilt = None
        if int(expected) != int(have):
            log.warning("postings out of step with the tsvectors (%d rows, expected %d): rebuilding",
                        have, expected)
            rebuilt = int(conn.execute("SELECT postings_rebuild()").fetchone()[0])
    seconds = time.perf_counter() - started
    result = {
        "lexemes": int(lexemes),
        "passages": sum(c["passages"] for c in per_config.values()),
        "configs": per_config,
        "postings": int(rebuilt if rebuilt is not None else have),
        "postings_rebuilt": rebuilt is not None,
        "seconds": round(seconds, 3),
    }
    log.info("lexeme_df refreshed: %d lexemes over %d passages in %.2fs (%s)", result["lexemes"],
             result["passages"], seconds, ", ".join(per_config))
    return result
