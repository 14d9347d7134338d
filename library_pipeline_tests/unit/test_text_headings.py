"""Headings of a plain-text book: chapters by numeral or word, titles in capitals, pieces
of a collection, numbered within their part - and nothing lost or moved."""

from __future__ import annotations

from library_pipeline.ingest.extract.text import text_sections

BOOK = """Александр Пушкин
КАПИТАНСКАЯ ДОЧКА

ГЛАВА I
СЕРЖАНТ ГВАРДИИ
Отец мой Андрей Петрович Гринев в молодости своей служил при графе Минихе.

— Был бы гвардии он завтра ж капитан!
Так говорил он.

ГЛАВА II
ВОЖАТЫЙ
Сторона ль моя, сторонушка.

Часть вторая

I
Первая глава второй части.
II
Вторая глава второй части, без пустых строк вокруг номера.

IV

VIXERUNT!1

1 Отжили! (лат.).
Текст статьи.

СТОП, КРИКНУЛ ОН, и пошел дальше по улице, не оглядываясь.
"""


def test_sections_follow_the_books_own_headings():
    sections = text_sections(BOOK)
    assert [h for h, _ in sections] == [
        None, "ГЛАВА I. СЕРЖАНТ ГВАРДИИ", "ГЛАВА II. ВОЖАТЫЙ", "Часть вторая. I", "Часть вторая › II", "IV. VIXERUNT!"]
    # every line kept, in order; each section opens with its heading
    assert "\n".join(text for _, text in sections) == BOOK
    assert sections[1][1].startswith("ГЛАВА I\nСЕРЖАНТ ГВАРДИИ")
    # a shouted line of dialogue, a line in capitals inside a paragraph: no heading
    assert not any(h and h.startswith("СТОП") for h, _ in sections)


def test_a_text_without_headings_is_one_section():
    text = "Просто текст.\n\nЕще абзац текста без заголовков."
    assert text_sections(text) == [(None, text)]
