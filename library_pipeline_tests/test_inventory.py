"""library_files: the inventory, the only place where matched = 0 proves absence."""

from __future__ import annotations

import uuid

import pytest

from library_pipeline_tests.search_fixtures import conn, corpus, small_library  # noqa: F401  (fixtures)
from serving.inventory import library_files
from serving.search import SearchError, search
from serving.search.titles import NAMES


def paths(answer: dict) -> list[str]:
    return [f["path"] for f in answer["files"]]


def test_absent_work_gives_matched_zero(conn, embedder):
    answer = library_files(conn, "The Hitchhiker's Guide to the Galaxy")
    assert answer["matched"] == 0 and answer["files"] == [] and answer["total"] > 50
    # while content search, asked the same, still returns its closest guesses
    assert search(conn, embedder, "The Hitchhiker's Guide to the Galaxy", top_k=3).results


@pytest.mark.parametrize("pattern, expected, how", [
    ("moby dick", "epub/pg2701-moby-dick.epub", "substring"),          # via title and folded path
    ("Moby-Dick", "epub/pg2701-moby-dick.epub", "substring"),
    ("SICP", "pdf/sicp-2nd-ed-sarabander.pdf", "substring"),
    ("капитанская дочка", "text_ru/pushkin_kapitanskaya-dochka.txt", "substring"),
    ("kapitanskaya", "text_ru/pushkin_kapitanskaya-dochka.txt", "substring"),
    ("sherlock holmes adventures", "epub/pg1661-sherlock-holmes.epub", "terms"),  # not a substring: 3 stems shared
    ("computer program interpretations", "pdf/sicp-2nd-ed-sarabander.pdf", "terms"),  # plural/singular
])
def test_present_works_are_found(conn, pattern, expected, how):
    answer = library_files(conn, pattern)
    assert expected in paths(answer), answer
    match = next(f["match"] for f in answer["files"] if f["path"] == expected)
    assert match.startswith(how)


def test_a_single_shared_word_does_not_match(conn):
    # "whale" is in "Moby Dick; Or, The Whale", but one common word is not a title match
    answer = library_files(conn, "whale songs of the pacific")
    assert answer["matched"] == 0, answer
    assert library_files(conn, "guide to adventures")["matched"] == 0  # 'adventur' alone is shared


def test_removed_files_are_not_in_the_library(conn):
    answer = library_files(conn, "hound of the baskervilles")
    assert answer["matched"] == 0
    everything = library_files(conn, "", limit=1000)
    assert everything["matched"] == everything["total"] == everything["returned"]
    assert "epub/old-edition/hound-of-the-baskervilles.txt" not in paths(everything)


def test_limit_and_truncation(conn):
    answer = library_files(conn, "scifact/", limit=10)
    assert answer["returned"] == 10 and answer["matched"] > 10 and answer["truncated"]
    for bad in (0, -1, "ten", True):
        with pytest.raises(SearchError, match="limit"):
            library_files(conn, "x", limit=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("pattern", ["", "   ", "%", "_", "!&|:*()<->", "'; DROP TABLE documents; --",
                                     "🐋", "x" * 100_000, "null\x00byte"])
def test_odd_patterns_are_answered(conn, pattern):
    answer = library_files(conn, pattern)
    assert set(answer) == {"pattern", "total", "matched", "returned", "truncated", "files"}
    assert conn.execute("SELECT to_regclass('documents') IS NOT NULL").fetchone()[0]
    if pattern in ("%", "_"):  # literal characters, not LIKE wildcards
        assert all(pattern in f["path"] or pattern in (f["title"] or "") for f in answer["files"])
        assert answer["matched"] < answer["total"]


def test_name_cache_reloads_when_documents_change(db, embedder, test_data, corpus):
    small_library(db, embedder, test_data, books=2)
    with db.connect() as conn:
        assert library_files(conn, "treasure island")["matched"] == 0
        loads = NAMES.loads
        library_files(conn, "treasure island")
        assert NAMES.loads == loads  # cached: the names were not stemmed again
        conn.execute("INSERT INTO documents (path, partition_key, title, status) VALUES (%s, %s, %s, 'failed')",
                     ("epub/stevenson-treasure-island.epub", uuid.uuid4().hex, "Treasure Island"))
        conn.commit()
        answer = library_files(conn, "treasure island")
        assert NAMES.loads == loads + 1
        assert answer["matched"] == 1 and answer["files"][0]["status"] == "failed"  # present, not searchable
