"""One query is encoded by a traced graph of the transformer (serving.embedding._QueryGraph):
its vectors must be the batch path's bit for bit, or the search would rank differently from
the evaluation and from the passages' own encoding."""

from __future__ import annotations

import numpy as np

from serving import embedding

TEXTS = ["", " ", "a", "CRISPR", "Does a deficiency of folate increase blood levels of homocysteine?",
         "Как звали капитана «Святой Марии»?", "Ёлки-палки, что это такое", "日本語のテキスト",
         "0-dimensional biomaterials show inductive properties. " * 3,
         "word " * 600]   # past the model's 256 tokens: truncated the same way


def test_one_query_takes_the_traced_graph_with_the_batch_paths_vectors(embedder, monkeypatch):
    assert embedder.query_graph() is not None
    expected = [embedder._encode([text]) for text in TEXTS]

    def no_eager(texts):
        raise AssertionError("a single query went through the eager encoder")

    monkeypatch.setattr(embedder, "_encode", no_eager)
    for text, want in zip(TEXTS, expected):
        got = embedder.encode_queries([text])
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.array_equal(got, want), text
    monkeypatch.undo()
    # several queries at once pad to one length: the batch path, row for row
    batch = embedder.encode_queries(TEXTS[3:6])
    assert np.array_equal(batch, embedder._encode(TEXTS[3:6]))


def test_a_graph_that_disagrees_is_not_used(embedder, monkeypatch):
    traced_encode = embedding._QueryGraph.encode

    def off_by_a_bit(self, texts):
        return traced_encode(self, texts) * np.float32(1.0001)

    monkeypatch.setattr(embedder, "_graph", None)   # trace again, under the patch
    monkeypatch.setattr(embedding._QueryGraph, "encode", off_by_a_bit)
    assert embedder.query_graph() is None
    text = TEXTS[4]
    assert np.array_equal(embedder.encode_queries([text]), embedder._encode([text]))
