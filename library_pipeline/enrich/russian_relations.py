"""Typed relations of the offline Russian extractor, from natasha's syntax (slovnet's
NewsSyntaxParser, Universal Dependencies relations) between the people and places
natasha's NER found in one sentence. In «Капитанская дочка» the pairs were all
co-occurrence (153 of 157 rows) while the text says «Пугачев спросил Савельича»,
«дочь капитана Миронова, Марья Ивановна», «Швабрин жил в крепости»:

- a verb of speech or dealing with someone, its subject a person and its dative or
  object a person («сказал Марье Ивановне», «спросил Савельича») -> associate_of,
  raw the verb as said;
- a kin or social noun in apposition to a person with a person in the genitive
  («Марья Ивановна, дочь капитана Миронова») -> family_of / associate_of, raw the noun;
- a person the subject of a verb with a place after «в», «на», «из» («жил в
  Оренбурге», «приехал из Симбирска») -> located_in, with a person after «с», «к», «у»
  («возвратилась к Анне Власьевне») -> associate_of, raw the verb and preposition;
  marrying a person after «на» («женился на Марье Ивановне») -> family_of.
"""

from __future__ import annotations

from library_pipeline.enrich.passage_graph import Edge
from library_pipeline.enrich.pronouns import RUSSIAN_PRONOUNS, placeholder
from serving.ontology import KIN_WORDS, SOCIAL_WORDS

# lemmas (pymorphy3 normal forms) of verbs whose dative or object is someone spoken to,
# met or dealt with
SOCIAL_VERBS = {
    "сказать", "говорить", "спросить", "спрашивать", "ответить", "отвечать", "кричать", "закричать", "крикнуть",
    "шепнуть", "шептать", "молвить", "приказать", "приказывать", "объявить", "сказывать", "промолвить",
    "возразить", "продолжать", "повторить", "заметить", "писать", "написать", "велеть", "поклониться",
    "кланяться", "благодарить", "поблагодарить", "позвать", "звать", "призвать", "встретить", "встречать",
    "посетить", "навестить", "обнять", "поцеловать", "целовать", "простить", "помиловать", "пощадить",
    "отпустить", "принять", "угощать", "угостить", "просить", "попросить", "умолять", "допрашивать",
    "допросить", "расспрашивать", "расспросить", "представить", "рекомендовать", "жаловаться", "пожаловаться",
    "грозить", "пригрозить", "подать", "дать", "отдать", "послать", "прислать", "поручить", "доложить",
    "донести", "служить", "послужить", "помогать", "помочь", "обещать", "упрекать", "бранить", "выслушать",
    "слушать", "уговаривать", "уговорить", "учить", "наказать", "прогнать", "обмануть", "жениться",
}
FAMILY_VERBS = {"жениться"}
# verbs of the author's remark after a quotation: «— Помилуй, батюшка Петр Андреич! —
# сказал Савельич»; the name said inside the quotation is the one spoken to
SPEECH_VERBS = {"сказать", "говорить", "отвечать", "ответить", "спросить", "спрашивать", "кричать", "закричать",
                "крикнуть", "шепнуть", "молвить", "промолвить", "возразить", "продолжать", "повторить", "заметить",
                "прервать", "воскликнуть", "подхватить", "сказывать", "примолвить", "отвечать", "вскричать"}
_OPEN = {",", "«", "—", "–", "-", "„", "“", "!"}
_CLOSE = {",", "!", "?", "—", "–", "»", "“", "”", "."}
PLACE_PREPS = {"в", "во", "на", "из", "изо"}
# a person's verb with another person after «с» (with), «к» (to) or «у» (at someone's):
# the two deal with each other; not «про», «о», «от» (talked about, fled from)
WITH_PREPS = {"с", "со", "к", "ко", "у"}
_PERSON, _PLACES = "PER", {"LOC"}


def russian_patterns(tokens, named: list[tuple[object, str, str]], morph, evidence: str,
                     offset: int | None = None) -> list[Edge]:
    """`tokens` natasha tokens of one sentence with morphology and syntax, `named` its
    (span, name, label), the span's start and stop in the tokens' character offsets;
    typed edges as the module docstring lists. With `offset` (the sentence's in its
    passage) a third-person pronoun is an argument too, named by a placeholder that
    pronouns.resolve_edges resolves."""
    tokens = list(tokens)
    by_id = {t.id: t for t in tokens}

    def entity(token):
        if token is None:
            return None
        found = next(((n, lab) for span, n, lab in named if span.start <= token.start < span.stop), None)
        if found is None and offset is not None and token.pos == "PRON" and token.text.lower() in RUSSIAN_PRONOUNS \
                and (token.feats or {}).get("Number") != "Plur":   # «им» is also "to them"
            return placeholder(RUSSIAN_PRONOUNS[token.text.lower()], offset + token.start), _PERSON
        return found

    def children(token, *rels):
        return [t for t in tokens if t.head_id == token.id and t.rel.split(":")[0] in rels]

    def lemma(token) -> str:
        return morph.parse(token.text.lower())[0].normal_form

    edges: list[Edge] = []

    def add(x, raw: str, y, relation: str) -> None:
        if x is None or y is None or x[0].lower() == y[0].lower():
            return
        edges.append(Edge(x[0], x[1], raw, y[0], y[1], evidence, "dependency", relation))

    for token in tokens:
        if token.pos in ("VERB", "AUX"):
            subjects = [entity(t) for t in children(token, "nsubj")]
            subjects = [s for s in subjects if s is not None and s[1] == _PERSON]
            if not subjects:
                continue
            verb = lemma(token)
            if verb in SPEECH_VERBS:
                for y in _addressed(tokens, token, named, morph):
                    for x in subjects:
                        add(x, token.text.lower(), y, "associate_of")
            if verb in SOCIAL_VERBS:
                for t in children(token, "iobj", "obj", "obl"):
                    if t.rel.startswith("obl") and (t.feats.get("Case") != "Dat" or children(t, "case")):
                        continue   # an oblique person with a preposition («про Пугачева») is talked about
                    y = entity(t)
                    if y is not None and y[1] == _PERSON:
                        relation = "family_of" if verb in FAMILY_VERBS else "associate_of"
                        for x in subjects:
                            add(x, token.text.lower(), y, relation)
            for t in children(token, "obl"):
                case = [c.text.lower() for c in children(t, "case")]
                y = entity(t)
                if case and case[0] == "на" and verb in FAMILY_VERBS and y is not None and y[1] == _PERSON:
                    # «Петр Андреевич женился на Марье Ивановне»: «на» before a person is no place
                    for x in subjects:
                        add(x, f"{token.text.lower()} на", y, "family_of")
                elif case and case[0] in PLACE_PREPS and y is not None and y[1] in _PLACES:
                    for x in subjects:
                        add(x, f"{token.text.lower()} {case[0]}", y, "located_in")
                elif case and case[0] in WITH_PREPS and y is not None and y[1] == _PERSON:
                    # «подрался в бане с Устиньей Негулиной», «возвратилась к Анне Власьевне»
                    for x in subjects:
                        add(x, f"{token.text.lower()} {case[0]}", y, "associate_of")
    # «Марья Ивановна, дочь капитана Миронова» / «дочь капитана Миронова, Марья Ивановна»
    for noun in tokens:
        if noun.pos != "NOUN":
            continue
        word = lemma(noun)
        relation = "family_of" if word in KIN_WORDS else "associate_of" if word in SOCIAL_WORDS else None
        if relation is None:
            continue
        head = by_id.get(noun.head_id)
        people = [entity(t) for t in children(noun, "appos")]
        if noun.rel == "appos" and head is not None:
            people.append(entity(head))
        people = [p for p in people if p is not None and p[1] == _PERSON]
        others = []
        previous = tokens[tokens.index(noun) - 1].text.lower() if tokens.index(noun) else ""
        if head is not None and noun.rel.startswith("nmod") and previous in ("с", "со"):
            # «отец Герасим с женою Акулиной Памфиловной»: the noun's person is kin to its head's
            # (the preposition itself, not its attachment: the parser hung that «с» elsewhere)
            others += [entity(head)] + [entity(a) for a in children(head, "appos", "flat")]
        for t in children(noun, "nmod"):
            if t.feats.get("Case") != "Gen" or children(t, "case"):
                continue
            others += [entity(t)] + [entity(a) for a in children(t, "appos", "flat")]
        others = [o for o in others if o is not None and o[1] == _PERSON]
        for x in people:
            for y in others:
                add(x, word, y, relation)
    # one fact once per sentence (a dative read both as the verb's object and as the
    # one spoken to): kg_store counts every edge as a sentence
    unique: dict[tuple, Edge] = {}
    for e in edges:
        unique.setdefault((e.source, e.relation, e.relation_raw, e.target), e)
    return list(unique.values())


def _addressed(tokens, verb, named, morph) -> list[tuple[str, str]]:
    """The person named inside the quotation of a speech verb, as one speaks to someone:
    between a comma, dash or quotation mark (and a form of address such as «батюшка»)
    and a comma, "!", "?" or dash, in the nominative, in the quotation right before the
    verb («— Нет, Петр Андреич, — отвечала Маша») or right after its colon («сказал мне:
    «Эх, Петр Андреич!»). Natasha's parse hangs such names anywhere (appos, parataxis,
    nsubj of the quoted clause), so punctuation decides."""
    position = {t.id: i for i, t in enumerate(tokens)}
    v = position[verb.id]
    found = []
    for span, name, label in named:
        if label != _PERSON:
            continue
        inside = [i for i, t in enumerate(tokens) if span.start <= t.start < span.stop]
        if not inside or v in inside:
            continue
        first, last = inside[0], inside[-1]
        k = first - 1
        while k >= 0 and tokens[k].text.lower() in ("батюшка", "матушка", "сударь", "сударыня", "голубчик",
                                                      "ах", "эх", "ох", "эй", "ну"):
            k -= 1
        before = tokens[k].text if k >= 0 else "—"
        after = tokens[last + 1].text if last + 1 < len(tokens) else "."
        case = tokens[first].feats.get("Case") if tokens[first].feats else None
        if tokens[first].pos != "PROPN":   # «Помилуй» was tagged a person
            continue
        if before not in _OPEN or after not in _CLOSE or case not in (None, "Nom"):
            continue
        between = tokens[last + 1: v] if last < v else tokens[v + 1: first]
        if any(t.pos in ("VERB", "AUX") for t in between):
            continue
        if last < v and not any(t.text in ("—", "–") for t in between):
            continue
        if first > v and not any(t.text == ":" for t in between):
            continue
        found.append((name, label))
    return found
