"""Known-item lookups in a library of Russian and English books, as a person types them:
a title or author in the other script or spelled with е for ё, a titled piece inside a work,
a chapter by number, an English question naming a Russian work's characters - through
`serving.search.search` and `library_files`, and over MCP with the real client."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import dagster as dg
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from library_pipeline_tests.ingest_helpers import ingest
from serving.inventory import library_files
from serving.search import SearchConfig, SearchFilters, search
from serving.search.types import Viewer

REPO = Path(__file__).resolve().parent.parent
TEXT_RU = REPO / "library_pipeline_tests" / "data" / "documents" / "text_ru"
PUSHKIN = "Пушкин - Капитанская дочка.txt"
INJURED = "Herzen - Повреждённый.txt"
DUTY = "Herzen - Долг прежде всего.txt"
ALICE = "Carroll - Alice's Adventures in Wonderland.epub"

pytestmark = pytest.mark.timeout(1800)

CONFIG = SearchConfig(rerank=False, summaries=False, log_queries=False)
AGENT = SearchFilters(viewer=Viewer())


@pytest.fixture(scope="module")
def library(server_db, tmp_path_factory):
    from library_pipeline_tests.conftest import new_database

    lib = tmp_path_factory.mktemp("known-items") / "library"
    lib.mkdir()
    shutil.copy(TEXT_RU / "pushkin_kapitanskaya-dochka.txt", lib / PUSHKIN)
    shutil.copy(TEXT_RU / "herzen_povrezhdennyi.txt", lib / INJURED)
    shutil.copy(TEXT_RU / "herzen_dolg-prezhde-vsego.txt", lib / DUTY)
    shutil.copy(REPO / "examples" / "library" / ALICE, lib / ALICE)
    db = new_database(server_db, lib)
    with dg.DagsterInstance.ephemeral() as instance:
        out = ingest(db, instance)
    assert out["failed"] == 0, out
    yield db
    db.stop()


def _top(db, embedder, query: str):
    with db.connect() as conn:
        return search(conn, embedder, query, top_k=5, filters=AGENT, config=CONFIG)


@pytest.mark.parametrize("query,book", [
    ("Kapitanskaya dochka", PUSHKIN),                 # the title transliterated
    ("Pushkin Kapitanskaya dochka", PUSHKIN),
    ("Капитанская дочка Пушкин", PUSHKIN),
    ("Gertsen Povrezhdennyi", INJURED),               # another scheme's spelling of the author
    ("Герцен Поврежденный", INJURED),                 # е for ё, the author in Cyrillic
    ("Повреждённый", INJURED),                        # a one-word title alone
    ("Herzen Dolg prezhde vsego", DUTY),
    ("Alice's Adventures in Wonderland", ALICE),
])
def test_a_work_is_found_by_its_name_in_either_script(library, embedder, query, book):
    resp = _top(library, embedder, query)
    assert resp.results[0].path == book, (query, [r.path for r in resp.results], resp.stages.get("title"))
    assert "title" in resp.results[0].lanes, resp.results[0].lanes


def test_a_titled_piece_inside_a_work_is_found_at_its_own_heading(library, embedder):
    resp = _top(library, embedder, "Дядюшка Лев Степанович")
    top = resp.results[0]
    assert top.path == DUTY and "ДЯДЮШКА ЛЕВ СТЕПАНОВИЧ" in top.location, (top.path, top.location)
    assert top.text.lstrip().startswith("II"), top.text[:80]


@pytest.mark.parametrize("query", ["Капитанская дочка глава IX", "Капитанская дочка глава девятая",
                                   "Kapitanskaya dochka chapter 9"])
def test_a_chapter_is_found_at_its_opening(library, embedder, query):
    top = _top(library, embedder, query).results[0]
    assert top.path == PUSHKIN and "ГЛАВА IX" in top.location, (query, top.path, top.location)
    assert top.text.lstrip().startswith("ГЛАВА IX"), top.text[:80]


def test_an_english_question_names_a_russian_character_in_its_own_script(library, embedder):
    resp = _top(library, embedder, "What did Grinev give Pugachev on the road in the snowstorm?")
    lexemes = {t["lexeme"] for entry in resp.keyword_trace for t in entry.get("terms", [])}
    assert {"гринев", "пугачев"} <= lexemes, lexemes
    assert resp.results[0].path == PUSHKIN, [r.path for r in resp.results]


def test_library_files_finds_authors_and_titles_in_either_script_and_says_what_is_absent(library):
    with library.connect() as conn:
        by_author = library_files(conn, "Герцен")
        latin = library_files(conn, "Pushkin")
        spelled = library_files(conn, "поврежденный")
        absent = library_files(conn, "Чехов Каштанка")
    assert {f["path"] for f in by_author["files"]} == {INJURED, DUTY}
    assert [f["path"] for f in latin["files"]] == [PUSHKIN]
    assert [f["path"] for f in spelled["files"]] == [INJURED]
    assert absent["matched"] == 0 and absent["files"] == []


def test_the_same_lookups_over_mcp(library, tmp_path):
    env = {"LIBRARY_DB_DSN": library.settings.db_dsn, "LIBRARY_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "LIBRARY_LOG_LEVEL": "WARNING", "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "serving.mcp_server"], env=env, cwd=str(REPO))

    async def run() -> None:
        async with Client(params, read_timeout_seconds=300) as client:
            found = await client.call_tool("library_search", {"query": "Kapitanskaya dochka glava IX", "top_k": 3})
            assert not found.is_error
            top = found.structured_content["results"][0]
            assert top["path"] == PUSHKIN and "ГЛАВА IX" in top["location"], (top["path"], top["location"])
            files = await client.call_tool("library_files", {"pattern": "Gertsen"})
            assert not files.is_error
            assert {f["path"] for f in files.structured_content["files"]} == {INJURED, DUTY}

    asyncio.run(run())


def test_results_carry_the_author_and_filter_by_it_in_either_script(library, embedder):
    from serving.search.types import SearchError

    with library.connect() as conn:
        plain = search(conn, embedder, "дядюшка", top_k=10, filters=AGENT, config=CONFIG)
        by_herzen = search(conn, embedder, "дядюшка", top_k=10, config=CONFIG,
                           filters=SearchFilters.from_mapping({"author": "Герцен"}))
        by_pushkin = search(conn, embedder, "дядюшка", top_k=10, config=CONFIG,
                            filters=SearchFilters.from_mapping({"author": "Pushkin"}))
        files = library_files(conn, "Lewis Carroll")
        with pytest.raises(SearchError, match="no document by an author"):
            search(conn, embedder, "дядюшка", config=CONFIG, filters=SearchFilters.from_mapping({"author": "Чехов"}))
    authors = {r.path: r.author for r in plain.results}
    assert authors and all(authors[p] == {PUSHKIN: "Пушкин", INJURED: "Herzen", DUTY: "Herzen"}[p] for p in authors)
    assert by_herzen.results and {r.path for r in by_herzen.results} <= {INJURED, DUTY}
    assert by_pushkin.results and {r.path for r in by_pushkin.results} == {PUSHKIN}
    # the EPUB's own metadata names its author
    assert [(f["path"], f["author"]) for f in files["files"]] == [(ALICE, "Lewis Carroll")]
