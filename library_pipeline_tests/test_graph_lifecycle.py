"""The graph and the summary trees follow their files, on a real ingest through the
`library` command: a deleted book leaves every graph answer and the summaries lane
at the moment `library ingest` marks it removed, `library purge` leaves no row that
cites it, and an edited book's graph is hidden (named pending) until it is extracted
again from the new text, which replaces the old relations instead of adding to them.

Two real texts from library_pipeline_tests/data: two chapters of Alice (the book
deleted) and two parts of A Scandal in Bohemia (the book edited), each with one
generated paragraph naming the same two people, so that entities shared by both
books are seen to survive the deletion of one. A forgotten agent memory leaves
nothing either (nothing is derived from memories). The tests run in order, each on
the state the previous one left (one ingest and one graph build for the module)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from mcp import Client
from typer.testing import CliRunner

from library_pipeline.ingest.extract import extract_file
from library_pipeline_tests.conftest import new_database
from serving import graph
from serving.mcp_server import build_server
from serving.runtime import Library

ALICE = "Carroll - Alice chapters.txt"
HOLMES = "Doyle - A Scandal in Bohemia.txt"
SHARED = ("Bartholomew Quill and Cornelius Fenwick read this story aloud in Oxford. "
          "Bartholomew Quill said to Cornelius Fenwick that it was the best of the evening.")


def _chapters(path, pages) -> str:
    book = extract_file(path)
    return "\n\n".join(book.pages[i].text for i in pages)


@pytest.fixture(scope="module")
def lib(server_db, test_data, tmp_path_factory):
    base = tmp_path_factory.mktemp("lifecycle")
    root = base / "library"
    epub = test_data / "documents" / "epub"
    alice = _chapters(epub / "pg11-alice-in-wonderland.epub", [9, 12])         # Pig and Pepper; Mock Turtle
    holmes_parts = [_chapters(epub / "pg1661-sherlock-holmes.epub", [i]) for i in (5, 6)]   # parts II, III
    db = new_database(server_db, root)
    (root / ALICE).write_text(f"Alice's Adventures in Wonderland\n\n{alice}\n\n{SHARED}\n", encoding="utf-8")
    (root / HOLMES).write_text("A Scandal in Bohemia\n\n" + "\n\n".join(holmes_parts) + f"\n\n{SHARED}\n",
                               encoding="utf-8")
    db.root, db.holmes_parts = root, holmes_parts
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LIBRARY_DB_DSN", db.settings.db_dsn)
        mp.setenv("LIBRARY_HOME", str(base / "home"))
        mp.setenv("LIBRARY_DIR", str(root))
        mp.setenv("LIBRARY_LLM_BACKEND", "none")
        out = cli("ingest")
        assert "2 ingested" in out, out
        cli("graph", "build")
        yield db


def cli(*args: str) -> str:
    from library_pipeline.cli.main import app

    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def ask(*args: str):
    return json.loads(cli("graph", *args))


def _doc_id(db, path):
    with db.connect() as conn:
        return conn.execute("SELECT id FROM documents WHERE path = %s", (path,)).fetchone()[0]


def _only_from(db, doc_id) -> set[str]:
    """Names of the entities no other file mentions."""
    with db.connect() as conn:
        return {r[0] for r in conn.execute(
            "SELECT e.name FROM entities e JOIN entity_sources s ON s.entity_id = e.id AND s.document_id = %s "
            "WHERE NOT EXISTS (SELECT 1 FROM entity_sources o WHERE o.entity_id = e.id AND o.document_id <> %s)",
            (doc_id, doc_id))}


def _counts(db, doc_id) -> dict[str, int]:
    """Rows of one file in every table derived from it."""
    with db.connect() as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t} WHERE document_id = %s", (doc_id,)).fetchone()[0]
                for t in ("relations", "entity_sources", "entity_alias_candidates", "kg_progress", "raptor_builds",
                          "passages")}


@pytest.fixture(scope="module")
def before(lib):
    """The graph as built from both books, before anything is deleted or edited."""
    alice = _doc_id(lib, ALICE)
    stats = ask("stats")
    assert stats["files_pending"] == 0 and stats["summary_trees_pending"] == 0
    cat = ask("entity", "Cheshire Cat")
    assert cat["found"] and cat["files"] == [ALICE]
    quill = ask("entity", "Bartholomew Quill")
    assert quill["found"] and sorted(quill["files"]) == sorted([ALICE, HOLMES])
    only_alice = _only_from(lib, alice)
    assert cat["name"] in only_alice and len(only_alice) >= 5   # found under its own name or an alias
    counts = _counts(lib, alice)
    assert counts["relations"] > 0 and counts["raptor_builds"] == 1
    return {"alice": alice, "only_alice": only_alice, "stats": stats, "counts": counts}


def _names_in(answer) -> set[str]:
    """Every entity name anywhere in a graph answer."""
    names: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("name", "from", "to", "source", "target") and isinstance(v, str):
                    names.add(v)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(answer)
    return names


def test_a_deleted_book_leaves_every_graph_answer_at_ingest(lib, before):
    (lib.root / ALICE).unlink()
    assert "1 marked removed" in cli("ingest")
    gone = before["only_alice"]
    cat = ask("entity", "Cheshire Cat")
    assert cat["found"] is False and cat["candidates"] == []
    for name in sorted(gone)[:20]:
        assert ask("entity", name)["found"] is False, name
    quill = ask("entity", "Bartholomew Quill")
    assert quill["found"] and quill["files"] == [HOLMES] and quill["source_count"] == 1
    answers = [quill, ask("related", "Bartholomew Quill", "--limit", "200"),
               ask("subgraph", "Bartholomew Quill", "--depth", "2", "--limit", "200"),
               ask("path", "Bartholomew Quill", "Cheshire Cat"),
               ask("top", "--limit", "200"), ask("connected", "--limit", "200")]
    assert all(not (_names_in(a) & gone) for a in answers), [sorted(_names_in(a) & gone) for a in answers]
    assert answers[3]["found"] is False
    stats = ask("stats")
    with lib.connect() as conn:
        live_rel, live_ent = conn.execute(
            "SELECT (SELECT count(*) FROM relations WHERE document_id <> %(a)s), "
            "(SELECT count(DISTINCT entity_id) FROM entity_sources WHERE document_id <> %(a)s)",
            {"a": before["alice"]}).fetchone()
    assert stats["relations"] == live_rel < before["stats"]["relations"]
    assert stats["entities"] == live_ent == before["stats"]["entities"] - len(gone)
    assert stats["removed_files_awaiting_purge"] == {"files": 1, "relations": before["counts"]["relations"]}
    assert stats["files_ingested"] == 1 and stats["files_pending"] == 0


def test_b_mcp_graph_tools_and_search_no_longer_answer_from_it(lib, before):
    library = Library(lib.settings)

    async def run():
        async with Client(build_server(library)) as client:
            async def call(tool, args):
                return json.loads((await client.call_tool(tool, args)).content[0].text)
            return [await call("library_entity", {"name": "Cheshire Cat"}),
                    await call("library_entity", {"name": "Bartholomew Quill"}),
                    await call("library_related", {"name": "Bartholomew Quill", "limit": 200}),
                    await call("library_path", {"source": "Cornelius Fenwick", "target": "Cheshire Cat"}),
                    await call("library_subgraph", {"name": "Bartholomew Quill", "depth": 2, "limit": 200}),
                    await call("library_search", {"query": "the Cheshire Cat grinning from ear to ear",
                                                  "top_k": 10})]

    try:
        cat, quill, related, path, sub, search = asyncio.run(run())
    finally:
        library.close()
    assert cat["found"] is False and path["found"] is False
    assert quill["found"] and quill["files"] == [HOLMES]
    gone = before["only_alice"]
    assert not ((_names_in(quill) | _names_in(related) | _names_in(sub)) & gone)
    assert search["results"] and all(r["path"] != ALICE for r in search["results"] + search["summaries"])


def test_c_purge_leaves_no_row_that_cites_it(lib, before):
    assert "purged 1" in cli("purge", "--yes")
    assert _counts(lib, before["alice"]) == dict.fromkeys(before["counts"], 0)
    with lib.connect() as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM entities")}
        orphans = conn.execute("SELECT count(*) FROM entities e WHERE NOT EXISTS "
                               "(SELECT 1 FROM entity_sources s WHERE s.entity_id = e.id)").fetchone()[0]
        mentions = conn.execute("SELECT mentions FROM entities WHERE name = 'Bartholomew Quill'").fetchone()[0]
    assert not (names & before["only_alice"]) and orphans == 0
    assert mentions == ask("entity", "Bartholomew Quill")["mentions"]  # recounted from the file left
    stats = ask("stats")
    assert stats["removed_files_awaiting_purge"] == {"files": 0, "relations": 0}
    assert ask("entity", "Cheshire Cat")["found"] is False


def _evidence(db, doc_id) -> list[str]:
    with db.connect() as conn:
        return [r[0] for r in conn.execute("SELECT evidence FROM relations WHERE document_id = %s "
                                           "AND evidence IS NOT NULL", (doc_id,))]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_d_an_edited_book_is_pending_then_replaced_never_added_to(lib, before):
    holmes = _doc_id(lib, HOLMES)
    part_two, part_three = lib.holmes_parts
    old_evidence = _evidence(lib, holmes)
    kept = _flat(f"A Scandal in Bohemia {part_two} {SHARED}")
    lost = [e for e in old_evidence if _flat(e) not in kept]
    assert lost, "part III asserted relations of its own"
    with lib.connect() as conn:
        old_mentions = conn.execute("SELECT sum(mentions) FROM entity_sources WHERE document_id = %s",
                                    (holmes,)).fetchone()[0]
    (lib.root / HOLMES).write_text(f"A Scandal in Bohemia\n\n{part_two}\n\n{SHARED}\n", encoding="utf-8")
    assert "1 ingested" in cli("ingest")

    # between the edit and the rebuild: the old graph and the old tree are not served
    irene = ask("entity", "Irene Adler")
    assert irene["found"] is False and "pending" in irene["note"]
    pending = irene["coverage"]["pending_files"]
    assert pending == [{"path": HOLMES, "why": pending[0]["why"]}] and "changed since" in pending[0]["why"]
    assert HOLMES in irene["coverage"]["note"]
    stats = ask("stats")
    assert stats["relations"] == 0 and stats["entities"] == 0 and stats["files_pending"] == 1
    assert stats["summary_trees_pending"] == 1
    library = Library(lib.settings)
    try:
        found = library.search("Irene Adler and the photograph", top_k=5)
    finally:
        library.close()
    assert found.summaries == [] and "summary trees pending for 1 of 1" in found.stages["summaries"]

    cli("graph", "build")
    new_evidence = _evidence(lib, holmes)
    text = _flat((lib.root / HOLMES).read_text(encoding="utf-8"))
    assert new_evidence and all(_flat(e) in text for e in new_evidence), \
        [e for e in new_evidence if _flat(e) not in text][:3]
    with lib.connect() as conn:
        new_mentions = conn.execute("SELECT sum(mentions) FROM entity_sources WHERE document_id = %s",
                                    (holmes,)).fetchone()[0]
        totals = conn.execute("SELECT count(*), sum(mentions) FROM entities").fetchone()
        superseded = conn.execute("SELECT count(*) FROM passages WHERE document_id = %s AND summary_level > 0 "
                                  "AND superseded", (holmes,)).fetchone()[0]
    assert new_mentions < old_mentions  # replaced, not added to
    assert totals[1] == new_mentions     # the only file left: every mention is of its current text
    assert superseded == 0               # the new tree replaced the old one
    irene = ask("entity", "Irene Adler")
    assert irene["found"] and irene["coverage"]["files_pending"] == 0 and irene["files"] == [HOLMES]


def test_e_a_forced_reingest_of_the_same_text_keeps_its_graph_answering(lib):
    before = ask("entity", "Irene Adler")
    assert "1 ingested" in cli("ingest", "--force")
    during = ask("entity", "Irene Adler")
    assert during["found"] and during["mentions"] == before["mentions"]
    assert [p["path"] for p in during["coverage"]["pending_files"]] == [HOLMES]
    assert "same text" in during["coverage"]["pending_files"][0]["why"]
    library = Library(lib.settings)
    try:
        found = library.search("Irene Adler and the photograph", top_k=5)
    finally:
        library.close()
    assert found.summaries and {s.path for s in found.summaries} == {HOLMES}  # the same text's tree still answers
    cli("graph", "build", "--only", "graph")
    after = ask("entity", "Irene Adler")
    assert after["found"] and after["coverage"]["files_pending"] == 0 and after["mentions"] == before["mentions"]


def test_f_a_forgotten_memory_leaves_nothing_in_the_graph_or_the_summaries(lib, tmp_path):
    """The graph and the trees are built from library files only: a memory naming
    people is never extracted, and once forgotten no row anywhere derives from it."""
    note = tmp_path / "note.txt"
    note.write_text("Eustace Trombley met Cornelius Fenwick in Oxford and read A Scandal in Bohemia. " * 8,
                    encoding="utf-8")
    who = ("--agent", "lifecycle-tester")
    cli("memory", "index", "m-lifecycle", str(note), "--scope", "global", *who)
    stats = ask("stats")
    cli("graph", "build")
    assert ask("entity", "Eustace Trombley")["found"] is False
    assert ask("stats")["relations"] == stats["relations"] and ask("stats")["entities"] == stats["entities"]
    cli("memory", "forget", "m-lifecycle", "--yes", *who)
    with lib.connect() as conn:
        left = conn.execute("SELECT (SELECT count(*) FROM passages WHERE source = 'memory'), "
                            "(SELECT count(*) FROM memories), (SELECT count(*) FROM entities "
                            "WHERE name_norm = 'eustace trombley'), (SELECT count(*) FROM passages "
                            "WHERE summary_level > 0 AND document_id IS NULL)").fetchone()
    assert left == (0, 0, 0, 0)
