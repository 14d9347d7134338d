"""The cross-encoder stage, with a tiny randomly initialised BERT cross-encoder the
test builds and saves itself (no model can be downloaded here), and the
circuit breaker whose state lives in the database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from library_pipeline_tests.search_fixtures import conn, corpus, small_library  # noqa: F401  (fixtures)
from serving import rerank
from serving.embedding import embed_text_for_passage
from serving.rerank import CrossEncoderReranker, default_reranker
from serving.search import SearchConfig, health, search


def build_tiny_cross_encoder(path: Path, texts: list[str], *, constant: bool = False) -> Path:
    """A 2-layer, 32-wide BERT with one output (a CrossEncoder), WordPiece vocab from `texts`.
    `constant` zeroes the classifier: every pair then scores the same (a degenerate model)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    words = sorted({w for t in texts for w in re.findall(r"\w+", t.lower())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words[:3000]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512, num_labels=1)
    model = BertForSequenceClassification(config)
    if constant:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.fill_(0.25)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, corpus) -> Path:
    texts = [c.content for d in corpus.docs[:12] for c in d.chunks]
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce"), texts)


@pytest.fixture(scope="module")
def constant_model(tmp_path_factory, corpus) -> Path:
    texts = [c.content for d in corpus.docs[:3] for c in d.chunks]
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("const_ce"), texts, constant=True)


@pytest.fixture(autouse=True)
def _fresh_reranker_cache(monkeypatch):
    monkeypatch.setattr(rerank, "_default", {})
    monkeypatch.setattr(rerank, "_announced", set())


def test_rerank_scores_the_whole_fused_pool(conn, embedder, tiny_model):
    reranker = CrossEncoderReranker(str(tiny_model))
    query = "whale ship harpooneer"
    fused = search(conn, embedder, query, top_k=5, config=SearchConfig(rerank=False))
    response = search(conn, embedder, query, top_k=5, reranker=reranker)
    assert response.score_kind == "cross-encoder"
    assert response.stages["rerank"] == f"ok: {tiny_model} reranked the whole pool of {response.pool_size}"
    assert response.pool_size > 20 and "rerank" in response.timings
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True)
    # the scores are the cross-encoder's, on the same text the passage was embedded as
    direct = reranker.score(query, [embed_text_for_passage(r.title, r.heading, r.text) for r in response.results])
    assert scores == pytest.approx(direct, rel=1e-5)
    # whole pool, not a top-k slice: candidates fusion ranked below 5 can come up
    assert {r.passage_id for r in response.results} != {r.passage_id for r in fused.results}
    assert all(r.lanes for r in response.results)  # fusion's explanation is kept


def test_reranker_comes_from_the_environment(conn, embedder, tiny_model, monkeypatch):
    monkeypatch.setenv(rerank.ENV, str(tiny_model))
    loaded = default_reranker()
    assert isinstance(loaded, CrossEncoderReranker) and default_reranker() is loaded  # loaded once
    response = search(conn, embedder, "Sherlock Holmes", top_k=3)
    assert response.score_kind == "cross-encoder"
    off = search(conn, embedder, "Sherlock Holmes", top_k=3, config=SearchConfig(rerank=False))
    assert off.stages["rerank"] == "off" and off.score_kind == "calibrated"


def test_unloadable_reranker_is_reported_not_fatal(conn, embedder, tmp_path, monkeypatch):
    monkeypatch.setenv(rerank.ENV, str(tmp_path / "no-such-model"))
    response = search(conn, embedder, "Sherlock Holmes", top_k=3)
    assert response.results and response.score_kind == "calibrated"
    assert response.stages["rerank"].startswith("skipped: LIBRARY_RERANKER is set but the model failed to load")


def test_no_reranker_configured_is_reported(conn, embedder, monkeypatch):
    monkeypatch.delenv(rerank.ENV, raising=False)
    response = search(conn, embedder, "Sherlock Holmes", top_k=3)
    assert response.stages["rerank"] == rerank.SKIPPED


# -- circuit breaker: state in the database, counted across calls ---------------------
def test_uniform_cross_encoder_scores_open_the_breaker(db, embedder, test_data, corpus, constant_model,
                                                      tiny_model, monkeypatch):
    small_library(db, embedder, test_data, books=3)
    degenerate = CrossEncoderReranker(str(constant_model))
    with db.connect() as conn:
        for i in range(health.THRESHOLD):
            response = search(conn, embedder, "whale ship", top_k=5, reranker=degenerate)
            assert response.score_kind == "cross-encoder"
            assert response.health["rerank"]["consecutive"] == i + 1
        assert response.health["rerank"]["state"] == "open"
        assert any("circuit breaker 'rerank' is open" in w for w in response.warnings)
    with db.connect() as other:  # another connection (process) sees the same state
        bypassed = search(other, embedder, "whale ship", top_k=5, reranker=degenerate)
        assert bypassed.stages["rerank"].startswith("skipped: circuit open after 3 degenerate results")
        assert bypassed.score_kind == "calibrated" and bypassed.results
        row = other.execute("SELECT consecutive, degenerate_total, last_reason FROM search_breaker "
                            "WHERE component = 'rerank'").fetchone()
        assert row[0] == 3 and row[1] == 3 and "uniform cross-encoder scores" in row[2]
        # after the cool-down one search tries again (half-open); a healthy model closes it
        monkeypatch.setattr(health, "COOLDOWN_S", 0.0)
        healed = search(other, embedder, "whale ship", top_k=5, reranker=CrossEncoderReranker(str(tiny_model)))
        assert healed.score_kind == "cross-encoder" and healed.health == {}
        assert other.execute("SELECT consecutive, opened_at FROM search_breaker WHERE component = 'rerank'"
                             ).fetchone() == (0, None)


def test_constant_vectors_open_the_vector_breaker(db, embedder, test_data, corpus):
    small_library(db, embedder, test_data, books=3)
    with db.connect() as conn:
        # every passage got the same vector: a broken embedder's signature
        conn.execute("UPDATE passages SET embedding = (SELECT embedding FROM passages ORDER BY id LIMIT 1)")
        conn.commit()
        for _ in range(health.THRESHOLD):
            response = search(conn, embedder, "Sherlock Holmes and the red-headed league", top_k=5)
        assert response.health["vector"]["state"] == "open"
        after = search(conn, embedder, "Sherlock Holmes and the red-headed league", top_k=5)
        assert after.stages["vector"].startswith("skipped: circuit open")
        assert after.results and all("vector" not in r.lanes for r in after.results)  # keyword + title carry it
        assert health.breaker_status(conn)["vector"]["consecutive"] == health.THRESHOLD


def test_empty_pool_is_counted_with_its_reason(db, embedder, test_data, corpus):
    small_library(db, embedder, test_data, books=1)
    with db.connect() as conn:
        conn.execute("UPDATE passages SET embed_model = 'some-other-model'")
        conn.commit()
        response = search(conn, embedder, "qqqq zzzz", top_k=5)
        assert response.results == []
        assert response.health["pool"]["consecutive"] == 1
        assert "no passage is embedded with the query model" in response.health["pool"]["last_reason"]
        # a filtered empty result is an answer, not a malfunction: not counted
        filtered = search(conn, embedder, "qqqq zzzz", top_k=5, filters={"source": "vault"})
        assert filtered.results == [] and filtered.health["pool"]["consecutive"] == 1


def test_empty_library_is_a_warning_not_a_fault(db, embedder):
    with db.connect() as conn:
        response = search(conn, embedder, "anything at all", top_k=5)
        assert response.results == [] and response.health == {}
        assert "the library has no passages yet" in response.warnings
