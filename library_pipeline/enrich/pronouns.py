"""Third-person pronouns as arguments of the typed patterns between people and places.

Most sentences that relate two people name only one of them: "Arthur caught him",
"Miss Turner, his daughter", «Пугачев спросил его». A pronoun subject or object of a
speech or social verb, of a kin noun, of marriage or of a place stands for the person
mentioned most recently before it in the same passage whose gender agrees and who is
not the pattern's other argument. No row when nobody agrees, or when two such people
are named in the previous sentence and this one up to the pronoun (a reader could not
tell either). The row keeps its raw label, direction and evidence sentence; only its
pronoun end becomes the name.

The extractors give a pronoun a placeholder name (`placeholder`) while they read the
parse, and `resolve_edges` turns each edge's placeholder into a name or drops the edge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from library_pipeline.enrich.gender import _morph, first_name_gender, name_gender
from library_pipeline.enrich.passage_graph import Edge
from serving.ontology import RELATION_TYPES, relation_type

ENGLISH_PRONOUNS = {"he": "m", "him": "m", "his": "m", "she": "f", "her": "f"}
# with a preposition Russian says «к нему», «с ним», «у него», «о ней»: the same pronouns
RUSSIAN_PRONOUNS = {"он": "m", "его": "m", "ему": "m", "им": "m", "нём": "m", "нем": "m", "него": "m",
                    "нему": "m", "ним": "m", "она": "f", "её": "f", "ее": "f", "ей": "f", "ней": "f", "нее": "f",
                    "неё": "f", "ею": "f", "нею": "f"}
# the typed patterns a pronoun may stand in: people dealing with people, kin and marriage,
# a person's place; a description ("He is a plumber") and the rest stay named-only
PRONOUN_RELATIONS = {"associate_of", "family_of", "located_in"}
PERSON_LABELS = {"PERSON", "PER"}
_MARK = "\x00"


def placeholder(gender: str, offset: int) -> str:
    """The name a pronoun carries until resolve_edges: its gender and character offset
    in the passage."""
    return f"{_MARK}{gender}{offset}"


def is_placeholder(name: str) -> bool:
    return name.startswith(_MARK)


def _parse(name: str) -> tuple[str, int]:
    return name[1], int(name[2:])


def _norm(name: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", name.lower().replace("ё", "е")).split())


def _single_word_gender(word: str) -> str | None:
    """A lone name's gender for agreement with a pronoun: a Russian first name, surname
    or patronymic by its morphology («Маша», «Миронова», «Савельич»), an English first
    name by the census ("Alice"). Merges never read a lone word so ("Hunter" is Violet
    Hunter's surname); a pronoun's agreement only narrows whom it may stand for."""
    if re.search(r"[а-я]", word):
        tags = [p.tag for p in _morph().parse(word) if p.score >= 0.1
                and any(t in p.tag for t in ("Name", "Surn", "Patr"))]
        genders = {t.gender for t in tags} - {None}
        return {"masc": "m", "femn": "f"}.get(genders.pop()) if len(genders) == 1 else None
    return first_name_gender(word)


# a name that is a title or a kinship word says its gender ("the Queen", "the Duchess",
# "the King of Hearts", «Императрица»), else of unknown gender it blocks every pronoun
# after it; one row more on the example library («Государыня ласково к ней обратилась»)
GENDERED_HEADS = {
    "m": {"king", "duke", "prince", "emperor", "father", "brother", "uncle", "son", "boy", "man", "gentleman",
          "knave", "count", "earl", "baron", "bishop", "archbishop", "pope", "император", "государь", "царь",
          "король", "князь", "граф", "отец", "батюшка", "дядя", "сын", "брат"},
    "f": {"queen", "duchess", "princess", "empress", "mother", "sister", "aunt", "daughter", "girl", "woman",
          "countess", "императрица", "государыня", "царица", "королева", "княгиня", "графиня", "мать", "матушка",
          "тетя", "тётя", "дочь", "сестра"},
}


def _head_gender(words: list[str]) -> str | None:
    for gender, heads in GENDERED_HEADS.items():
        if words and words[0] in heads:
            return gender
    return None


def learn_surnames(said: dict[str, str | None], name: str) -> None:
    """Record the gender a full name or a gendered form gives its last word ("Mr. Holmes":
    holmes is a man), None once two genders were said ("Mr. Turner", "Miss Turner")."""
    words = _norm(name).split()
    gender = name_gender(" ".join(words)) if len(words) > 1 else None
    if gender:
        said[words[-1]] = gender if said.get(words[-1], gender) == gender else None


@dataclass
class PassagePeople:
    """The people a passage has named so far, in order, for its pronouns. `surnames` is
    shared by the passages of one extraction call: the gender each last word had in a
    gendered name said before ("Holmes", the stories' most named man, has no first name
    the census knows and is "Mr. Holmes" only in some passages)."""
    surnames: dict[str, str | None] = field(default_factory=dict)
    mentions: list[tuple[int, int, str, str]] = field(default_factory=list)   # (sentence, offset, name, label)
    _genders: dict[str, str | None] = field(default_factory=dict)

    def add(self, sentence: int, offset: int, name: str, label: str) -> None:
        if label in PERSON_LABELS:
            self.mentions.append((sentence, offset, name, label))
            learn_surnames(self.surnames, name)

    def gender(self, name: str) -> str | None:
        if name not in self._genders:
            norm = _norm(name)
            said = name_gender(norm) or _head_gender(norm.split()) or (
                _single_word_gender(norm) if " " not in norm else None)
            if said is None and " " not in norm:
                said = self.surnames.get(norm)
            self._genders[name] = said
        return self._genders[name]

    def resolve(self, pronoun: str, sentence: int, exclude: set[str]) -> tuple[str, str] | None:
        gender, offset = _parse(pronoun)
        before = [m for m in self.mentions if m[1] < offset and m[2].lower() not in exclude
                  and self.gender(m[2]) in (gender, None)]
        if not before:
            return None
        near = {m[2].lower() for m in before if m[0] >= sentence - 1}
        if len(near) > 1:
            return None
        last = max(before, key=lambda m: m[1])
        if self.gender(last[2]) is None:
            # a name of unknown gender blocks the names before it but is not taken: "she"
            # had become "Sherlock Holmes" ("Do you mean that she has left England?")
            return None
        return last[2], last[3]


def resolve_edges(edges: list[Edge], people: PassagePeople, sentence: int) -> list[Edge]:
    """Edges with each pronoun end named (see the module docstring), or left out."""
    out = []
    for e in edges:
        if not (is_placeholder(e.source) or is_placeholder(e.target)):
            out.append(e)
            continue
        canonical = e.relation if e.relation in RELATION_TYPES else relation_type(e.relation_raw)
        if canonical not in PRONOUN_RELATIONS:
            continue
        source, target = (e.source, e.source_type), (e.target, e.target_type)
        if is_placeholder(source[0]):
            source = people.resolve(source[0], sentence, set() if is_placeholder(target[0]) else {target[0].lower()})
        if source is not None and is_placeholder(target[0]):
            target = people.resolve(target[0], sentence, {source[0].lower()})
        if source is None or target is None or source[0].lower() == target[0].lower():
            continue
        out.append(replace(e, source=source[0], source_type=source[1], target=target[0], target_type=target[1]))
    return out
