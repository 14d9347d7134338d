"""Who is who within a file, as rules over mention counts: which short person
names merge into which full name, which stay ambiguous, and what a person name
loses ("Ah, Watson" -> "Watson"). The same rules over real spaCy extraction and the
database are library_pipeline_tests/test_enrich_resolution.py."""

from __future__ import annotations

import pytest

from library_pipeline.enrich.kg_file_resolution import plan_file_merges
from library_pipeline.enrich.passage_graph import tidy_person


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
