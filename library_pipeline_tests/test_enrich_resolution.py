"""Who is who within a file: a short person name that is part of exactly one
longer name of the same file becomes its alias ("Victor", "Frankenstein" ->
"Victor Frankenstein"; "Mr. Hyde" -> "Edward Hyde"); a name shared by two full
names stays ambiguous and a lookup answers with both; any alias finds the
entity. Real spaCy over text written here, the real write path and database,
and the graph tools' coverage while a file is still pending (over MCP)."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import Client

from library_pipeline.defs.enrich.passage_graph import tidy_person
from library_pipeline.defs.enrich.kg_file_resolution import plan_file_merges
from library_pipeline.defs.enrich.kg_store import kg_step
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


def test_plan_of_merges_rules():
    merges, ambiguous = plan_file_merges({
        "holmes": 436, "sherlock holmes": 20,
        "mccarthy": 30, "james mccarthy": 6, "charles mccarthy": 1,
        "rucastle": 30, "alice rucastle": 1,            # said once: takes no family's name said 30 times
        "mr rucastle": 18, "mrs rucastle": 15, "miss rucastle": 1,   # (a family: a man's, a wife's form)
        "петр андреич": 53, "петр андреевич гринев": 3,  # colloquial patronymic
        "андрей петрович гринев": 2, "гринев": 19,     # father and son share the surname
        "швабрин": 64, "швабрина": 32, "а и швабрин": 1,  # oblique case; initials
        "alice": 387, "alice s right foot": 1,          # a possessive phrase is no name
        "пугачев": 156, "емельян пугачев": 2, "емелька пугачев": 1,  # rare variants make no rivals
    })
    assert merges["holmes"] == "sherlock holmes"
    assert merges["петр андреич"] == "петр андреевич гринев"
    assert merges["швабрина"] == "швабрин" and merges["а и швабрин"] == "швабрин"
    assert ambiguous["mccarthy"] == ["james mccarthy", "charles mccarthy"]
    assert set(ambiguous["гринев"]) == {"петр андреевич гринев", "андрей петрович гринев"}
    assert "mrs rucastle" not in merges and merges["miss rucastle"] == "alice rucastle"
    # «Емелька» is a diminutive of «Емельян»: one full name, so no rivals, and it claims «Пугачёв»
    assert merges["емелька пугачев"] == "емельян пугачев" and merges["пугачев"] == "емельян пугачев"
    for kept in ("rucastle", "alice", "sherlock holmes", "james mccarthy", "емельян пугачев"):
        assert kept not in merges and kept not in ambiguous


def test_a_full_name_said_once_claims_its_short_forms_unless_a_family_shares_them():
    """One entity per person: a held-back novel's protagonist was "Victor" (27) and
    "Frankenstein" (27) beside one "Victor Frankenstein"."""
    merges, ambiguous = plan_file_merges({"victor": 27, "frankenstein": 27, "victor frankenstein": 1,
                                          "mr frankenstein": 3, "hunter": 6, "miss hunter": 17, "violet hunter": 1,
                                          "mrs turner": 1, "miss turner": 5, "holder": 7, "mr holder": 12,
                                          "miss holder": 1, "alexander holder": 1})
    assert merges["victor"] == merges["frankenstein"] == merges["mr frankenstein"] == "victor frankenstein"
    assert merges["miss hunter"] == "violet hunter"
    # a wife's and a daughter's form are two women; "Mr." and "Miss Holder": a family's name
    assert "mrs turner" not in merges and "miss turner" not in merges
    assert "holder" not in merges and "mr holder" not in merges and not ambiguous


def test_russian_diminutives_join_the_full_first_name():
    merges, ambiguous = plan_file_merges({"марья ивановна": 157, "маша": 37, "марья миронова": 2,
                                          "петруша": 11, "петр андреевич гринев": 3})
    assert merges["маша"] == "марья ивановна" and merges["петруша"] == "петр андреевич гринев"
    assert not ambiguous


def test_russian_short_forms_of_one_person_join():
    """«Капитанская дочка» as the offline extractor names its people (mentions in the file)."""
    merges, ambiguous = plan_file_merges({
        "петр андреич": 67, "петр андреевич гринев": 3, "петруша": 11, "петр iii": 1, "петр федорович": 1,
        "петр феодорович": 1,                              # a passing Петр said once weighs nothing
        "савельич": 122, "архип савельич": 1,             # a lone patronymic is one man's
        "марья ивановна": 158, "маша": 37, "марья миронова": 2, "маша миронова": 1, "марья иванова": 1,
        "иван кузмич": 68, "иван игнатьич": 40, "иван миронов": 1, "миронов": 16,
        "пугачев": 197, "пугач": 2,
    })
    assert merges["петруша"] == merges["петр андреич"] == "петр андреевич гринев"
    assert merges["петр феодорович"] == "петр федорович"
    assert merges["савельич"] == "архип савельич"
    # first name with the one patronymic and the one surname the file says it with
    assert merges["марья миронова"] == merges["маша миронова"] == merges["марья иванова"] == "марья ивановна"
    # «Иван» has two patronymics in the file: «Иван Миронов» may be either Иван
    assert "иван миронов" not in merges and "иван кузмич" not in merges and "иван игнатьич" not in merges
    assert merges["пугач"] == "пугачев"
    assert not ambiguous


def test_plan_of_merges_never_joins_a_woman_and_a_man():
    merges, ambiguous = plan_file_merges({
        "turner": 40, "john turner": 10, "miss turner": 12,      # his daughter
        "mr holmes": 30, "holmes": 436, "sherlock holmes": 20,    # a male form into an unknown first name
        "mr rucastle": 20, "alice rucastle": 3,                  # a male form never into a woman's name
        "mrs hudson": 9, "hudson": 2,                            # one gender only: the form joins the name
        "miss irene adler": 2, "irene adler": 9, "irene": 4,
        "mrs st clair": 6, "neville st clair": 5, "st clair": 7,  # the wife is not the husband
        "марья ивановна": 80, "маша": 10, "иван кузмич": 40, "иван": 3,
    })
    assert merges["turner"] == "john turner" and "miss turner" not in merges
    assert merges["mr holmes"] == "sherlock holmes" and merges["holmes"] == "sherlock holmes"
    assert "mr rucastle" not in merges
    assert merges["mrs hudson"] == "hudson"
    assert merges["miss irene adler"] == "irene adler" and merges["irene"] == "irene adler"
    assert merges["st clair"] == "neville st clair" and "mrs st clair" not in merges
    assert merges["иван"] == "иван кузмич"
    assert not ambiguous
    # the plain surname shared by a father and a daughter: the form picks the daughter
    merges, ambiguous = plan_file_merges({"turner": 5, "miss turner": 3, "john turner": 4, "alice turner": 4,
                                          "stoner": 5, "miss stoner": 3, "helen stoner": 4, "julia stoner": 4})
    assert merges == {"miss turner": "alice turner"}
    assert ambiguous["turner"] == ["alice turner", "john turner"]
    assert ambiguous["miss stoner"] == ["helen stoner", "julia stoner"]   # two sisters: still ambiguous


@pytest.mark.parametrize("raw, name", [
    ("Ah, Watson", "Watson"), ("This John Openshaw", "John Openshaw"), ("Colonel Lysander Stark", "Lysander Stark"),
    ("Mr. Sherlock Holmes", "Sherlock Holmes"), ("Miss Turner", "Miss Turner"), ("Lady St. Simon", "Lady St. Simon"), ("Марья-то Ивановна", "Марья Ивановна"), ("Пугачёв-то", "Пугачёв"),
    ("А Марья Ивановна", "Марья Ивановна"), ("А. И. Швабрин", "А. И. Швабрин"), ("Alice and", "Alice"),
    ("King of Bohemia", "King of Bohemia"),
])
def test_person_names_lose_what_is_not_the_name(raw, name):
    assert tidy_person(raw) == name
