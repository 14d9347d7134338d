"""Corpus document frequency per lexeme, per text-search configuration: the
table the keyword lane ranks on (AND the rarest terms, treat >10% as noise,
BM25 idf). Recomputed wholesale from the passages' stored tsvectors.

The population is what the keyword lane searches: verbatim passages
(summary_level = 0) that are not removed, superseded or archived. Lengths
are `length(tsv)` (distinct lexemes), the measure the lane's BM25 uses.

One transaction: DELETE + INSERT ... SELECT, so readers keep seeing the old
statistics until the new ones commit (TRUNCATE would lock them out). The
lead's Dagster asset wraps this function and shows the returned dict as
metadata.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

log = logging.getLogger(__name__)

_SEARCHABLE = "summary_level = 0 AND NOT removed AND NOT superseded AND NOT archived"


def refresh_lexeme_df(conn: psycopg.Connection) -> dict[str, Any]:
    """Rebuild lexeme_df and lexeme_df_totals. Returns counts and timings."""
    started = time.perf_counter()
    with conn.transaction():
        # one refresh at a time; readers are not blocked
        conn.execute("SELECT pg_advisory_xact_lock(7301116)")
        conn.execute("DELETE FROM lexeme_df")
        conn.execute("DELETE FROM lexeme_df_totals")
        t = time.perf_counter()
        # tsvector_to_array yields each lexeme once per passage, so count(*) is the df
        lexemes = conn.execute(
            "INSERT INTO lexeme_df (ts_config, lexeme, df) "
            f"SELECT p.ts_config, u.lexeme, count(*) FROM passages p, unnest(tsvector_to_array(p.tsv)) AS u(lexeme) "
            f"WHERE {_SEARCHABLE} GROUP BY 1, 2").rowcount
        df_seconds = time.perf_counter() - t
        conn.execute(
            "INSERT INTO lexeme_df_totals (ts_config, passages, avg_length, refreshed_at) "
            f"SELECT ts_config, count(*), coalesce(avg(length(tsv)), 0), now() FROM passages WHERE {_SEARCHABLE} "
            "GROUP BY 1")
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
        "df_seconds": round(df_seconds, 3),
        "seconds": round(seconds, 3),
    }
    log.info("lexeme_df refreshed: %d lexemes over %d passages in %.2fs (%s)", result["lexemes"],
             result["passages"], seconds, ", ".join(per_config))
    return result
