"""Relations between people read off spaCy's dependency parse of one English sentence:
who speaks to, asks, visits, serves or marries whom. In the example library's novels
the people named in one sentence were related by co-occurrence only (Alice's
Adventures: 45 person pairs, none typed; the Holmes stories: 121), while the text
says outright "the March Hare said to Alice", "Holmes asked Lestrade", "I married
Hatty Doran". A tie is written only between the subject and the object of one verb
of the classes below, both named in the sentence (pronouns are not resolved):

- speech to someone, the addressee as the verb's "to" ("said to Alice"), its direct
  object ("asked Lestrade") or a name said to someone in the quotation the verb
  introduces ("“Ah, Watson,” said Holmes") -> associate_of, raw "said to";
- meeting, visiting, serving, helping, living or going with someone -> associate_of,
  raw the verb with its preposition ("called upon", "lived with");
- marrying or being engaged to -> family_of;
- going to, coming from, arriving at, visiting or leaving a place -> located_in (the
  person was there), raw the verb with its preposition ("came from").

The direction is the text's: the subject (the agent of a passive) towards the object.
"""

from __future__ import annotations

from library_pipeline.enrich.passage_graph import HONORIFIC, Edge
from serving.ontology import KIN_WORDS, SOCIAL_WORDS

# verbs of speech whose addressee is their "to" (or "at", "with"): "said to Alice",
# "shouted at the Hatter", "talked with Holmes"
SPEECH_TO = {"say", "speak", "talk", "reply", "whisper", "cry", "shout", "call", "write", "remark", "explain",
             "repeat", "answer", "add", "complain", "confess", "mutter", "murmur", "telegraph", "wire", "growl",
             "scream", "exclaim", "observe", "continue", "sigh", "nod", "bow", "turn", "sing", "read",
             "chat", "argue", "quarrel", "signal", "beckon", "appeal", "apologise", "apologize",
             "respond", "report", "describe", "mention", "announce", "grumble", "snap", "retort", "plead", "hint"}
SPEECH_PREPS = {"to", "at", "with"}
# verbs whose direct object is someone spoken to, met or served (a tie between the two)
SOCIAL_OBJECT_VERBS = {"ask", "tell", "answer", "thank", "greet", "address", "invite", "introduce", "meet", "visit",
                       "consult", "engage", "hire", "employ", "serve", "help", "assist", "accompany", "join", "warn",
                       "beg", "implore", "entreat", "persuade", "urge", "advise", "summon", "kiss", "embrace",
                       "nurse", "rescue", "question", "interrogate", "interview", "inform", "assure", "promise",
                       "congratulate", "console", "comfort", "welcome", "receive", "await", "interrupt", "scold",
                       "command", "order", "instruct", "bid", "request", "befriend", "escort", "guide", "admit"}
# verb + preposition with someone as its object
SOCIAL_PREP_VERBS = {("call", "on"), ("call", "upon"), ("wait", "on"), ("wait", "upon"), ("work", "for"),
                     ("work", "with"), ("live", "with"), ("stay", "with"), ("lodge", "with"), ("board", "with"),
                     ("dine", "with"), ("walk", "with"), ("go", "with"), ("come", "with"), ("travel", "with"),
                     ("play", "with"), ("dance", "with"), ("sit", "with"), ("deal", "with"), ("correspond", "with"),
                     ("consult", "with"), ("plead", "with"), ("reason", "with"), ("listen", "to"), ("go", "to"),
                     ("come", "to"), ("hurry", "to"), ("apply", "to"), ("return", "to"), ("send", "to"),
                     ("hand", "to"), ("give", "to"), ("show", "to"), ("introduce", "to"), ("present", "to"),
                     ("turn", "to"), ("hear", "from"), ("part", "from")}
# a person who goes to, comes from or arrives at a place was there: "Holmes came back
# from Baker Street", "John Turner ... came from Australia" (located_in, raw "came from")
MOTION_VERBS = {"go", "come", "return", "travel", "drive", "arrive", "walk", "run", "ride", "sail", "move", "fly",
                "hurry", "journey", "proceed", "set", "start", "get", "escape", "flee", "emigrate", "retire", "hasten",
                "rush", "wander", "settle", "work", "spend", "meet", "remain", "stop", "call", "live", "stay", "dwell",
                "reside", "lodge", "be", "sleep", "dine", "wait", "sit", "stand", "lie"}
# (not "towards" or "near": one heading for a place or near it is not there)
MOTION_PREPS = {"to", "from", "at", "into", "in", "through", "round", "around"}
PLACE_OBJECT_VERBS = {"visit", "reach", "leave", "enter", "quit", "tour", "inhabit", "occupy"}
PLACE_LABELS = {"GPE", "LOC", "FAC"}
FAMILY_VERBS = {"marry", "wed"}
FAMILY_PREP_VERBS = {("engage", "to"), ("marry", "to"), ("betroth", "to")}
# labels a person may carry: the small model calls Alice's creatures organisations and
# works ("the Gryphon" ORG, "the Mock Turtle" WORK_OF_ART) unless they speak
PERSONLIKE = {"PERSON", "ORG", "WORK_OF_ART", "NORP", "PRODUCT", "EVENT", "LAW"}
# quotation marks and dashes around a name said to someone
_OPENERS = {"“", "‘", '"', "'", ",", "—", "–", "-", "!", "?", "("}
_QUOTES = {"“", "”", "‘", "’", '"', "'"}
# nouns a name after a comma renames rather than is said to ("This is my friend, Dr. Watson")
_INTRODUCED = {"name", "man", "woman", "gentleman", "lady", "girl", "boy", "fellow", "person"}
_ARGUMENTS = {"nsubj", "nsubjpass", "dobj", "dative", "agent", "attr"}
_CLOSERS = {",", "!", "?", ".", "”", "’", '"', "'", "—", "–", ";", ":"}


def _with_conjuncts(token) -> list:
    return [token, *token.conjuncts] if token is not None else []


def people_patterns(sent, spans, names, evidence: str, entity_of) -> list[Edge]:
    """associate_of / family_of between the subject and the object of one verb (see the
    module docstring); `entity_of(token, spans)` is the span a token is part of."""
    edges: list[Edge] = []

    def person(token, labels=("PERSON",)):
        span = entity_of(token, spans) if token is not None else None
        if span is None or token.i != span.root.i:
            return None
        return span if names[id(span)][1] in labels else None

    def add(x, raw: str, y, relation: str) -> None:
        if x is None or y is None or x is y:
            return
        (xn, xl), (yn, yl) = names[id(x)], names[id(y)]
        if xn.lower() != yn.lower():
            edges.append(Edge(xn, xl, raw, yn, yl, evidence, "dependency", relation))

    for verb in sent:
        if verb.pos_ not in ("VERB", "AUX"):
            continue
        lemma = verb.lemma_.lower()
        subjects = [s for c in verb.children if c.dep_ == "nsubj" for s in _with_conjuncts(c)]
        own_subject = bool(subjects)
        if not subjects and verb.dep_ == "conj":   # "the Queen left off ... and said to Alice"
            subjects = [s for c in verb.head.children if c.dep_ == "nsubj" for s in _with_conjuncts(c)]
        objects = [o for c in verb.children if c.dep_ == "dobj" for o in _with_conjuncts(c)]
        agent = next((c for c in verb.children if c.dep_ == "agent"), None)
        if agent is not None:   # "Holmes was consulted by Hatty Doran": the agent acts
            objects = [o for c in verb.children if c.dep_ == "nsubjpass" for o in _with_conjuncts(c)]
            subjects = [s for c in agent.children if c.dep_ == "pobj" for s in _with_conjuncts(c)]
        if lemma in FAMILY_VERBS and agent is None:   # "Mr. Fowler and Miss Rucastle were married": each other
            couple = [x for x in map(person, (o for c in verb.children if c.dep_ == "nsubjpass"
                                              for o in _with_conjuncts(c))) if x is not None]
            if len(couple) == 2:
                add(couple[0], verb.lower_, couple[1], "family_of")
        xs = [x for x in map(person, subjects) if x is not None]
        if not xs:
            continue
        preps = [(p.lower_, o) for p in verb.children if p.dep_ in ("prep", "dative")
                 for c in p.children if c.dep_ == "pobj" for o in _with_conjuncts(c)]
        ties: list[tuple[str, object, str]] = []
        if lemma in FAMILY_VERBS:
            ties += [(verb.lower_, person(o), "family_of") for o in objects]
        if lemma in SOCIAL_OBJECT_VERBS:
            ties += [(verb.lower_, person(o), "associate_of") for o in objects]
        for prep, o in preps:
            if (lemma, prep) in FAMILY_PREP_VERBS:
                ties.append((f"{verb.lower_} {prep}", person(o), "family_of"))
            elif lemma in SPEECH_TO and prep in SPEECH_PREPS:
                # the one spoken to is someone whatever the tagger called it ("to the Caterpillar")
                ties.append((f"{verb.lower_} {prep}", person(o, PERSONLIKE), "associate_of"))
            elif (lemma, prep) in SOCIAL_PREP_VERBS:
                ties.append((f"{verb.lower_} {prep}", person(o), "associate_of"))
        for prep, o in preps:
            if lemma in MOTION_VERBS and prep in MOTION_PREPS:
                ties.append((f"{verb.lower_} {prep}", person(o, PLACE_LABELS), "located_in"))
        if lemma in PLACE_OBJECT_VERBS:
            ties += [(verb.lower_, person(o, PLACE_LABELS), "located_in") for o in objects]
        if lemma in SPEECH_TO and own_subject:   # ("and called out to her ... “Why, Mary Ann" was the Rabbit's)
            # a name said in the quotation must be a person's to the tagger: a chapter title
            # before a cry ("The Pool of Tears “Curiouser and curiouser!” cried Alice") is a work
            ties += [(f"{verb.lower_} to", y, "associate_of") for y in _addressed(sent, verb, spans)
                     if names[id(y)][1] == "PERSON"]
        for raw, y, relation in ties:
            for x in xs:
                add(x, raw, y, relation)
    return edges


def _addressed(sent, verb, spans) -> list:
    """Names said to someone in the quotation a speech verb introduces: "“Ah, Watson,”
    said Holmes", "“It’s no use, John Clay,” said Holmes". The name is a proper noun
    between a quotation mark or a comma and a comma, "!" or "?", neither the verb's
    subject nor its object, in the quotation right before the verb or right after its
    clause. Over the example library each condition below removed a wrong row: a
    chapter title's cry ("The Pool of Tears “Curiouser and curiouser!” cried Alice"), a name
    in a second quotation after another verb ("replied, counting off the subjects ...
    “—Mystery, ancient and modern"), an introduction ("the girl’s stepfather, Mr.
    James Windibank")."""
    found = []
    doc = sent.doc
    for span in spans:
        if span.start <= verb.i < span.end or (span.root.head.i == verb.i and span.root.dep_ in _ARGUMENTS):
            continue
        if span.root.pos_ != "PROPN" or span[-1].is_punct or span.root.dep_ not in ("npadvmod", "intj", "dep", "appos", "ROOT", "advmod"):
            continue
        start = span.start
        while start > sent.start and HONORIFIC.match(doc[start - 1].text + " X"):   # "Mr. [Holmes]"
            start -= 1
        before = doc[start - 1].text if start > sent.start else ""
        after = doc[span.end].text if span.end < sent.end else ""
        if before not in _OPENERS or after not in _CLOSERS:
            continue
        named_before = doc[start - 2] if start - 2 >= sent.start and before == "," else None
        if named_before is not None and named_before.lemma_.lower() in KIN_WORDS | SOCIAL_WORDS | _INTRODUCED:
            continue
        between = doc[span.end: verb.i] if span.end <= verb.i else doc[verb.i + 1: start]
        quotes = [t for t in between if t.text in _QUOTES]
        if len(quotes) != 1 or any(t.pos_ in ("VERB", "AUX") for t in between):
            continue
        found.append(span)
    return found
