"""The closed vocabulary's mapping rules (serving/ontology.py): raw entity labels and
relation predicates land inside the vocabulary. Its enforcement in the database
and the extractors are library_pipeline_tests/test_graph_ontology.py."""

from __future__ import annotations

import pytest

from serving.ontology import ENTITY_TYPES, RELATION_TYPES, entity_type, relation_type


@pytest.mark.parametrize("raw, expected", [
    ("tool", "tool"), ("tools", "tool"), ("Tools", "tool"), (" TOOL ", "tool"),
    ("PERSON", "person"), ("PER", "person"), ("people", "person"), ("GPE", "place"), ("LOC", "place"),
    ("ORG", "organization"), ("companies", "organization"), ("WORK_OF_ART", "work"), ("libraries", "software"),
    ("protocols", "protocol"), ("Technique", "technique"), ("DATE", "other"), ("spaceship", "other"), ("", "other"),
])
def test_entity_labels_map_onto_the_closed_vocabulary(raw, expected):
    assert entity_type(raw) == expected


@pytest.mark.parametrize("raw, expected", [
    ("part of", "part_of"), ("part_of", "part_of"), ("Part-Of", "part_of"), ("is part of", "part_of"),
    ("used by", "uses"), ("uses", "uses"), ("use", "uses"), ("written by", "created_by"),
    ("is a kind of", "type_of"), ("kind of", "type_of"), ("depends on", "depends_on"), ("implemented by", "implements"),
    ("co-occurs with", "related_to"), ("father of", "family_of"), ("step-father of", "family_of"),
    ("servant of", "associate_of"), ("friend of", "associate_of"), ("lives in", "located_in"), ("loves", "related_to"), ("contains", "related_to"), ("wrote", "related_to"),
])
def test_relation_predicates_map_onto_the_closed_vocabulary(raw, expected):
    assert relation_type(raw) == expected


def test_every_mapping_lands_inside_the_vocabulary():
    words = ["tools", "x", "used_by", "part of", "??", "GPE", "NORP", "written by", "kind of", "targets"]
    assert all(entity_type(w) in ENTITY_TYPES for w in words)
    assert all(relation_type(w) in RELATION_TYPES for w in words)
    # agent-library's 14 entity types + place, event; 11 relations + family_of, associate_of for people in books
    assert len(RELATION_TYPES) == 13 and len(ENTITY_TYPES) == 16
