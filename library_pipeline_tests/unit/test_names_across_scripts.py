"""The same name typed in Cyrillic or in Latin letters under the schemes people use, and
the numbers of chapters and parts as people write them."""

from __future__ import annotations

import pytest

from serving.search.sections import heading_fits, numerals, roman_value, strip_numerals
from serving.search.translit import skeleton, skeletons, to_latin

SAME = [
    ("Чехов", "Chekhov"), ("Горький", "Gorky"), ("Горький", "Gorkiy"), ("Горький", "Gor'kii"),
    ("Каштанка", "Kashtanka"), ("Герцен", "Herzen"), ("Гоголь", "Gogol"), ("Толстой", "Tolstoy"),
    ("Достоевский", "Dostoyevsky"), ("Достоевский", "Dostoevskij"), ("Алёша", "Alyosha"), ("Фёдор", "Fyodor"),
    ("Брюсов", "Bryusov"), ("Червяков", "Chervyakov"), ("Печорин", "Pechorin"), ("Акакий", "Akaky"),
    ("Сергеевна", "Sergeyevna"), ("Щедрин", "Shchedrin"), ("Жуковский", "Zhukovsky"), ("Хлестаков", "Khlestakov"),
    ("Цветаева", "Tsvetaeva"), ("Чайковский", "Tchaikovsky"), ("Евгений", "Yevgeny"), ("Евгений", "Evgeny"),
    ("Повреждённый", "Povrezhdennyi"), ("Повреждённый", "Поврежденный"), ("Мцыри", "Mtsyri"),
]
DIFFERENT = [("Чехов", "Чуков"), ("Горький", "Гоголь"), ("Пушкин", "Пущин"), ("Толстой", "Толстов")]


@pytest.mark.parametrize("cyrillic,latin", SAME)
def test_one_name_in_either_script_has_one_key(cyrillic, latin):
    assert skeleton(cyrillic) == skeleton(latin)


@pytest.mark.parametrize("a,b", DIFFERENT)
def test_different_names_keep_different_keys(a, b):
    assert skeleton(a) != skeleton(b)


def test_keys_of_a_text_leave_out_english_function_words_and_short_words():
    assert skeletons("Who did Chervyakov sneeze on?") == {skeleton("Chervyakov"), skeleton("sneeze")}
    assert skeletons("Горький «Мать»") == {skeleton("Горький"), skeleton("Мать")}
    assert to_latin("Пушкин - Капитанская дочка") == "Pushkin - Kapitanskaya dochka"


@pytest.mark.parametrize("query,kind,value", [
    ("Мать глава XV", "chapter", 15), ("Тарас Бульба глава IX", "chapter", 9), ("На дне акт третий", "act", 3),
    ("Мещане действие второе", "act", 2), ("Алтарь победы книга третья", "book", 3), ("вторая часть Мать", "part", 2),
    ("Гора Звезды глава 12", "chapter", 12), ("Chapter XII of Moby Dick", "chapter", 12),
    ("Сказки об Италии IX", None, 9), ("act five of Hamlet", "act", 5),
])
def test_a_query_names_a_chapter_by_number_word_or_numeral(query, kind, value):
    found = numerals(query)
    assert [(n.kind, n.value) for n in found] == [(kind, value)]
    assert all(w not in strip_numerals(query, found).split() for w in found[0].words)


@pytest.mark.parametrize("query", ["I love you", "Эпилог 1849", "Who did Pechorin kidnap?", "one day in may"])
def test_words_that_only_look_like_numbers_are_not_chapters(query):
    assert numerals(query) == []


def test_headings_fit_the_number_and_what_it_counts():
    assert heading_fits(numerals("Мать глава XV"), "Часть первая › XV")
    assert heading_fits(numerals("Капитанская дочка глава 9"), "ГЛАВА IX. РАЗЛУКА")
    assert heading_fits(numerals("На дне акт третий"), "АКТ ТРЕТИЙ")
    assert not heading_fits(numerals("Алтарь победы книга третья"), "Глава четвертая › III")
    assert heading_fits(numerals("Алтарь победы книга третья"), "Книга третья")
    assert not heading_fits(numerals("Мать глава XV"), "XIV")
    assert roman_value("XLIV") == 44 and roman_value("IIII") is None and roman_value("") is None


def test_the_author_of_a_file_named_author_dash_title():
    from serving.search.titles import author_from_filename, author_matches

    assert author_from_filename("Chekhov - Каштанка.txt") == "Chekhov"
    assert author_from_filename("books/Пушкин - Капитанская дочка.txt") == "Пушкин"
    assert author_from_filename("Bryusov - Теперь, - когда я проснулся....txt") == "Bryusov"
    assert author_from_filename("moby-dick.epub") is None
    assert author_from_filename("A very long description of five words - x.txt") is None
    assert author_matches("Чехов", "Chekhov") and author_matches("A. P. Chekhov", "Chekhov")
    assert author_matches("Conan Doyle", "Arthur Conan Doyle") and not author_matches("Tolstoy", "Chekhov")
