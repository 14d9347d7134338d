"""Cross-encoder reranking of the whole fused pool.

The whole pool, not a top-k slice: a candidate the first stage under-ranked
is precisely the case reranking exists to fix.

agent-library (github.com/CreateM1nd/agent-library) removed its reranker after an evaluation called it dead
weight, then found the real defect upstream: the keyword lane had been
returning nothing for most real queries, so the reranker was reordering a
starved pool. With the lane fixed, the same reranker went from worst to best
(P@5 54.3% -> 58.8%, nDCG@10 0.609 -> 0.713). So the stage stays, on by
default whenever a cross-encoder is available.

No cross-encoder can be had offline on a machine without hub access (none is packaged):
`LIBRARY_RERANKER` names a local directory or a hub model (agent-library
used cross-encoder/ms-marco-MiniLM-L-6-v2); unset, the stage reports itself
"skipped" in every response and logs that once per process.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol, runtime_checkable

from serving.settings import get_settings

log = logging.getLogger(__name__)

ENV = "LIBRARY_RERANKER"
SKIPPED = f"skipped: no cross-encoder configured (set {ENV} to a local model directory or hub name)"


@runtime_checkable
class Reranker(Protocol):
    name: str

    def score(self, query: str, texts: list[str]) -> list[float]: ...


class CrossEncoderReranker:
    """sentence_transformers.CrossEncoder over (query, passage) pairs; scores are the
    model's default activation (sigmoid for one-label models: 0..1, higher = more relevant)."""

    def __init__(self, model: str, *, max_length: int = 512, batch_size: int = 32) -> None:
        from sentence_transformers import CrossEncoder

        started = time.perf_counter()
        self.model = CrossEncoder(model, device="cpu", max_length=max_length)
        self.name = model
        self.batch_size = batch_size
        log.info("loaded cross-encoder %s in %.1fs", model, time.perf_counter() - started)

    def score(self, query: str, texts: list[str]) -> list[float]:
        if not texts:
            return []
        scores = self.model.predict([(query, t) for t in texts], batch_size=self.batch_size,
                                    show_progress_bar=False, convert_to_numpy=True)
        return [float(s) for s in scores]


_lock = threading.Lock()
_default: dict[str, Reranker | None] = {}
_announced: set[str] = set()


def default_reranker() -> Reranker | None:
    """The process-wide reranker from LIBRARY_RERANKER, loaded once; None when unset or
    when loading failed (the failure is logged once and reported by search as skipped)."""
    spec = get_settings().reranker
    with _lock:
        if spec in _default:
            return _default[spec]
        if not spec:
            if "" not in _announced:
                log.info("rerank stage %s", SKIPPED)
                _announced.add("")
            _default[spec] = None
            return None
        try:
            _default[spec] = CrossEncoderReranker(spec)
        except Exception as exc:  # a hub name offline, a broken directory: search must go on
            log.error("cannot load cross-encoder %r (%s: %s); rerank stage will be skipped",
                      spec, type(exc).__name__, exc)
            _default[spec] = None
        return _default[spec]


def load_error(spec: str | None = None) -> bool:
    """True when LIBRARY_RERANKER is set but could not be loaded."""
    spec = (spec if spec is not None else get_settings().reranker).strip()
    return bool(spec) and spec in _default and _default[spec] is None
