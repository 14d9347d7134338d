"""The closed vocabulary in the database and the extractors: direction kept,
enforcement in the database, the one name normalisation (SQL) shared by writes
and reads, and the spaCy / natasha extractors' labels. The mapping rules alone
are library_pipeline_tests/unit/test_ontology_rules.py."""

from __future__ import annotations

import psycopg
import pytest

from serving.ontology import ENTITY_TYPES, RELATION_TYPES, entity_type, relation_type


def test_direction_is_kept_for_passive_phrases(db):
    """'X used by Y' is stored as X -uses-> Y with the raw label: recoverable, never silently inverted."""
    from library_pipeline.enrich.passage_graph import Edge, PassageGraph
    from library_pipeline.enrich.kg_store import write_graph

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
    from library_pipeline.enrich.extract_english import english_graphs

    graph = english_graphs(["The Hound of the Baskervilles, written by Arthur Conan Doyle, appeared in 1902. "
                            "Kerberos is a kind of network protocol used by Windows domains."])[0]
    found = {(e.source, relation_type(e.relation_raw), e.target) for e in graph.edges if e.extractor == "pattern"}
    assert ("Hound of the Baskervilles", "created_by", "Arthur Conan Doyle") in found
    assert ("Kerberos", "type_of", "network protocol") in found


def test_russian_names_are_put_in_the_nominative():
    from library_pipeline.enrich.extract_russian import russian_graphs

    graph = russian_graphs(["Маша Миронова любила Гринёва, а Швабрин служил в Оренбурге. "
                            "Савельич говорил с Пугачёвым в Белогорской крепости."])[0]
    names = {(name, label) for name, label in graph.mentions}
    assert {("Маша Миронова", "PER"), ("Гринёв", "PER"), ("Швабрин", "PER"), ("Оренбург", "LOC"),
            ("Пугачёв", "PER"), ("Белогорская крепость", "LOC")} <= names, names
    assert {entity_type(label) for _, label in names} <= {"person", "place"}
