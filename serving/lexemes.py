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
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

log = logging.getLogger(__name__)


def refresh_lexeme_df(conn: psycopg.Connection, sources: Sequence[str] | None = None) -> dict[str, Any]:
    """Rebuild lexeme_df and lexeme_df_totals (only the rows of `sources`, when given).
    Returns counts and timings."""
    started = time.perf_counter()
    if sources:
        with conn.transaction():
            lexemes = conn.execute("SELECT lexeme_df_rebuild(%s)", (list(sources),)).fetchone()[0]
        seconds = time.perf_counter() - started
        log.info("lexeme_df recounted for %s: %d lexemes in %.2fs", ", ".join(sources), lexemes, seconds)
        return {"lexemes": int(lexemes), "sources": list(sources), "seconds": round(seconds, 3)}
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


# A source's statistics are recounted once the passages written to it since its last count
# reach this share of what was counted (and at least RECOUNT_MIN): searches of that source
# then never weigh terms by figures more than a fifth out of date. Memories need it: the
# `lexeme_df` asset runs after ingests, and agents write between them. With LoCoMo's dev
# turns stored beside the example library, memory search weighed by the library's figures
# (memories never counted) found the evidence in its top 10 for 0.777 of the questions,
# against 0.8012 once the memories were counted; recounting 3,000 memories takes 50 ms.
RECOUNT_GROWTH = 0.2
RECOUNT_MIN = 10


class SourceRecount:
    """Keeps one source's rows of lexeme_df near its size, from the process that writes it.

    `written(n)` after each write of n passages; the recount itself runs on a thread of its
    own, on a connection of its own, so no write waits for it. Several processes writing
    the same source each count their own writes: at worst a recount too many."""

    def __init__(self, connect: Callable[[], psycopg.Connection], source: str) -> None:
        self._connect = connect
        self.source = source
        self._lock = threading.Lock()
        self._counted: int | None = None   # the source's passages at its last count (None: not read yet)
        self._written = 0                  # passages written since
        self._thread: threading.Thread | None = None
        self.recounts = 0

    def written(self, passages: int) -> None:
        with self._lock:
            self._written += passages
            due = self._counted is None or self._written >= max(RECOUNT_MIN, RECOUNT_GROWTH * self._counted)
            if not due or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._run, name=f"recount-{self.source}", daemon=True)
            self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        """Until a recount under way has finished (tests; a server shutting down)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            with self._connect() as conn:
                counted = self._counted
                if counted is None:
                    counted = _counted(conn, self.source)
                with self._lock:
                    self._counted, written = counted, self._written
                if written < max(RECOUNT_MIN, RECOUNT_GROWTH * counted):
                    return
                refresh_lexeme_df(conn, [self.source])
                counted = _counted(conn, self.source)
                with self._lock:
                    self._counted, self._written = counted, self._written - written
                    self.recounts += 1
        except Exception:  # a failed recount leaves the old figures; the next write tries again
            log.exception("recounting the statistics of %s failed", self.source)


def _counted(conn: psycopg.Connection, source: str) -> int:
    row = conn.execute("SELECT coalesce(sum(passages), 0) FROM lexeme_df_totals WHERE source = %s",
                       (source,)).fetchone()
    conn.commit()
    return int(row[0])
