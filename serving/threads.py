"""How many intra-op threads torch may use in a serving process.

Two measurements on the 2-core box pull in opposite directions:

- a short query with the cores busy (an ingest beside the server): one MiniLM query
  took 726 ms p50 with 2 threads, 17.6 ms with 1. So a serving process runs torch on
  one thread (`limit_torch_threads`, LIBRARY_TORCH_THREADS overrides).
- a long memory artifact on an otherwise idle box (benchmarks/memory.py, 2,000 tokens =
  9 windows, 100k memories stored, 40 runs): index p50 / p95 259 / 275 ms with 1 thread,
  165 / 188 ms with 2 (embedding 235 -> 142 ms p50).

So one thread by default, and all cores for a batch of several windows while the
1-minute load average says the cores are free (`wide_threads`). Load average lags a
busy spell by up to a minute; a wide batch that starts just as an ingest does costs
that batch some time, never correctness.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from serving.settings import get_settings

log = logging.getLogger(__name__)

WIDE_MIN_TEXTS = 3     # a single query or a short memory stays on one thread
# torch's thread count is process-wide: one caller changes it at a time. Re-entrant,
# because a wide memory batch embeds its windows side by side, which narrows torch again.
_wide_lock = threading.RLock()


def _configured() -> int:
    return get_settings().torch_threads


def limit_torch_threads() -> None:
    """One intra-op thread for this process (see the module docstring);
    LIBRARY_TORCH_THREADS overrides (0 = leave torch's default)."""
    threads = _configured()
    if threads <= 0 or "torch" not in sys.modules:
        return
    import torch

    torch.set_num_threads(threads)


def _cores_free(cores: int) -> bool:
    try:
        return os.getloadavg()[0] < cores - 0.5
    except OSError:  # no load average on this platform
        return False


@contextmanager
def wide_threads(n_texts: int) -> Iterator[None]:
    """All cores for the duration of one multi-window embedding batch, when the
    process was limited to one thread and the cores are free; otherwise nothing.
    Wide batches run one at a time (they would only compete for the same cores)."""
    cores = os.cpu_count() or 1
    if n_texts < WIDE_MIN_TEXTS or cores < 2 or _configured() != 1 or "torch" not in sys.modules:
        yield
        return
    import torch

    with _wide_lock:
        if torch.get_num_threads() != 1 or not _cores_free(cores):
            yield
            return
        torch.set_num_threads(cores)
        try:
            yield
        finally:
            torch.set_num_threads(1)


def torch_threads() -> int | None:
    """The calling thread's torch intra-op thread count; None while torch is not loaded."""
    if "torch" not in sys.modules:
        return None
    import torch

    return torch.get_num_threads()


def adopt_torch_threads(n: int | None) -> None:
    """Give the calling thread the intra-op thread count `n` read in another thread.

    OpenMP keeps that count per OS thread: a pool thread started while the process used 2
    threads went on encoding with 2 after the process was limited to 1. Its query vectors
    then differed from the caller's in their last bits (scores off by ~1e-6), and under
    load a query on 2 threads costs 726 ms against 17.6 on 1 (measured above)."""
    if n is None or "torch" not in sys.modules:
        return
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


@contextmanager
def torch_threads_at_most(n: int) -> Iterator[None]:
    """At most `n` intra-op threads for the duration, then the count before."""
    if "torch" not in sys.modules:
        yield
        return
    import torch

    if torch.get_num_threads() <= n:   # no lock: the workers of a side-by-side encode land here
        yield
        return
    with _wide_lock:
        before = torch.get_num_threads()
        if before <= n:
            yield
            return
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)
