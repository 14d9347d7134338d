"""Typed relations and noise rules of the offline English extractor, one pattern per
test, on sentences of the example library (examples/library: The Adventures of Sherlock
Holmes, Alice's Adventures in Wonderland, Federal Register 2020-17221; public domain).
Pure extractor calls: no database."""

from __future__ import annotations

import pytest

from library_pipeline.enrich.extract_english import english_graphs
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


def test_kin_of_a_name_the_tagger_called_an_organisation():
    # "the Duke of Balmoral" is an ORG to the small model here
    assert ("Robert Walsingham de Vere St. Simon", "family_of", "Duke of Balmoral") in relations(
        "“‘Lord Robert Walsingham de Vere St. Simon, second son of the Duke of Balmoral.’")


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
    from library_pipeline.enrich.extract_russian import russian_graphs

    sentence = ("Я старался вообразить себе капитана Миронова, моего будущего начальника, и представлял его строгим, "
                "сердитым стариком.")
    graph = russian_graphs([sentence])[0]
    assert {(e.source, e.relation, e.target) for e in graph.edges if e.extractor == "pattern"} == {
        ("Миронов", "type_of", "капитан")}


def test_russian_lead_words_are_not_part_of_a_name():
    from library_pipeline.enrich.extract_russian import natasha_models, without_lead_words

    morph = natasha_models()[2]
    assert without_lead_words("Бедная Марья Ивановна", morph) == "Марья Ивановна"
    assert without_lead_words("Тут Василиса Егоровна", morph) == "Василиса Егоровна"
    assert without_lead_words("Марья Ивановна", morph) == "Марья Ивановна"
    assert without_lead_words("Алексей Иваныч", morph) == "Алексей Иваныч"


@pytest.mark.parametrize("sentence, expected", [
    # speech with its addressee after "to"
    ("“Take some more tea,” the March Hare said to Alice, very earnestly.",
     ("March Hare", "associate_of", "Alice", "said to")),
    ("Alice whispered to the Gryphon.", ("Alice", "associate_of", "Gryphon", "whispered to")),
    # a name said to someone in the quotation before the speech verb
    ("“It’s no use, John Clay,” said Holmes blandly.", ("Holmes", "associate_of", "John Clay", "said to")),
    ("“There is one other thing you owe, Mr. Holder,” said Sherlock Holmes rather sternly.",
     ("Holmes", "associate_of", "Mr. Holder", "said to")),
    # marriage, said of the couple
    ("Mr. Fowler and Miss Rucastle were married, by special license, in Southampton the day after their flight.",
     ("Mr. Fowler", "family_of", "Miss Rucastle", "married")),
    # a person going to a place was there
    ("When I came down, Mr. Rucastle met me here and drove me in his dog-cart to the Copper Beeches.",
     ("Mr. Rucastle", "located_in", "Copper Beeches", "drove to")),
])
def test_people_dealing_with_people(sentence, expected):
    assert expected in typed(sentence)


@pytest.mark.parametrize("sentence", [
    # an introduction: Windibank is named to someone else, not spoken to
    "“This is the girl’s stepfather, Mr. James Windibank,” said Holmes.",
    # a chapter title before a cry is no speaker, the cry no addressee
    "The Pool of Tears\n\n“Curiouser and curiouser!” cried Alice",
])
def test_names_not_spoken_to(sentence):
    assert not any(rel == "associate_of" for _, rel, _ in relations(sentence))


def test_a_pair_related_with_a_type_is_not_also_a_cooccurrence():
    graph = english_graphs(["“Take some more tea,” the March Hare said to Alice, very earnestly."])[0]
    assert [e.extractor for e in graph.edges] == ["dependency"]


def russian_typed(sentence: str) -> set[tuple[str, str, str, str]]:
    from library_pipeline.enrich.extract_russian import russian_graphs

    graph = russian_graphs([sentence])[0]
    return {(e.source, e.relation, e.target, e.relation_raw) for e in graph.edges if e.extractor != "cooccurrence"}


@pytest.mark.parametrize("sentence, expected", [
    # the name said in the quotation before the author's remark, a form of address before it
    ("— Помилуй, батюшка Петр Андреич! — сказал Савельич.", ("Савельич", "associate_of", "Пётр Андреич", "сказал")),
    ("— «Нет, Петр Андреич, — отвечала Маша, — я не выйду за тебя без благословения твоих родителей.",
     ("Маша", "associate_of", "Пётр Андреич", "отвечала")),
    # a verb with a person as its object
    ("Василиса Егоровна, не видя мужа, вторично послала за ним Палашку.",
     ("Василиса Егоровна", "associate_of", "Палашка", "послала")),
    # kin noun with a person after «с»
    ("Обедал почти всегда у коменданта, где обыкновенно проводил остаток дня и куда вечерком иногда являлся "
     "отец Герасим с женою Акулиной Памфиловной, первою вестовщицею во всем околотке.",
     ("Акулина Памфиловна", "family_of", "Герасим", "жена")),
    # a person arriving in a place was there
    ("Марья Ивановна благополучно прибыла в Софию и, узнав на почтовом дворе, что Двор находился в то время "
     "в Царском Селе, решилась тут остановиться.", ("Марья Ивановна", "located_in", "София", "прибыла в")),
])
def test_russian_relations_from_the_parse(sentence, expected):
    assert expected in russian_typed(sentence)


def test_russian_person_after_k_or_s():
    rows = russian_typed("С этим словом она встала и вошла в крытую аллею, а Марья Ивановна возвратилась к Анне "
                         "Власьевне, исполненная радостной надежды.")
    assert ("Марья Ивановна", "associate_of", "Анна Власьевна", "возвратилась к") in rows


def test_russian_marriage_after_na_is_no_place():
    rows = russian_typed("Вскоре потом Петр Андреевич женился на Марье Ивановне.")
    assert ("Пётр Андреевич", "family_of", "Марья Ивановна", "женился на") in rows
    assert not {r for r in rows if r[1] == "located_in"}


def test_russian_imperative_is_no_person():
    from library_pipeline.enrich.extract_russian import russian_graphs

    graph = russian_graphs(["— Дочитывай, — сказал Пугачев."])[0]
    assert {name for name, _ in graph.mentions} == {"Пугачёв"}
    assert not russian_typed("— Дочитывай, — сказал Пугачев.")


def test_one_fact_is_one_edge_per_sentence():
    # read both as a person's verb "in" a place and as a stay; kg_store counts edges as sentences
    graph = english_graphs(["“When Dr. Roylott was in India he married my mother."])[0]
    assert [e.relation for e in graph.edges].count("located_in") == 1


def cooccurring(sentence: str) -> set[frozenset]:
    return {frozenset((e.source, e.target)) for e in english_graphs([sentence])[0].edges
            if e.extractor == "cooccurrence"}


@pytest.mark.parametrize("sentence", [
    # an address: four names make most of the sentence
    "Then he sealed it and addressed it to “Captain James Calhoun, Barque Lone Star, Savannah, Georgia.”",
    # a list of the guests: more than five names
    "“‘The ceremony, which was performed at St. George’s, Hanover Square, was a very quiet one, no one being "
    "present save the father of the bride, Mr. Aloysius Doran, the Duchess of Balmoral, Lord Backwater, Lord "
    "Eustace, and Lady Clara St. Simon (the younger brother and sister of the bridegroom), and Lady Alicia "
    "Whittington.",
])
def test_lists_and_addresses_write_no_cooccurrence(sentence):
    assert not cooccurring(sentence)


def test_a_list_keeps_its_typed_rows():
    rows = relations("Simon, second son of the Duke of Balmoral, and Miss Hatty Doran, the only daughter of "
                     "Aloysius Doran.")
    assert ("Miss Hatty Doran", "family_of", "Aloysius Doran") in rows or ("Hatty Doran", "family_of",
                                                                            "Aloysius Doran") in rows
    assert not cooccurring("Simon, second son of the Duke of Balmoral, and Miss Hatty Doran, the only daughter of "
                           "Aloysius Doran.")


def test_a_statement_naming_three_keeps_its_cooccurrence():
    from library_pipeline.enrich.extract_russian import russian_graphs

    assert len(cooccurring("The Hatter looked at the March Hare, who had followed him into the court, arm-in-arm "
                           "with the Dormouse.")) == 3
    graph = russian_graphs(["Швабрин повел Пугачева в светлицу Марьи Ивановны."])[0]
    assert {frozenset((e.source, e.target)) for e in graph.edges if e.extractor == "cooccurrence"}


# pronouns stand for the person named last before them whose gender agrees
def test_a_pronoun_is_the_last_person_of_its_gender():
    rows = typed("“The next I heard of Frank was that he was in Montana, and then he went prospecting in "
                 "Arizona, and then I heard of him from New Mexico.")
    assert ("Frank", "located_in", "Montana", "was in") in rows


def test_russian_pronoun_after_a_preposition_and_as_addressee():
    rows = russian_typed("Иван Игнатьич, заметив во мне знаки неудовольствия и вспомня свое обещание, смутился и "
                         "не знал, что отвечать. Швабрин подоспел к нему на помощь.")
    assert ("Швабрин", "associate_of", "Иван Игнатьич", "подоспел к") in rows
    # the pronoun is not the pattern's other argument: «ему» is Иван Игнатьич, not Пугачев
    rows = russian_typed("Тогда привели к Пугачеву Ивана Игнатьича. «Присягай, — сказал ему Пугачев, — государю "
                         "Петру Феодоровичу!»")
    assert ("Пугачёв", "associate_of", "Иван Игнатьич", "сказал") in rows


def test_no_row_for_a_pronoun_two_people_could_be():
    # two sentences of the book, the first naming two men: «нему» could be either
    rows = russian_typed("Тогда привели к Пугачеву Ивана Игнатьича. Швабрин подоспел к нему на помощь.")
    assert not any(rel == "associate_of" and raw == "подоспел к" for _, rel, _, raw in rows)


def test_no_row_for_a_pronoun_without_a_person_of_its_gender():
    # the only person before "she" is a man
    rows = typed("“The next I heard of Frank was that he was in Montana.” “Do you mean that she has left England?”")
    assert not any(place == "England" for _, _, place, _ in rows)
    # and none at all before it
    assert not typed("“Do you mean that she has left England?”")


def test_pronoun_genders_of_lone_names():
    from library_pipeline.enrich.pronouns import PassagePeople

    people = PassagePeople()
    # a title or kinship word says the gender (Alice's Adventures names its people so)
    assert people.gender("Queen of Hearts") == "f" and people.gender("King") == "m"
    assert people.gender("Императрица") == "f"
    # a surname takes the gender its gendered names said before, none once both were said
    assert people.gender("Holmes") is None
    learned = PassagePeople()
    for name in ("Mr. Holmes", "Mr. Turner", "Miss Turner"):
        learned.add(0, 0, name, "PERSON")
    assert learned.gender("Holmes") == "m" and learned.gender("Turner") is None
