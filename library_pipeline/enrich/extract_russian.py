"""Russian extraction: natasha NER (PER / LOC / ORG) with names lemmatised to the
nominative by pymorphy3 ("Гринёва" and "Гринёвым" are one node), plus co-occurrence.
natasha's own MorphVocab needs pymorphy2, which imports pkg_resources and
inspect.getargspec and so fails on Python 3.11 with current setuptools; pymorphy3 is
its maintained fork with the same API.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from library_pipeline.enrich.passage_graph import (
    HONORIFIC,
    NOT_NAMES,
    RANKS,
    Edge,
    PassageGraph,
    clean_name,
    cooccur,
    person_name,
    rank_of,
    tidy_person,
    typed_over_cooccurrence,
)
from library_pipeline.enrich.pronouns import RUSSIAN_PRONOUNS, PassagePeople, resolve_edges
from library_pipeline.enrich.russian_relations import russian_patterns

_WORDS = re.compile(r"[А-Яа-яЁё]+")

_LOCK = threading.Lock()
_MODELS: dict[str, object] = {}


def natasha_models():
    with _LOCK:
        if "ru" not in _MODELS:
            import pymorphy3
            from natasha import NewsEmbedding, NewsMorphTagger, NewsNERTagger, NewsSyntaxParser, Segmenter

            embedding = NewsEmbedding()
            _MODELS["ru"] = (Segmenter(), NewsNERTagger(embedding), pymorphy3.MorphAnalyzer(lang="ru"),
                             NewsMorphTagger(embedding), NewsSyntaxParser(embedding))
        return _MODELS["ru"]


_NAME_TAGS = ("Name", "Surn", "Patr", "Geox", "Orgn", "Trad")


_NOT_NAME_POS = {"ADJF", "ADJS", "ADVB", "CONJ", "PRCL", "PREP", "INTJ", "NPRO", "PRED", "NOUN", "VERB", "INFN"}


def without_lead_words(name: str, morph) -> str:
    """A person span without the common words natasha took in at a sentence start:
    «Бедная Марья Ивановна», «Тут Василиса Егоровна», «Прачка Палашка» (each had
    become a person of its own, and «Бедная Марья Ивановна» then absorbed «Марья
    Ивановна», 157 mentions). A word goes when no parse of it is a first name, surname
    or patronymic and its likeliest parse is an adjective, adverb, particle, common noun..."""
    words = name.split()
    while len(words) > 1 and re.fullmatch(r"[А-ЯЁа-яё]+", words[0]):
        parses = morph.parse(words[0])
        if any(t in p.tag for p in parses for t in ("Name", "Surn", "Patr")) or parses[0].tag.POS not in _NOT_NAME_POS:
            break
        words = words[1:]
    return " ".join(words)


def _verb_said_as_name(name: str, morph) -> bool:
    """One capitalised word natasha called a person that is a verb or an adverb and no
    name: the imperative opening a line of dialogue («— Дочитывай, — сказал Пугачев»,
    «Помилуй», «Береги», «Сжалься»: 14 such "people" in «Капитанская дочка», each
    lemmatised to a participle and related to whoever spoke). Gerund-like nicknames
    («Хлопуша») stay."""
    if " " in name or not re.fullmatch(r"[А-ЯЁа-яё]+", name):
        return False
    parses = morph.parse(name)
    if any(t in p.tag for p in parses for t in ("Name", "Surn", "Patr")):
        return False
    return parses[0].tag.POS in ("VERB", "INFN", "ADVB")


def lemmatise_russian(name: str, morph) -> str:
    """Each word to the nominative, keeping gender and number: «Белогорской
    крепости» -> «Белогорская крепость», «Гринёвым» -> «Гринёв»."""
    words = []
    # the first name decides the gender of the surname: «Маша Миронова» is not «Миронов»
    gender = None
    for word in name.split():
        first = next((p for p in morph.parse(word) if "Name" in p.tag), None)
        if first is not None:
            gender = first.tag.gender
            break
    # a name whose last word is declined («Анне Власьевне») is declined throughout: the
    # indeclinable reading of «Анне» (a name of its own to pymorphy3) had kept «Анне
    # Власьевна» apart from «Анна Власьевна»
    last = next((p for p in morph.parse(name.split()[-1]) if any(t in p.tag for t in _NAME_TAGS)), None)
    declined = len(name.split()) > 1 and last is not None and "nomn" not in last.tag
    for word in name.split():
        if not re.search(r"[А-Яа-яЁё]", word):
            words.append(word)
            continue
        parses = morph.parse(word)
        named = [p for p in parses if any(t in p.tag for t in _NAME_TAGS)]
        if declined:
            named = [p for p in named if "Fixd" not in p.tag] or named
        named = [p for p in named if p.tag.number != "plur"] or named  # «Швабрин», not «Швабрины»
        if gender is not None:
            named = [p for p in named if p.tag.gender in (gender, None)] or named
        elif len(name.split()) == 1:
            # a lone surname in an oblique case: «Пугачева», «Швабрина» are the genitive of
            # «Пугачев», «Швабрин», not a woman's nominative (measured on «Капитанская
            # дочка»: 55 and 32 mentions had split off as separate people). Women in
            # such prose are named by first name and patronymic, which keep their gender.
            named = [p for p in named if p.tag.gender == "masc"] or named
        best = named[0] if named else parses[0]
        inflected = best.inflect({"nomn"}) if "nomn" not in best.tag else best
        form = inflected.word if inflected is not None else word.lower()
        words.append(form[:1].upper() + form[1:] if word[:1].isupper() else form)
    return " ".join(words)


@dataclass
class _Offsets:
    """A span's characters within its sentence."""
    start: int
    stop: int


def russian_graphs(texts: list[str]) -> list[PassageGraph]:
    from natasha import Doc

    segmenter, tagger, morph, morph_tagger, syntax = natasha_models()
    out = []
    surnames: dict[str, str | None] = {}   # shared by the call's passages (pronouns.PassagePeople)
    for text in texts:
        graph = PassageGraph()
        doc = Doc(text)
        doc.segment(segmenter)
        doc.tag_ner(tagger)
        people = PassagePeople(surnames)
        for number, sent in enumerate(doc.sents):
            named = []
            spans = []
            for span in doc.spans:
                if span.start >= sent.start and span.stop <= sent.stop:
                    name, label = clean_name(span.text), span.type
                    form_said = HONORIFIC.match(name) if name else None
                    addressed = person_name(name) if name else None
                    if addressed:
                        name, label = addressed, "PER"
                    if name and label == "PER":
                        name = tidy_person(name)
                        name = without_lead_words(name, morph) if name else None
                    if name and _verb_said_as_name(name, morph):
                        continue
                    if name:
                        name = lemmatise_russian(name, morph)
                        if name.lower() in NOT_NAMES:
                            continue
                        named.append((name, label))
                        spans.append((span, name, label))
                        graph.mentions[(name, label)] += 1
                        rank = rank_of(form_said)
                        before = re.search(r"([А-Яа-яЁё]+)\s+$", text[max(0, span.start - 30):span.start])
                        if rank is None and before:   # natasha leaves the rank out of the span
                            rank = RANKS.get(morph.parse(before.group(1).lower())[0].normal_form)
                        if rank and label == "PER" and not HONORIFIC.match(name):
                            # «капитан Миронов»: a rank said as a form of address types the person
                            graph.edges.append(Edge(name, label, "form of address", rank, "concept",
                                                    sent.text.strip()[:500], "pattern", "type_of"))
            for span, name, label in spans:
                people.add(number, span.start, name, label)
            pronoun = any(w.lower() in RUSSIAN_PRONOUNS for w in _WORDS.findall(sent.text))
            if len(spans) > 1 or (spans and pronoun):
                # the parse serves relations between named things (or a name and a
                # pronoun) only: parsing just the sentences naming two kept the Russian
                # extraction at about twice the time of NER alone, not three times; with
                # a name and a pronoun «Капитанская дочка» has 460 such sentences of
                # 3,992 (164 naming two)
                parsed = Doc(sent.text)
                parsed.segment(segmenter)
                parsed.tag_morph(morph_tagger)
                parsed.parse_syntax(syntax)
                local = [(_Offsets(span.start - sent.start, span.stop - sent.start), n, lab) for span, n, lab in spans]
                edges = russian_patterns(parsed.tokens, local, morph, sent.text.strip()[:500], sent.start)
                graph.edges.extend(resolve_edges(edges, people, number))
            cooccur(graph, named, sent.text.strip()[:500])
        out.append(typed_over_cooccurrence(graph))
    return out
