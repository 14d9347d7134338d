"""What every extractor returns, and the name rules they share.

A `PassageGraph` holds raw labels and names as a passage states them; the English,
Russian and LLM extractors (extract_english, extract_russian, extract) all clean
names with the rules below, and kg_store maps labels onto the closed vocabulary.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations

from library_pipeline.enrich.gender import form_gender
from serving.ontology import FORM_OF_ADDRESS, RELATION_TYPES, relation_type

# Co-occurrence says nothing in a list or an address block: a sentence naming more than
# LIST_NAMES distinct things, or LIST_SHARE_FROM or more whose names make LIST_SHARE of its
# words ("Then he sealed it and addressed it to “Captain James Calhoun, Barque Lone
# Star, Savannah, Georgia.”"), writes no related_to rows; its typed rows stay. Chosen
# on the example library's offline rows (benchmarks/graph_quality.py --offline): these
# bounds take 243 of 1,275 rows (the Federal Register's 356 drop to 218) and none of the
# 59 gold pairs some row joined; more than 4 names lost two («Андрей Петрович Гринёв /
# Савельич», the father's letter), a share of 0.3 from 3 names a third ("Grimesby
# Roylott / Sherlock Holmes"), and from 3 names a short statement goes too («Швабрин
# повел Пугачева в светлицу Марьи Ивановны»: 4 of 7 words are names).
LIST_NAMES = 5
LIST_SHARE_FROM = 4
LIST_SHARE = 0.35
_WORD = re.compile(r"\w+")

# Co-occurrence needs support (a product decision): a file writes a related_to row
# between two people whatever its support, and between anything else (a person and a
# place, two organisations) only when COOCCURRENCE_SENTENCES distinct sentences of the
# file name both. A person is a name the tagger called one in PERSON_SHARE or more of
# its mentions: the small model calls Alice's Dormouse an organisation 26 times of 39,
# the Gryphon 22 of 48. Measured on the example library's offline rows
# (benchmarks/graph_quality.py --offline, docs/enrichment.md): typed share 11.2% ->
# 29.0%, 59 of the 61 gold pairs still joined (the two lost go through names the tagger
# never calls a person: "Cheshire Cat", "Ryder"); two sentences for every pair kept 44,
# three 35; people at any share kept 59 at 27.7%, at half their mentions 56. A pair the
# file also relates with a type keeps no related_to row: the typed row joins the two
# already (typed_over_cooccurrence does the same within a passage; over the file it takes
# 23 more rows, 29.0% -> 30.8%, no gold pair lost).
COOCCURRENCE_SENTENCES = 3
PERSON_SHARE = 0.25


@dataclass
class Edge:
    source: str
    source_type: str
    relation_raw: str
    target: str
    target_type: str
    evidence: str
    extractor: str
    # the canonical relation when the pattern, not the raw label, tells it: "Roylott, of
    # Stoke Moran" is located_in and "Merryweather of the City and Suburban Bank" part_of,
    # both with the raw label "of". None: kg_store maps relation_raw (serving/ontology.py)
    relation: str | None = None


@dataclass
class PassageGraph:
    mentions: Counter = field(default_factory=Counter)   # (name, type_raw) -> count
    edges: list[Edge] = field(default_factory=list)


# Forms of address that name a person without being part of the name: "Mr. Hyde",
# "Edward Hyde" and "Hyde" are one man. Measured on the Sherlock Holmes EPUB before
# this: "Mr. Holmes", "Holmes" and "Sherlock Holmes" were three entities.
HONORIFIC = FORM_OF_ADDRESS


def clean_name(text: str) -> str | None:
    name = re.sub(r"\s+", " ", text).strip(" \t\n\"'“”‘’«»()[]{}.,;:!?-—–")
    name = re.sub(r"(?i)^(the|a|an)\s+", "", name)
    name = re.sub(r"['’]s$", "", name).strip()
    if len(name) < 2 or len(name) > 80 or not re.search(r"[^\W\d_]", name):
        return None
    return name


# a rank or profession said as a form of address types the person: "Inspector Lestrade"
# is an inspector, "Colonel Lysander Stark" a colonel (the form itself is stripped from
# the name, person_name); Mr., Miss, Lord and the like tell no type
RANKS = {"dr": "doctor", "colonel": "colonel", "captain": "captain", "inspector": "inspector",
         "sergeant": "sergeant", "major": "major", "professor": "professor",
         "капитан": "капитан", "генерал": "генерал", "майор": "майор", "поручик": "поручик", "сержант": "сержант",
         "капрал": "капрал", "урядник": "урядник"}


def rank_of(form) -> str | None:
    """The rank a form of address says (a FORM_OF_ADDRESS match: "Colonel ", "капитан "),
    None for one that tells no type (Mr., Miss, Lord)."""
    return RANKS.get(form.group(0).strip().rstrip(".").lower()) if form else None


# Words of address that the tagger takes for names ("His Majesty" was the 10th
# most mentioned "person" of the Sherlock Holmes stories).
NOT_NAMES = {"majesty", "highness", "excellency", "lordship", "ladyship", "honour", "honor", "sir", "madam",
             "miss", "mr", "mrs", "dr", "mister", "said", "матушка", "батюшка", "сударь", "сударыня"}



_LEAD_WORDS = {"ah", "oh", "this", "that", "poor", "dear", "old", "young", "little", "good", "well", "yes", "no",
               "and", "but", "then", "awake", "now", "why", "here", "there", "come", "see"}
_PARTICLE = re.compile(r"-(?:то|ка|де|с|таки)\b", re.IGNORECASE)


def tidy_person(name: str) -> str | None:
    """A person span as the tagger cut it, without what is not the name: the words
    before a comma ("Ah, Watson"), an opening interjection or pronoun ("This John
    Openshaw"), Russian particles («Марья-то Ивановна», «Пугачёв-то») and lowercase
    words inside («Пугачёв то», «бесстыдство Швабрина»), and a stray conjunction
    letter («А Марья Ивановна»; initials keep their full stop: «А. И. Швабрин»)."""
    name = _PARTICLE.sub("", name).split(",")[-1]
    words = name.split()
    keep = [w for w in words if not re.search(r"[а-яё]", w[:1]) or not re.search(r"[а-яёА-ЯЁ]", w)]
    words = keep if any(w[:1].isupper() for w in keep) else words
    while len(words) > 1 and (words[0].lower() in _LEAD_WORDS or (len(words[0]) == 1 and words[0].isalpha())):
        words = words[1:]
    while len(words) > 1 and words[-1][:1].islower():   # "Alice and"
        words = words[:-1]
    name = clean_name(" ".join(words))
    return person_name(name) or name if name else None


def person_name(text: str) -> str | None:
    """The person name of a span with a form of address, else None: a form of address
    marks a person whatever label the tagger gave the span. The form goes ("Colonel
    Lysander Stark" -> "Lysander Stark", "Mr. Sherlock Holmes" -> "Sherlock Holmes")
    except a gendered form before a surname alone, which stays for resolution to read:
    "Miss Turner" (his daughter) is not "John Turner", "Lady St. Simon" is not "Lord
    St. Simon"."""
    found = HONORIFIC.match(text)
    if not found:
        return None
    rest = clean_name(text[found.end():])
    if not rest or not rest[:1].isupper():
        return None
    form = found.group(0).strip()
    surname_alone = len([w for w in rest.split() if w.lower().rstrip(".") not in _SURNAME_PARTICLES]) == 1
    return f"{form} {rest}" if form_gender(form) and surname_alone else rest


# words that belong to a surname rather than make a second name ("St. Simon", "de Vere")
_SURNAME_PARTICLES = {"st", "de", "von", "van", "der", "du", "la", "le", "di", "da"}


def is_list(named: list[tuple[str, str]], evidence: str) -> bool:
    """A sentence that is a list or an address block rather than a statement (see
    LIST_NAMES): `named` its (name, label) in order, repeats included."""
    distinct = {name for name, _ in named}
    if len(distinct) > LIST_NAMES:
        return True
    name_words = sum(len(_WORD.findall(name)) for name, _ in named)
    return len(distinct) >= LIST_SHARE_FROM and name_words >= LIST_SHARE * max(1, len(_WORD.findall(evidence)))


def cooccur(graph: PassageGraph, named: list[tuple[str, str]], evidence: str) -> None:
    if is_list(named, evidence):
        return
    distinct: dict[str, str] = {}
    for name, label in named:
        distinct.setdefault(name, label)
    for (a, al), (b, bl) in combinations(distinct.items(), 2):
        if a.lower() != b.lower():
            graph.edges.append(Edge(a, al, "co-occurs with", b, bl, evidence, "cooccurrence"))


def typed_over_cooccurrence(graph: PassageGraph) -> PassageGraph:
    """The passage's co-occurrence edges without the pairs it also relates with a type:
    "the March Hare said to Alice" is one associate_of row, not that and a related_to
    beside it (each pair's related_to row was a second, untyped row for the same fact)."""
    typed = {frozenset((e.source, e.target)) for e in graph.edges if e.extractor != "cooccurrence"
             and (e.relation if e.relation in RELATION_TYPES else relation_type(e.relation_raw)) != "related_to"}
    graph.edges = [e for e in graph.edges
                   if e.extractor != "cooccurrence" or frozenset((e.source, e.target)) not in typed]
    return graph


def is_person(votes: dict[str, int]) -> bool:
    """A name of a person for the co-occurrence rule: `votes` its canonical types
    (serving/ontology.py entity types) counted over its mentions."""
    people = votes.get("person", 0)
    return people > 0 and people >= PERSON_SHARE * sum(votes.values())


def cooccurrence_kept(sentences: int, people: bool, typed: bool) -> bool:
    """Whether a file keeps its related_to row for a pair co-mentioned in `sentences`
    distinct sentences, `people` when both ends are persons (is_person), `typed` when
    the file also relates the pair with a type (either direction). kg_store applies it
    once a file is extracted; the offline benchmark applies it to its rows."""
    return not typed and (people or sentences >= COOCCURRENCE_SENTENCES)
