"""The serving process's resources, built from Settings: database (connection
pool), embedder and reranker, each loaded once. The MCP server and the CLI
both go through `Library`, so they cannot disagree about configuration."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from pgvector.psycopg import register_vector

from serving.db import Database
from serving.embedding import Embedder, load_embedder, multilingual_embedder
from serving.lexemes import SourceRecount
from serving.migration import load_active_embedder
from serving.settings import Settings, get_settings
from serving.threads import limit_torch_threads

log = logging.getLogger(__name__)

# How long a call waits for a pooled connection before it fails with a clear
# error (psycopg_pool's default is 30 s, which an agent sees as a hang).
POOL_TIMEOUT_S = 5.0
# psycopg_pool retries a lost connection with exponential backoff (1, 2, 4, 8 s...)
# for up to 5 minutes: after a 7 s Postgres restart the first search was served
# 5.7 s after the server was back. Giving a retry series up after 2 s makes the
# next call start a fresh one at once; measured recovery then ~1 s (test_crash.py).
RECONNECT_TIMEOUT_S = 2.0
# A search borrows spare connections for its vector lanes only if they are free within
# this long (serving.search.engine's `side`); a busy pool costs it the overlap, not a wait.
SPARE_WAIT_S = 0.002
# A search's spare connections: the vector stage beside the keyword lane, and the primary
# vector lane beside the multilingual one (serving.search.engine).
SEARCH_SPARES = 2


class Library:
    def __init__(self, settings: Settings | None = None, *, embedder: Embedder | None = None,
                 pool_size: int = 4) -> None:
        self.settings = settings or get_settings()
        self.db = Database(self.settings)
        self._embedder = embedder
        self._pool = None
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._multilingual_ready = False
        # memories are written here, between the ingests after which lexeme_df is refreshed
        self.memory_statistics = SourceRecount(self.db.connect, "memory")

    # -- resources ----------------------------------------------------------
    def embedder(self) -> Embedder:
        if self._embedder is None:
            with self._lock:
                if self._embedder is None:
                    s = self.settings

                    def configured() -> Embedder:
                        return load_embedder(s.embed_backend, s.embed_model, dims=s.embed_dims,
                                             ollama_url=s.ollama_url)

                    # the model a re-embed migration switched this library to, if any
                    # (serving.migration); LIBRARY_EMBED_* otherwise
                    with self.db.connect() as conn:
                        self._embedder = load_active_embedder(conn, configured)
                    limit_torch_threads()
        if not self._multilingual_ready:
            # the second lane's model with the first, so the first search does not pay for it
            multilingual_embedder()
            self._multilingual_ready = True
        return self._embedder

    def _get_pool(self):
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    from psycopg_pool import ConnectionPool

                    self.db.ensure_schema()
                    pool = ConnectionPool(self.db.dsn, min_size=min(1 + SEARCH_SPARES, self._pool_size),
                                          max_size=self._pool_size,
                                          configure=register_vector, check=ConnectionPool.check_connection,
                                          open=True, name="library-serving", timeout=POOL_TIMEOUT_S,
                                          reconnect_timeout=RECONNECT_TIMEOUT_S)
                    # The pool opens its connections in background threads: without the
                    # wait, the first searches after a start found no spare connection
                    # (seen on a slow CI box) and ran their lanes in turn. On a timeout
                    # the pool closes itself and PoolTimeout, an OperationalError, reaches
                    # the caller as an unreachable database.
                    pool.wait(timeout=POOL_TIMEOUT_S)
                    self._pool = pool
        return self._pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        try:
            pool = self._get_pool()
        except psycopg.OperationalError as exc:
            raise ConnectionError(f"cannot reach the library database: {str(exc).splitlines()[0]}") from None
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            # Postgres restarting under load (test_crash.py): in-flight queries died
            # with AdminShutdown and reached agents as "internal error", the rest
            # waited 30 s on the pool. Now both are one clear, retryable line.
            # Only connection failures: a deadlock or a cancelled query is also an
            # OperationalError and must keep its own meaning.
            from psycopg_pool import PoolTimeout

            if not (isinstance(exc, PoolTimeout) or exc.sqlstate is None or exc.sqlstate.startswith("08")
                    or exc.sqlstate in ("57P01", "57P02", "57P03")):
                raise
            what = (f"no connection within {POOL_TIMEOUT_S:g} s" if isinstance(exc, PoolTimeout)
                    else (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200])
            raise ConnectionError(f"the library database is unreachable ({what}); it may be restarting - "
                                  f"retry in a few seconds") from None

    @contextmanager
    def spare_connections(self, n: int) -> Iterator[tuple[psycopg.Connection, ...]]:
        """Up to `n` more pooled connections, those free at once (none when the pool is busy)."""
        from psycopg_pool import PoolTimeout

        pool = self._get_pool()
        taken: list[psycopg.Connection] = []
        try:
            for _ in range(n):
                try:
                    taken.append(pool.getconn(timeout=SPARE_WAIT_S))
                except (PoolTimeout, psycopg.OperationalError):
                    break
            yield tuple(taken)
        finally:
            for conn in taken:
                pool.putconn(conn)

    def warm_up(self) -> None:
        """Load the embedder (and trace its one-query encoder) and open the pool now rather
        than on the first call."""
        embedder = self.embedder()
        graph = getattr(embedder, "query_graph", None)
        if graph is not None:
            graph()
        with self.connection() as conn:
            conn.execute("SELECT 1")

    def close(self) -> None:
        self.memory_statistics.wait(timeout=30.0)   # a recount under way commits before the server stops
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self.db.stop()

    # -- operations -----------------------------------------------------------
    def search(self, query: str, *, top_k: int = 10, filters: Any = None, config: Any = None):
        from serving.search import search

        embedder = self.embedder()
        with self.connection() as conn, self.spare_connections(SEARCH_SPARES) as side:
            return search(conn, embedder, query, top_k=top_k, filters=filters, config=config, side=side)

    def files(self, pattern: str, limit: int = 50) -> dict[str, Any]:
        from serving.inventory import library_files

        with self.connection() as conn:
            return library_files(conn, pattern, limit)
