"""The closed vocabulary: mapping rules, direction kept, enforcement in the
database, and the one name normalisation (SQL) shared by writes and reads."""

from __future__ import annotations

import psycopg
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


def test_direction_is_kept_for_passive_phrases(db):
    """'X used by Y' is stored as X -uses-> Y with the raw label: recoverable, never silently inverted."""
    from library_pipeline.defs.enrich.passage_graph import Edge, PassageGraph
    from library_pipeline.defs.enrich.kg_store import write_graph

    with db.transaction() as conn:
        doc = conn.execute("INSERT INTO documents (path, partition_key, status) VALUES ('a.txt', 'a', 'ingested') "
                           "RETURNING id").fetchone()[0]
        g = PassageGraph()
        g.mentions.update({("Kerberos", "protocol"): 1, ("Active Directory", "tools"): 1})
        g.edges.append(Edge("Kerberos", "protocol", "used by", "Active Directory", "tools", "ev", "llm"))
        write_graph(conn, doc, [g])
    with db.connect() as conn:
        row = conn.execute("SELECT s.name, r.relation, r.relation_raw, t.name, t.type, t.type_raw FROM relations r "
                           "JOIN entities s ON s.id = r.source_id JOIN entities t ON t.id = r.target_id").fetchone()
    assert row == ("Kerberos", "uses", "used by", "Active Directory", "tool", "tools")


def test_database_refuses_labels_outside_the_vocabulary(db):
    with db.connect() as conn:
        db_types = {r[0] for r in conn.execute("SELECT name FROM kg_entity_types")}
        db_rel = {r[0] for r in conn.execute("SELECT name FROM kg_relation_types")}
        assert db_types == set(ENTITY_TYPES) and db_rel == set(RELATION_TYPES)
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            conn.execute("INSERT INTO entities (name, name_norm, type) VALUES ('x', 'x', 'tools')")


NAME_PAIRS = [
    ("The Red-Headed League", "red headed league"), ("Holmes's", "Holmes"), ("Holmes’s", "holmes"),
    ("  Irene   Adler ", "irene adler"), ("Пугачёв", "пугачев"), ("C++", "c++"), ("ＡＢＣ", "abc"),
]


def test_one_name_normalisation_in_sql(db):
    with db.connect() as conn:
        for a, b in NAME_PAIRS:
            x, y = conn.execute("SELECT kg_normalise_name(%s), kg_normalise_name(%s)", (a, b)).fetchone()
            assert x == y and x, (a, b)
        assert conn.execute("SELECT kg_normalise_name('C#') <> kg_normalise_name('C')").fetchone()[0]


def test_english_pattern_relations_map_with_direction_as_written():
    from library_pipeline.defs.enrich.extract_english import english_graphs

    graph = english_graphs(["The Hound of the Baskervilles, written by Arthur Conan Doyle, appeared in 1902. "
                            "Kerberos is a kind of network protocol used by Windows domains."])[0]
    found = {(e.source, relation_type(e.relation_raw), e.target) for e in graph.edges if e.extractor == "pattern"}
    assert ("Hound of the Baskervilles", "created_by", "Arthur Conan Doyle") in found
    assert ("Kerberos", "type_of", "network protocol") in found


def test_russian_names_are_put_in_the_nominative():
    from library_pipeline.defs.enrich.extract_russian import russian_graphs

    graph = russian_graphs(["Маша Миронова любила Гринёва, а Швабрин служил в Оренбурге. "
                            "Савельич говорил с Пугачёвым в Белогорской крепости."])[0]
    names = {(name, label) for name, label in graph.mentions}
    assert {("Маша Миронова", "PER"), ("Гринёв", "PER"), ("Швабрин", "PER"), ("Оренбург", "LOC"),
            ("Пугачёв", "PER"), ("Белогорская крепость", "LOC")} <= names, names
    assert {entity_type(label) for _, label in names} <= {"person", "place"}
