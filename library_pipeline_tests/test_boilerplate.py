"""Licence and distribution text stays out: the Project Gutenberg header and
licence of the real EPUBs in examples/library are cut off at extraction,
chunked as kind `boilerplate`, hidden from default search but found with an
explicit kind filter, and never fed to the graph."""

from __future__ import annotations

import re

import pytest

from library_pipeline.enrich.kg_store import kg_step
from library_pipeline.ingest.chunking import BOILERPLATE_LABEL, chunk_pages
from library_pipeline.ingest.extract import Page, extract_file, split_boilerplate
from library_pipeline_tests.conftest import SAMPLE_LIBRARY
from library_pipeline_tests.enrich_fixtures import instance, partition_keys  # noqa: F401 (fixture)
from library_pipeline_tests.ingest_helpers import ingest, write
from serving.search import search

GUTENBERG = re.compile(r"project gutenberg", re.IGNORECASE)
EPUBS = {"Carroll - Alice's Adventures in Wonderland.epub": ("Alice’s Adventures in Wonderland", "THE END"),
         "Doyle - The Adventures of Sherlock Holmes.epub": ("THERE IS AN ILLUSTRATED EDITION",
                                                           "has met with considerable success.")}


@pytest.mark.parametrize("name", sorted(EPUBS))
def test_gutenberg_header_and_licence_are_boilerplate(name):
    book = extract_file(SAMPLE_LIBRARY / name)
    pieces = split_boilerplate(book.pages)
    text = [p.text for p, kind in pieces if kind == "text"]
    boiler = [p.text for p, kind in pieces if kind == "boilerplate"]
    first, last = EPUBS[name]
    # the work starts right after the START line and ends right before the END line
    assert text[0].strip().startswith(first) and text[-1].strip().endswith(last)
    assert not any(GUTENBERG.search(t) for t in text), "licence text left in the work"
    assert boiler[0].startswith("The Project Gutenberg eBook of")
    assert "*** START OF THE PROJECT GUTENBERG EBOOK" in boiler[0]
    assert boiler[1].startswith("*** END OF THE PROJECT GUTENBERG EBOOK")
    assert "THE FULL PROJECT GUTENBERG LICENSE" in boiler[-1]
    assert sum(map(len, boiler)) > 18000
    # nothing lost: the pieces are the pages, cut
    assert sum(len(p.text) for p, _ in pieces) == sum(len(p.text) for p in book.pages if p.text.strip())


@pytest.mark.parametrize("name", ["Пушкин - Капитанская дочка.txt",
                                  "Federal Register 2020-17221 - Airworthiness Directives; The Boeing Company.pdf"])
def test_books_without_a_licence_are_all_work(name):
    book = extract_file(SAMPLE_LIBRARY / name)
    assert {kind for _, kind in split_boilerplate(book.pages)} == {"text"}


def test_a_publishers_copyright_page_is_boilerplate():
    pages = [Page(1, "A Field Guide to Moths"),
             Page(2, "Copyright © 2019 by Jane Example.\nAll rights reserved. No part of this publication may be "
                     "reproduced without permission.\nISBN 978-0-00-000000-0\nPrinted in the United Kingdom"),
             Page(3, "Chapter 1\n\nMoths fly at night. Copyright law does not concern them.")]
    kinds = [(p.page_no, kind) for p, kind in split_boilerplate(pages)]
    assert kinds == [(1, "text"), (2, "boilerplate"), (3, "text")]


def test_boilerplate_chunks_are_labelled(embedder):
    book = extract_file(SAMPLE_LIBRARY / "Carroll - Alice's Adventures in Wonderland.epub")
    chunks = chunk_pages(book.pages, count_tokens=embedder.count_tokens, max_tokens=200)
    boiler = [c for c in chunks if c.kind == "boilerplate"]
    assert boiler and all(c.heading == BOILERPLATE_LABEL for c in boiler)
    assert not any(GUTENBERG.search(c.content) for c in chunks if c.kind != "boilerplate")
    # header first, licence last: the work's chunks sit between them
    assert chunks[0].kind == "boilerplate" and chunks[-1].kind == "boilerplate"


@pytest.fixture(scope="module")
def gutenberg_text(server_db, tmp_path_factory, instance):
    """A Gutenberg book as plain text (header, two chapters, licence), ingested."""
    from library_pipeline_tests.conftest import new_database

    book = extract_file(SAMPLE_LIBRARY / "Carroll - Alice's Adventures in Wonderland.epub")
    root = tmp_path_factory.mktemp("boilerplate") / "library"
    write(root / "alice.txt", "\n\n".join(p.text for p in book.pages[:1] + book.pages[4:6] + book.pages[-2:]))
    db = new_database(server_db, root)
    assert ingest(db, instance)["failed"] == 0
    db.key = partition_keys(db, ["alice.txt"])[0]
    return db


def test_boilerplate_is_hidden_by_default_and_found_with_the_filter(gutenberg_text, embedder):
    query = "Project Gutenberg License: copying and distributing electronic works, royalties and donations"
    with gutenberg_text.connect() as conn:
        kinds = dict(conn.execute("SELECT kind, count(*) FROM passages GROUP BY kind").fetchall())
        default = search(conn, embedder, query, top_k=10)
        asked = search(conn, embedder, query, top_k=10, filters={"kind": "boilerplate"})
        both = search(conn, embedder, query, top_k=10, filters={"kinds": ["text", "boilerplate"]})
        story = search(conn, embedder, "the White Rabbit took a watch out of its waistcoat-pocket", top_k=10,
                       filters={"kinds": ["text", "boilerplate"]})
    assert kinds["boilerplate"] >= 20 and kinds["text"] >= 20
    assert default.results and all(r.kind != "boilerplate" for r in default.results)
    assert not any(GUTENBERG.search(r.text) for r in default.results)
    assert asked.results and all(r.kind == "boilerplate" for r in asked.results)
    assert any("Project Gutenberg" in r.text for r in asked.results[:3])
    assert both.results[0].kind == "boilerplate" and story.results[0].kind == "text"


def test_boilerplate_never_feeds_the_graph(gutenberg_text):
    result = kg_step(gutenberg_text, gutenberg_text.key)
    assert result.status == "ok", result.reason
    with gutenberg_text.connect() as conn:
        total, text = conn.execute(
            "SELECT k.passages_total, (SELECT count(*) FROM passages p WHERE p.document_id = k.document_id "
            "AND p.kind = 'text' AND p.summary_level = 0) FROM kg_progress k").fetchone()
        licence = conn.execute("SELECT name FROM entities WHERE name_norm ~ '(gutenberg|foundation|license)'"
                               ).fetchall()
        alice = conn.execute("SELECT type FROM entities WHERE name_norm ~ '^alice( @[0-9]+)?$'").fetchone()
    assert total == text
    assert licence == []
    assert alice == ("person",)
