"""The user's own question file for `library eval library`: TSV and YAML read the same way,
mistakes named with their line, and the shipped example file valid and big enough to mean
something (its scoring through the real search is in test_multilingual.py)."""

from __future__ import annotations

import pytest

from library_pipeline.eval.library_questions import EXAMPLE_QUESTIONS, QuestionFileError, load_questions
from serving.search.language import language_script, script


def test_tsv_and_yaml_say_the_same(tmp_path):
    tsv = tmp_path / "q.tsv"
    tsv.write_text("question\tfiles\n# a comment\n\nWho is Irene Adler?\tholmes.epub\n"
                   "Кто такой Савельич?\tpushkin.txt | notes/pushkin.md\n", encoding="utf-8")
    yml = tmp_path / "q.yaml"
    yml.write_text("- question: Who is Irene Adler?\n  files: holmes.epub\n"
                   "- question: Кто такой Савельич?\n  files: [pushkin.txt, notes/pushkin.md]\n", encoding="utf-8")
    a, b = load_questions(tsv), load_questions(yml)
    assert [(q.text, q.files) for q in a] == [(q.text, q.files) for q in b] == [
        ("Who is Irene Adler?", ("holmes.epub",)), ("Кто такой Савельич?", ("pushkin.txt", "notes/pushkin.md"))]
    assert a[0].line == 4


@pytest.mark.parametrize("name,text,message", [
    ("q.tsv", "Who is Irene Adler?\n", r"q.tsv:1: expected `question<TAB>file\(s\)`"),
    ("q.tsv", "# only a comment\n", "no questions"),
    ("q.yaml", "- question: Who?\n", "item 1: needs `question` and `files`"),
    ("q.yaml", "question: [unclosed\n", "not YAML"),
])
def test_mistakes_are_named(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(QuestionFileError, match=message):
        load_questions(path)


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(QuestionFileError, match="cannot read"):
        load_questions(tmp_path / "absent.tsv")


def test_the_example_library_file():
    """At least 40 questions, both languages, questions across languages both ways, and every
    named file is one of the example library's."""
    questions = load_questions(EXAMPLE_QUESTIONS)
    library = {p.name for p in (EXAMPLE_QUESTIONS.parent / "library").iterdir()}
    assert len(questions) >= 40
    assert {f for q in questions for f in q.files} <= library
    scripts = [script(q.text) for q in questions]
    assert scripts.count("cyrillic") >= 10 and scripts.count("latin") >= 20
    russian_book = {f for f in library if script(f) == "cyrillic"}
    cross = [q for q, s in zip(questions, scripts)
             if (s == "cyrillic") != bool(set(q.files) & russian_book)]
    assert sum(script(q.text) == "cyrillic" for q in cross) >= 3 and sum(script(q.text) == "latin" for q in cross) >= 2


def test_language_script():
    assert language_script("ru") == "cyrillic" and language_script("en") == "latin"
    assert language_script("de") == "latin" and language_script("zh") == "other"
    assert language_script(None) is None and language_script("und") is None
