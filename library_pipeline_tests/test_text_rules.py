"""Rules that SQL and Python both apply, each with one definition: the passage
context ("title — heading") and the language -> text-search configuration map.
The file types the library reads are library_pipeline_tests/unit/test_file_types.py."""

from __future__ import annotations

from serving.embedding import embed_text_for_passage, embed_text_for_row, passage_context
from serving.memory.store import memory_language
from serving.passage_writer import ts_config_for_language

CONTEXTS = [
    ("Moby Dick", "Chapter 1. Loomings"), ("Moby Dick", "moby dick"), ("  Moby Dick ", " Loomings "),
    (None, "Loomings"), ("Moby Dick", None), ("", ""), (None, None), ("Война и мир", "Том 1"),
    ("Война и мир", "ВОЙНА И МИР"),
]


def test_passage_context_is_the_same_rule_in_sql_and_python(db):
    with db.connect() as conn:
        for title, heading in CONTEXTS:
            in_sql = conn.execute("SELECT passage_context(%s, %s)", (title, heading)).fetchone()[0]
            assert in_sql == passage_context(title, heading), (title, heading)
    assert embed_text_for_passage("Moby Dick", "Loomings", "Call me Ishmael.") == \
        "Moby Dick — Loomings\nCall me Ishmael."
    # memories embed their type where documents put their title
    assert embed_text_for_row("memory", None, "report", "x") == "report\nx"
    assert embed_text_for_row("library", "Moby Dick", "report", "x") == "Moby Dick — report\nx"


def test_every_writer_takes_its_configuration_from_the_one_map(db):
    with db.connect() as conn:
        assert ts_config_for_language(conn, "ru") == "russian"
        assert ts_config_for_language(conn, "de") == "german"
        assert ts_config_for_language(conn, None) == "simple"
        assert ts_config_for_language(conn, "xx") == "simple"
        assert ts_config_for_language(conn, memory_language("Отчёт о проверке памяти агентов")) == "russian"
        assert ts_config_for_language(conn, memory_language("A report on the agents' memory")) == "english"
        assert ts_config_for_language(conn, memory_language("1234 !!")) == "english"
