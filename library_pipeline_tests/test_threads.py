"""serving.threads: one torch thread for queries, all cores for a long artifact's
windows while the cores are free, and always back to one thread afterwards."""

from __future__ import annotations

import os

import pytest
import torch

from serving import threads


@pytest.fixture
def one_thread(monkeypatch):
    monkeypatch.delenv("LIBRARY_TORCH_THREADS", raising=False)
    before = torch.get_num_threads()
    threads.limit_torch_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_wide_batch_uses_all_cores_only_when_free(one_thread, monkeypatch, embedder):
    texts = ["Call me Ishmael. Some years ago, never mind how long precisely."] * 9
    seen: list[int] = []
    original = embedder.encode_passages

    def watching(batch):
        seen.append(torch.get_num_threads())
        return original(batch)

    monkeypatch.setattr(embedder, "encode_passages", watching)
    monkeypatch.setattr(threads, "_cores_free", lambda cores: True)   # the load-average probe only
    with threads.wide_threads(len(texts)):
        embedder.encode_passages(texts)
    with threads.wide_threads(1):      # a query: never widened
        embedder.encode_passages(texts[:1])
    monkeypatch.setattr(threads, "_cores_free", lambda cores: False)  # cores busy: stay narrow
    with threads.wide_threads(len(texts)):
        embedder.encode_passages(texts)
    assert seen == [os.cpu_count(), 1, 1]
    assert torch.get_num_threads() == 1


def test_override_disables_widening(one_thread, monkeypatch):
    monkeypatch.setenv("LIBRARY_TORCH_THREADS", "0")
    monkeypatch.setattr(threads, "_cores_free", lambda cores: True)
    before = torch.get_num_threads()
    with threads.wide_threads(9):
        assert torch.get_num_threads() == before
