"""The chunk-size benchmark's metric (library_pipeline/testing/metrics.py) on
hand-worked cases. The chunking rules themselves are library_pipeline_tests/test_chunking.py:
they need the real MiniLM token counter, or PDF extraction, whose layout
analysis runs an ONNX model."""

from __future__ import annotations

import math

import pytest

from library_pipeline.testing.metrics import ndcg_at_k as ndcg


def test_ndcg_at_k() -> None:
    assert ndcg(["a", "b", "c"], {"a"}) == 1.0
    assert ndcg(["x", "a"], {"a"}) == pytest.approx(1 / math.log2(3))
    assert ndcg(["x", "y"], {"a"}) == 0.0
    assert ndcg(["a", "x", "b"], {"a", "b"}) == pytest.approx((1 + 0.5) / (1 + 1 / math.log2(3)))
    assert ndcg([f"x{i}" for i in range(10)] + ["a"], {"a"}, k=10) == 0.0  # rank 11 is outside the cut
    assert ndcg(["a"], set()) == 0.0
