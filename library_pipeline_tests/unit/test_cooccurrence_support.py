"""Which co-occurrence rows a file keeps (passage_graph.cooccurrence_kept): the rule
kg_store applies once a file is extracted and the offline benchmark applies to its
rows. Type votes below are the example library's (benchmarks/graph_quality.py --offline).
The write path's counting of sentences is library_pipeline_tests/test_enrich_graph.py."""

from __future__ import annotations

import pytest

from library_pipeline.enrich.passage_graph import COOCCURRENCE_SENTENCES, cooccurrence_kept, is_person


@pytest.mark.parametrize("votes, expected", [
    ({"person": 464, "place": 2}, True),                    # Sherlock Holmes
    ({"organization": 26, "person": 13}, True),             # the Dormouse: an organisation to the tagger
    ({"organization": 22, "person": 26}, True),             # the Gryphon
    ({"work": 1, "place": 2}, False),                       # "Cheshire Cat": never a person to the tagger
    ({"organization": 9}, False),                           # "Ryder"
    ({"place": 20, "person": 1}, False),                    # a place once tagged a person
    ({"person": 0, "place": 0}, False),                     # an edge's end never mentioned
    ({}, False),
])
def test_a_person_is_tagged_one_in_a_quarter_of_its_mentions(votes, expected):
    assert is_person(votes) is expected


def test_two_people_keep_their_row_from_one_sentence():
    # "“Good-day, Lord St. Simon,” said Holmes, rising and bowing."
    assert cooccurrence_kept(1, people=True, typed=False)


def test_anything_else_needs_support():
    # Assizes / Holmes: "James McCarthy was acquitted at the Assizes on the strength of a number of
    # objections which had been drawn out by Holmes", their one sentence
    assert not cooccurrence_kept(1, people=False, typed=False)
    assert not cooccurrence_kept(COOCCURRENCE_SENTENCES - 1, people=False, typed=False)
    # Sherlock Holmes / Baker Street, in five sentences
    assert cooccurrence_kept(COOCCURRENCE_SENTENCES, people=False, typed=False)


def test_a_pair_the_file_types_keeps_no_cooccurrence():
    # Grimesby Roylott located_in Stoke Moran ("Dr. Grimesby Roylott, of Stoke Moran"), co-mentioned in 4 sentences
    assert not cooccurrence_kept(4, people=False, typed=True)
    assert not cooccurrence_kept(3, people=True, typed=True)
