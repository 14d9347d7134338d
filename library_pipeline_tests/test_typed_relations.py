"""Typed relations and noise rules of the offline English extractor, one pattern per
test, on sentences of the example library (examples/library: The Adventures of Sherlock
Holmes, Alice's Adventures in Wonderland, Federal Register 2020-17221; public domain).
Pure extractor calls: no database."""

from __future__ import annotations

import pytest

from library_pipeline.defs.enrich.extract_english import english_graphs
from serving.ontology import RELATION_TYPES, relation_type


def typed(sentence: str) -> set[tuple[str, str, str, str]]:
    graph = english_graphs([sentence])[0]
    return {(e.source, e.relation or relation_type(e.relation_raw), e.target, e.relation_raw)
            for e in graph.edges if e.extractor != "cooccurrence"}


def relations(sentence: str) -> set[tuple[str, str, str]]:
    return {(a, rel, b) for a, rel, b, _ in typed(sentence)}


@pytest.mark.parametrize("sentence, expected", [
    # apposition, indefinite and definite
    ("John Horner, a plumber, was accused of having abstracted it from the lady’s jewel-case.",
     ("John Horner", "type_of", "plumber")),
    ("Sherlock Holmes had opened his mouth to reply, when the door flew open, and Peterson, the commissionaire, "
     "rushed into the apartment.", ("Peterson", "type_of", "commissionaire")),
    # copula
    ("“This fellow Merryweather is a bank director, and personally interested in the matter.",
     ("Merryweather", "type_of", "bank director")),
    ("“Boscombe Valley is a country district not very far from Ross, in Herefordshire.",
     ("Boscombe Valley", "type_of", "country district")),
    ("8 MCAS is a function of the Speed Trim System (STS), which is part of the airplane’s flight control system.",
     ("MCAS", "type_of", "function")),
    # "a Y named X"
    ("“To an English lawyer named Norton.”", ("Norton", "type_of", "lawyer")),
    # a rank said as a form of address
    ("He brought up a card, too, with the name of ‘Colonel Lysander Stark’ engraved upon it.",
     ("Lysander Stark", "type_of", "colonel")),
])
def test_descriptions_give_type_of(sentence, expected):
    assert expected in relations(sentence)


@pytest.mark.parametrize("sentence, expected", [
    # "X, of Y" for a person and an organisation -> part_of
    ("That is what Mr. Lestrade, of Scotland Yard, looks upon as so serious.",
     ("Mr. Lestrade", "part_of", "Scotland Yard", "of")),
    # "X in Y" for two places -> located_in
    ("It was found in the banks of the Amoy River in southern China.", ("Amoy River", "located_in", "China", "in")),
    # a place in apposition to a place
    ("On March 10, 2019, the airplane crashed after takeoff from Addis Ababa, Ethiopia.",
     ("Addis Ababa", "located_in", "Ethiopia", ",")),
    # a person and "was in" a place
    ("“When Dr. Roylott was in India he married my mother.", ("Roylott", "located_in", "India", "was in")),
    ("Sherlock Holmes lives in Baker Street.", ("Holmes", "located_in", "Baker Street", "lives in")),
])
def test_places_and_organisations(sentence, expected):
    assert expected in typed(sentence)


@pytest.mark.parametrize("sentence, expected", [
    ("Lord Robert St. Simon, second son of the Duke of Balmoral, and Miss Hatty Doran, the only daughter of "
     "Aloysius Doran.", ("daughter of", "family_of")),
    ("Alexander Holder's son Arthur stole the coronet.", ("son of", "family_of")),
])
def test_kin_with_both_people_named_gives_family_of(sentence, expected):
    raws = {(raw, rel) for _, rel, _, raw in typed(sentence)}
    assert expected in raws


def test_kin_direction_is_the_relative_towards_the_other():
    rows = relations("Alexander Holder's son Arthur stole the coronet.")
    assert ("Arthur", "family_of", "Alexander Holder") in rows
    rows = relations("Simon, second son of the Duke of Balmoral, and Miss Hatty Doran, the only daughter of "
                     "Aloysius Doran.")
    assert ("Hatty Doran", "family_of", "Aloysius Doran") in rows


def test_kin_without_the_other_person_named_gives_nothing():
    # "his daughter", "the only son of the deceased": the other person is not named
    assert not typed("Miss Turner, his daughter, was there.")
    assert not any(rel == "type_of" for _, rel, _ in relations(
        "“Mr. James McCarthy, the only son of the deceased, was then called.”"))


@pytest.mark.parametrize("sentence", [
    "“You may imagine, Mr. Holmes, that to me, destitute as I was, such an offer seemed almost too good to be true.",
    "He has been a disappointment to me, Mr. Holmes—a grievous disappointment.",
    "“But the money, Mr. Holmes, the money!”",
])
def test_a_name_said_to_someone_is_not_described_by_what_follows(sentence):
    assert not any(rel == "type_of" for _, rel, _ in relations(sentence))


def test_vague_nouns_type_nothing():
    assert not relations("Holmes is a man of great intellect.")


def test_verb_classes():
    # (no sentence of the example library says it between two named things)
    assert ("Microsoft", "uses", "Linux") in relations("Microsoft uses Linux in its data centres.")
    assert any(rel == "depends_on" for _, rel, _ in relations("Boeing relies on Honeywell for the displays."))


def test_every_typed_relation_is_in_the_closed_vocabulary():
    text = ("John Horner, a plumber, was accused. That is what Mr. Lestrade, of Scotland Yard, looks upon. "
            "Alexander Holder's son Arthur stole the coronet.")
    assert {rel for _, rel, _, _ in typed(text)} <= set(RELATION_TYPES)


def test_noise_places_and_beliefs():
    graph = english_graphs(["I went down to Stoke Moran Manor with Holmes.", "Like Satan, I had a feeling of revenge."])
    assert ("Stoke Moran Manor", "FAC") in graph_mentions(graph[0])
    assert not any(label in ("PERSON", "GPE", "LOC", "FAC") for name, label in graph_mentions(graph[1])
                   if name == "Satan")


def graph_mentions(graph):
    return set(graph.mentions)


def test_russian_rank_before_a_name_gives_type_of():
    from library_pipeline.defs.enrich.extract_russian import russian_graphs

    sentence = ("Я старался вообразить себе капитана Миронова, моего будущего начальника, и представлял его строгим, "
                "сердитым стариком.")
    graph = russian_graphs([sentence])[0]
    assert {(e.source, e.relation, e.target) for e in graph.edges if e.extractor == "pattern"} == {
        ("Миронов", "type_of", "капитан")}


def test_russian_lead_words_are_not_part_of_a_name():
    from library_pipeline.defs.enrich.extract_russian import natasha_models, without_lead_words

    morph = natasha_models()[2]
    assert without_lead_words("Бедная Марья Ивановна", morph) == "Марья Ивановна"
    assert without_lead_words("Тут Василиса Егоровна", morph) == "Василиса Егоровна"
    assert without_lead_words("Марья Ивановна", morph) == "Марья Ивановна"
    assert without_lead_words("Алексей Иваныч", morph) == "Алексей Иваныч"
