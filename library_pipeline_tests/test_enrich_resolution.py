"""Who is who within a file: a short person name that is part of exactly one
longer name of the same file becomes its alias ("Victor", "Frankenstein" ->
"Victor Frankenstein"; "Mr. Hyde" -> "Edward Hyde"); a name shared by two full
names stays ambiguous and a lookup answers with both; any alias finds the
entity. Real spaCy over text written here, the real write path and database,
and the graph tools' coverage while a file is still pending (over MCP). The
merge planning and name tidying rules alone are
library_pipeline_tests/unit/test_name_resolution_rules.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import Client

from library_pipeline.enrich.kg_store import kg_step
from library_pipeline_tests.enrich_fixtures import instance, partition_keys  # noqa: F401 (fixture)
from library_pipeline_tests.ingest_helpers import ingest, write
from serving import graph
from serving.mcp_server import build_server
from serving.runtime import Library

FRANKENSTEIN = """\
Victor Frankenstein was born in Geneva. His father was a respected magistrate of the city.

Victor Frankenstein studied natural philosophy at Ingolstadt. In the laboratory, Victor worked through the nights.
"I have created a being," said Victor. Frankenstein wrote to his friend Henry Clerval every week.

Henry Clerval came to Ingolstadt and found Victor ill. Clerval nursed him through the winter. Victor recovered slowly.
Frankenstein thanked Clerval. "You are my dearest friend," said Frankenstein.

Later Mr. Hyde walked along the street. Edward Hyde was a small man. Mr. Hyde met Dr. Jekyll at the door.
Hyde said nothing. Edward Hyde went home. Dr. Jekyll watched Mr. Hyde go.
"""

STONERS = """\
Helen Stoner came to Baker Street in the early morning. Helen Stoner was pale and shaking.

Her sister, Julia Stoner, had died two years before. Julia Stoner was to have been married that spring.

"Miss Stoner, you are cold," said the detective. Stoner sat by the fire. Miss Stoner told the story of the whistle.

Helen Stoner said the house was old. Julia Stoner had heard a whistle in the night. Stoner wept.
"""

# a daughter named by her form of address beside her father's full name: the form
# carries her gender, so "Miss Turner" is not John Turner (whom "Turner" alone names)
TURNERS = """\
John Turner was the largest landowner in the district. John Turner lived at the Hall with his only daughter.

"Miss Turner, you must not be afraid," said the inspector. Miss Turner answered bravely. Turner was too ill to come.

"I knew him in Australia," said Turner. Miss Turner loved young James. John Turner would not allow the match.
"Never," said Turner. Miss Turner wept. Miss Turner went home.
"""


@pytest.fixture(scope="module")
def library(server_db, tmp_path_factory, instance):
    from library_pipeline_tests.conftest import new_database

    root = tmp_path_factory.mktemp("resolution") / "library"
    write(root / "frankenstein.txt", FRANKENSTEIN)
    write(root / "stoner.txt", STONERS)
    write(root / "turner.txt", TURNERS)
    db = new_database(server_db, root)
    assert ingest(db, instance)["failed"] == 0
    db.keys = partition_keys(db, ["frankenstein.txt", "stoner.txt", "turner.txt"])
    return db


def test_graph_tools_say_what_is_pending_before_extraction(library):
    with library.connect() as conn:
        before = graph.entity(conn, "Victor Frankenstein")
        stats = graph.stats(conn)
    assert before["found"] is False
    assert before["coverage"] == {**before["coverage"], "files_extracted": 0, "files_ingested": 3, "files_pending": 3}
    assert "0 of 3 files extracted so far" in before["note"] and "pending" in before["note"]
    assert stats["files_pending"] == 3 and "pending" in stats["note"]

    lib = Library(library.settings)

    async def run():
        async with Client(build_server(lib)) as client:
            out = await client.call_tool("library_entity", {"name": "Victor Frankenstein"})
            return json.loads(out.content[0].text)

    try:
        over_mcp = asyncio.run(run())
    finally:
        lib.close()
    assert over_mcp["found"] is False and over_mcp["coverage"]["files_pending"] == 3
    assert "pending" in over_mcp["note"]


@pytest.fixture(scope="module")
def extracted(library):
    for key in library.keys:
        result = kg_step(library, key)
        assert result.status == "ok", result.reason
    return library


def test_short_names_merge_into_the_one_full_name_of_the_file(extracted):
    with extracted.connect() as conn:
        victor = graph.entity(conn, "Victor Frankenstein")
        by_first = graph.entity(conn, "Victor")
        by_last = graph.resolve(conn, "Frankenstein")
        hyde = graph.entity(conn, "Mr. Hyde")
        stats = graph.stats(conn)
    assert victor["found"] and victor["type"] == "person"
    assert {"Victor", "Frankenstein"} <= set(victor["aliases"])
    # one entity whatever the name: the mentions of all three forms are its own
    assert by_first["found"] and by_first["id"] == victor["id"] and by_first["matched"] == "alias"
    assert by_last["status"] == "found" and by_last["entity"]["id"] == victor["id"]
    assert victor["mentions"] >= 8
    assert victor["relations"], "the merged entity keeps the edges of its short names"
    # a form of address does not split a person
    assert hyde["found"] and hyde["name"] == "Edward Hyde" and "Hyde" in hyde["aliases"]
    assert victor["coverage"]["files_pending"] == 0 and "note" not in victor["coverage"]
    assert stats["files_extracted"] == 3


def test_a_name_shared_by_two_full_names_stays_ambiguous(extracted):
    with extracted.connect() as conn:
        stoner = graph.entity(conn, "Stoner")
        helen = graph.entity(conn, "Helen Stoner")
        julia = graph.entity(conn, "Julia Stoner")
    assert stoner["found"] is False and stoner["status"] == "ambiguous"
    assert {c["name"] for c in stoner["candidates"]} == {"Helen Stoner", "Julia Stoner"}
    assert helen["found"] and julia["found"] and helen["id"] != julia["id"]
    assert "Stoner" not in helen["aliases"] + julia["aliases"]
    assert "Miss Stoner" not in helen["aliases"] + julia["aliases"]


def test_a_form_of_address_keeps_a_woman_apart_from_a_man_of_her_surname(extracted):
    with extracted.connect() as conn:
        father = graph.entity(conn, "John Turner")
        daughter = graph.entity(conn, "Miss Turner")
        by_surname = graph.entity(conn, "Turner")
    assert father["found"] and "Turner" in father["aliases"]
    assert "Miss Turner" not in father["aliases"]
    assert daughter["found"] and daughter["id"] != father["id"] and daughter["type"] == "person"
    assert by_surname["found"] and by_surname["id"] == father["id"]
