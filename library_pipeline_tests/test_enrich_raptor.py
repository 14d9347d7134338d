"""RAPTOR summary trees on a real book: built per file, atomic, found by the
summary lane of the one search path; the LLM path against a fake Ollama server."""

from __future__ import annotations

import re

import pytest

from library_pipeline.defs.enrich.assets import raptor_tree
from library_pipeline.enrich.raptor import MAX_CHARS, split_sentences
from library_pipeline_tests.conftest import new_database
from library_pipeline_tests.enrich_fixtures import (FakeOllama, first_sentences, instance, llm_resource,  # noqa: F401 (fixture)
                                                    partition_keys, run_assets, sherlock_excerpt)
from library_pipeline_tests.ingest_helpers import ingest, latest_metadata, write
from serving.search.engine import search
from serving.search.types import SearchConfig

BOOK = "sherlock/adventures-excerpt.txt"


@pytest.fixture(scope="module")
def library(server_db, test_data, tmp_path_factory, instance):
    root = tmp_path_factory.mktemp("raptor") / "library"
    sherlock_excerpt(test_data, root / BOOK)
    write(root / "short/note.txt", "A short note. It has two sentences only.")
    db = new_database(server_db, root)
    summary = ingest(db, instance)
    assert summary["failed"] == 0
    result = run_assets(db, instance, [raptor_tree], partition_keys(db, [BOOK, "short/note.txt"]))
    assert result.success
    return db


def _tree(db, path=BOOK):
    with db.connect() as conn:
        return conn.execute(
            "SELECT p.id, p.summary_level, p.summarises, p.content, p.kind, p.embedding IS NOT NULL "
            "FROM passages p JOIN documents d ON d.id = p.document_id WHERE d.path = %s AND p.summary_level > 0 "
            "ORDER BY p.summary_level, p.ordinal", (path,)).fetchall()


def _leaves(db, path=BOOK):
    with db.connect() as conn:
        return conn.execute("SELECT p.id, p.content FROM passages p JOIN documents d ON d.id = p.document_id "
                            "WHERE d.path = %s AND p.summary_level = 0 ORDER BY p.ordinal", (path,)).fetchall()


def test_tree_levels_cover_every_passage_once(library):
    tree, leaves = _tree(library), _leaves(library)
    assert len(leaves) > 100, "the excerpt is a long text"
    levels = sorted({r[1] for r in tree})
    assert levels[0] == 1 and 2 <= levels[-1] <= 3
    assert all(r[4] == "summary" and r[5] for r in tree)
    by_level = {lv: [r for r in tree if r[1] == lv] for lv in levels}
    # ~16 passages per cluster, and every passage summarised exactly once at level 1
    covered = [pid for r in by_level[1] for pid in r[2]]
    assert sorted(covered) == sorted(p[0] for p in leaves)
    assert abs(len(by_level[1]) - len(leaves) / 16) <= 1
    # each higher level summarises exactly the level below; the top has <= 3 nodes
    for lv in levels[1:]:
        assert sorted(i for r in by_level[lv] for i in r[2]) == sorted(r[0] for r in by_level[lv - 1])
    assert len(by_level[levels[-1]]) <= 3 or levels[-1] == 3


def test_extractive_summaries_are_real_sentences_of_the_book(library):
    text = " ".join(re.sub(r"\s+", " ", p[1]) for p in _leaves(library))
    for row in _tree(library):
        assert len(row[3]) <= MAX_CHARS + 10
        sentences = split_sentences(row[3])
        assert 1 <= len(sentences) <= 3
        for sentence in sentences:
            assert sentence.rstrip("…") in text, sentence
        assert len(set(sentences)) == len(sentences), "duplicates were removed"


def test_short_file_gets_no_tree(library):
    assert _tree(library, "short/note.txt") == []


def test_summary_lane_returns_summaries_of_the_book(library, embedder):
    with library.connect() as conn:
        resp = search(conn, embedder, "Irene Adler and the photograph the King of Bohemia wants back",
                      top_k=5, config=SearchConfig(rerank=False, log_queries=False))
    assert resp.summaries, resp.stages
    assert all(s.summary_level >= 1 and s.path == BOOK for s in resp.summaries)
    assert resp.stages["summaries"].startswith("ok")
    # verbatim passages stay in their own list
    assert all(r.summary_level == 0 for r in resp.results)


def test_rebuild_skips_when_current_and_replaces_atomically_when_forced(library, instance):
    before = _tree(library)
    key = partition_keys(library, [BOOK])
    assert run_assets(library, instance, [raptor_tree], key).success
    assert latest_metadata(instance, "raptor_tree")["skipped"] == 1
    assert [r[0] for r in _tree(library)] == [r[0] for r in before]
    assert run_assets(library, instance, [raptor_tree], key,
                      run_config={"ops": {"raptor_tree": {"config": {"force": True}}}}).success
    after = _tree(library)
    assert [(r[1], r[3]) for r in after] == [(r[1], r[3]) for r in before], "deterministic rebuild"
    assert not {r[0] for r in after} & {r[0] for r in before}, "old tree replaced, not appended to"


def test_abstractive_path_through_an_ollama_backend(library, instance):
    fake = FakeOllama(answer=first_sentences).start()
    try:
        llm = llm_resource(library, "ollama", "fake-chat", fake.url, retries=1)
        key = partition_keys(library, [BOOK])
        assert run_assets(library, instance, [raptor_tree], key, llm=llm).success
    finally:
        fake.stop()
    tree = _tree(library)
    assert tree and all(r[3].startswith("SUMMARY: ") for r in tree)
    assert len(fake.requests) == len(tree)
    first = fake.requests[0]["body"]
    assert first["options"]["temperature"] == 0 and "Summarise" in first["messages"][0]["content"]
    assert latest_metadata(instance, "raptor_tree")["summariser"] == "ollama:fake-chat"


def test_backend_down_fails_the_file_and_keeps_the_old_tree(library, instance):
    before = _tree(library)
    llm = llm_resource(library, "ollama", "other-model", "http://127.0.0.1:9", retries=0)
    result = run_assets(library, instance, [raptor_tree], partition_keys(library, [BOOK]), llm=llm)
    assert not result.success  # a single-file run that fails shows red, with the reason
    assert _tree(library) == before
