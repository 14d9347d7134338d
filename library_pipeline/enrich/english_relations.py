"""Relations of the offline English extractor, read off spaCy's dependency parse of one
sentence between the entities extract_english found in it: "X, written by Y" ->
created_by, "X is a kind of Y" and descriptions -> type_of, kin and social nouns ->
family_of / associate_of, places and organisations -> located_in / part_of, and
subject-verb-object with a verb class (uses, depends_on, implements, located_in).
Split from extract_english (which finds and names the entities) to keep each module
under 400 lines.
"""

from __future__ import annotations

from library_pipeline.enrich.english_people import people_patterns
from library_pipeline.enrich.passage_graph import HONORIFIC, Edge, clean_name
from serving.ontology import KIN_WORDS, SOCIAL_WORDS, relation_type

CREATED_VERBS = {"write", "author", "create", "compose", "paint", "found", "develop", "design", "invent",
                 "publish", "build", "make"}
KIND_WORDS = {"kind", "type", "sort", "form", "variety", "species", "instance"}
# The subject of a verb of speech or thought is someone: "said the Gryphon" made the
# small English model's ORG a person vote (Alice's Adventures: Gryphon, Dormouse,
# Duchess and Caterpillar were organisations, the King a place).
SPEECH_VERBS = {"say", "reply", "ask", "cry", "exclaim", "shout", "whisper", "remark", "answer", "think",
                "continue", "add", "repeat", "interrupt", "observe", "growl", "sigh", "scream", "call", "begin",
                "explain", "murmur", "laugh", "smile", "nod"}
# verb classes for subject-verb-object between two entities; the lemma alone decides
# (relation_type maps only third-person forms such as "requires")
VERB_CLASSES = {"use": "uses", "employ": "uses", "utilize": "uses", "utilise": "uses", "wield": "uses",
                "require": "depends_on", "need": "depends_on", "implement": "implements"}
PREP_VERB_CLASSES = {("depend", "on"): "depends_on", ("rely", "on"): "depends_on", ("rely", "upon"): "depends_on",
                     ("depend", "upon"): "depends_on", ("work", "for"): "associate_of"}
# verbs that put their subject somewhere: "Holmes lives in Baker Street", "was in France"
STAY_VERBS = {"live", "reside", "dwell", "stay", "lodge", "be", "settle", "remain"}
PLACE_LABELS = {"GPE", "LOC", "FAC"}
# nouns too vague to type anything: "Holmes is a man", "a disappointment", "such an offer"
# (the wrong or empty type_of rows of a first run over the Holmes stories)
VAGUE_NOUNS = {"man", "woman", "thing", "one", "person", "fellow", "creature", "lot", "bit", "deal", "matter",
               "way", "time", "case", "word", "something", "nothing", "anything", "fact", "part", "kind", "sort",
               "type", "number", "couple", "pair", "factor", "myth", "money", "experience", "idea", "little", "good",
               "great", "few", "piece", "moment", "day", "place", "name", "sign", "question", "lady", "gentleman",
               "people", "boy", "girl", "child"}


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


def is_form(token) -> bool:
    return bool(HONORIFIC.match(token.text + " X")) and token.text[:1].isupper()


def form_before(span) -> str | None:
    """The form of address just before a span the tagger cut without it: "Lord" in
    "Lord [St. Simon]", "Miss" in "Miss [Turner]"."""
    doc, i = span.doc, span.start - 1
    if i >= 0 and doc[i].text == "." and i >= 1 and is_form(doc[i - 1]):
        return doc[i - 1].text + "."
    if i >= 0 and is_form(doc[i]):
        return doc[i].text
    return None



def _role_noun(token) -> str:
    """The head noun of a description with its compounds, lower case, as a concept name:
    "a pawnbroker" -> "pawnbroker", "a bank clerk" -> "bank clerk"; adjectives go."""
    words = [c for c in token.lefts if c.dep_ == "compound" and c.pos_ in ("NOUN", "PROPN")] + [token]
    return " ".join(w.lemma_.lower() if w is token else w.text.lower() for w in words)


def _of_object(token):
    prep = next((c for c in token.children if c.dep_ == "prep" and c.lower_ == "of"), None)
    return next((c for c in prep.children if c.dep_ == "pobj"), None) if prep is not None else None


def _tie(noun, subject_entity, other_entity, names, evidence) -> Edge | None:
    """"X, the son of Y" / "X is Y's son" / "Y's son X": X family_of (or associate_of) Y,
    raw label "son of"."""
    word = noun.lemma_.lower()
    relation = "family_of" if word in KIN_WORDS or noun.lower_ in KIN_WORDS else (
        "associate_of" if word in SOCIAL_WORDS else None)
    if relation is None or subject_entity is None or other_entity is None or subject_entity is other_entity:
        return None
    (xn, xl), (yn, yl) = names[id(subject_entity)], names[id(other_entity)]
    # the kin of a person is a person whatever the tagger called the name: "the only
    # daughter of [Aloysius Doran]" was an organisation in the Holmes stories' passage
    other_labels = ("PERSON", "ORG", "WORK_OF_ART", "PRODUCT") if relation == "family_of" else ("PERSON",)
    if xl != "PERSON" or yl not in other_labels or xn.lower() == yn.lower():
        return None
    return Edge(xn, xl, f"{noun.lower_} of", yn, yl, evidence, "pattern", relation)


def _vocative(span, kind: str) -> bool:
    """A name said to someone mid-sentence ("You may imagine, Mr. Holmes, that ..."):
    what follows it describes the speaker's matter, not the name."""
    doc, start = span.doc, span.start
    if form_before(span):   # "Mr. [Holmes]": the form is part of what was said
        start -= 2 if doc[start - 1].text == "." else 1
    return start > span.sent.start and doc[start - 1].text in (",", "—", "-") and kind == "PERSON"


def english_patterns(sent, named, evidence: str) -> list[Edge]:
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
    edges.extend(_typed_patterns(sent, spans, names, evidence))
    edges.extend(people_patterns(sent, spans, names, evidence, _entity_of))
    # one fact once per sentence: "Dr. Roylott was in India" is read both as a person's
    # verb "in" a place and as a stay, and kg_store counts every edge as a sentence
    unique: dict[tuple, Edge] = {}
    for e in edges:
        unique.setdefault((e.source, e.relation, e.relation_raw, e.target), e)
    return list(unique.values())


def _typed_patterns(sent, spans, names, evidence: str) -> list[Edge]:
    """Typed relations from the parse, each between the entities the sentence names (a
    type_of target is the description's noun, a concept):

    - apposition and copula: "Mr. Jabez Wilson, a pawnbroker" / "X is a pawnbroker" ->
      type_of; with a kin or social noun and a named other person: "James McCarthy is
      the son of Charles McCarthy", "Alexander Holder's son Arthur" -> family_of /
      associate_of (raw "son of");
    - "X of Y" / "X in Y" / "X at Y" for places and organisations: a person or place
      with a place -> located_in, with an organisation -> part_of (raw: the preposition);
      "Y's X" for a place or organisation X of a place or organisation Y -> part_of;
    - subject-verb-object with a verb class: uses / depends_on / implements, and the
      verbs that place their subject ("lives in", "was in France") -> located_in.
    """
    edges: list[Edge] = []

    def ent(token):
        return _entity_of(token, spans) if token is not None else None

    def label(span):
        return names[id(span)][1] if span is not None else None

    def add(x, raw, y, relation, extractor="pattern"):
        if x is None or y is None or x is y:
            return
        (xn, xl), (yn, yl) = names[id(x)], names[id(y)]
        if xn.lower() != yn.lower():
            edges.append(Edge(xn, xl, raw, yn, yl, evidence, extractor, relation))

    def described(x, noun, raw, article=("a", "an")):
        """x type_of noun, or a kin / social tie when the noun names the other person."""
        if x is None or noun.pos_ != "NOUN":
            return
        other = ent(_of_object(noun))
        if other is None:
            owner = next((c for c in noun.children if c.dep_ == "poss"), None)
            other = ent(owner)
        tie = _tie(noun, x, other, names, evidence)
        if tie is not None:
            edges.append(tie)
            return
        det = next((c.lower_ for c in noun.children if c.dep_ == "det"), None)
        word = _role_noun(noun)
        if det == "the" and (names[id(x)][1] != "PERSON" or sent.text.rstrip().rstrip("”’\"'").endswith(("!", "?"))):
            # "Holmes, the money!", "Aldershot, the little red roofs": a definite noun after a
            # place or in an exclamation is a list or a cry more often than a description
            return
        if noun.lemma_.lower() in KIN_WORDS:
            return   # "the only son of the deceased": kin needs the other person named
        if det in article and noun.lemma_.lower() not in VAGUE_NOUNS and word.isascii() and len(word) > 2:
            xn, xl = names[id(x)]
            edges.append(Edge(xn, xl, raw, word, "concept", evidence, "pattern", "type_of"))

    for token in sent:
        span = ent(token)
        is_root = span is not None and token.i == span.root.i
        # "X, a Y" / "Y's son X" (X the apposition of a kin noun)
        if token.dep_ == "appos":
            head_span = ent(token.head)
            if is_root and token.head.pos_ == "NOUN" and head_span is None:
                owner = ent(next((c for c in token.head.children if c.dep_ == "poss"), None))
                tie = _tie(token.head, span, owner, names, evidence)
                if tie is not None:
                    edges.append(tie)
            elif head_span is not None and token.head.i == head_span.root.i and span is None \
                    and token.left_edge.i - head_span.end <= 1 and not _vocative(head_span, label(head_span)):
                # the description right after the name ("John Horner, a plumber"), not a
                # clause later in the sentence: the parser hung "such an offer" on "Mr.
                # Holmes" in "You may imagine, Mr. Holmes, that to me ... such an offer"
                described(head_span, token, "apposition", ("a", "an", "the"))
        # "X is a Y" / "X is the son of Y"
        if token.dep_ == "attr" and token.head.lemma_ == "be":
            subject = ent(next((c for c in token.head.children if c.dep_ == "nsubj"), None))
            if subject is not None and span is None:
                described(subject, token, "is a")
        # "a salesman named Breckinridge": Breckinridge type_of salesman
        if is_root and token.dep_ == "oprd" and token.head.lemma_ in ("name", "call") and token.head.dep_ == "acl":
            described(span, token.head.head, token.head.lower_, ("a", "an"))
        if not is_root:
            continue
        kind = label(span)
        # "X of Y", "X in Y", "X at Y": the preposition hangs on X's head word
        for prep in (c for c in token.children if c.dep_ == "prep" and c.lower_ in ("of", "in", "at")):
            y = ent(next((c for c in prep.children if c.dep_ == "pobj"), None))
            if y is None or y is span:
                continue
            ykind = label(y)
            if ykind in PLACE_LABELS and kind in PLACE_LABELS | {"PERSON", "ORG"}:
                add(span, prep.lower_, y, "located_in")
            elif ykind == "ORG" and kind in ("PERSON", "ORG") and prep.lower_ == "of":
                add(span, prep.lower_, y, "part_of")
        # "Ross, in Herefordshire" is handled above; "Jakarta, Indonesia": a place in apposition
        # to a place names where the first lies
        if kind in PLACE_LABELS and token.dep_ in ("appos", "npadvmod") and token.head.i != token.i:
            head_span = ent(token.head)
            if head_span is not None and token.head.i == head_span.root.i and label(head_span) in PLACE_LABELS \
                    and token.i > head_span.end - 1 and token.i - head_span.end <= 1:
                add(head_span, ",", span, "located_in")
        # "Y's X" for places and organisations
        owner = ent(next((c for c in token.children if c.dep_ == "poss"), None))
        if owner is not None and kind in PLACE_LABELS | {"ORG"} and label(owner) in PLACE_LABELS | {"ORG"}:
            add(span, "'s", owner, "part_of")
        # subject of a verb class
        if token.dep_ == "nsubj" and token.head.pos_ in ("VERB", "AUX"):
            verb = token.head
            lemma = verb.lemma_.lower()
            if lemma in VERB_CLASSES:
                y = ent(next((c for c in verb.children if c.dep_ == "dobj"), None))
                # relation_type already typed this one in english_patterns
                if relation_type(lemma) == "related_to":
                    add(span, verb.lower_, y, VERB_CLASSES[lemma], "dependency")
            for prep in (c for c in verb.children if c.dep_ == "prep"):
                y = ent(next((c for c in prep.children if c.dep_ == "pobj"), None))
                if y is None:
                    continue
                if (lemma, prep.lower_) in PREP_VERB_CLASSES and label(y) in {"PERSON", "ORG"} | PLACE_LABELS:
                    add(span, f"{verb.lower_} {prep.lower_}", y, PREP_VERB_CLASSES[(lemma, prep.lower_)], "dependency")
                elif prep.lower_ in ("in", "at") and label(y) in PLACE_LABELS \
                        and kind in PLACE_LABELS | {"PERSON", "ORG"} \
                        and (lemma in STAY_VERBS or (kind == "PERSON" and prep.lower_ == "in")):
                    # a person doing anything in a place was there: "Holmes sat in his chair in
                    # Baker Street" (the subject, not the object, is placed)
                    add(span, f"{verb.lower_} {prep.lower_}", y, "located_in", "dependency")
    return edges
