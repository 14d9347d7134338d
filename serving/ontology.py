"""The closed vocabulary of the knowledge graph, enforced at insert.

agent-library's (github.com/CreateM1nd/agent-library) first extraction pass named example types in a prompt
and got 175 entity types and 650 predicates back, `tool` (980 rows) beside
`tools` (325), `part of` beside `part_of`: a query for type = 'tool' silently
missed a quarter of the tools. A prompt is a request; this module is the
enforcement. Every writer maps its raw label through `entity_type` /
`relation_type` and stores the raw string beside the canonical one; the
database refuses anything outside the vocabulary (foreign keys to
kg_entity_types / kg_relation_types in schema.sql, compared with the lists
below by a test).

Rules:
- unmapped entity labels become `other`, unmapped predicates `related_to`,
  never an invented type;
- direction is never inferred from a phrase: "used by" maps to `uses` with
  source and target as the extractor gave them. A possibly-reversed edge is
  recoverable from `relation_raw`; an edge inverted by a guess is not.
  Active inverses ("contains", "wrote") are deliberately NOT mapped onto
  part_of / created_by: every such row would read backwards, so they stay
  `related_to` with their raw label.

The Agent Librarian specification names agent-library's 14 entity types only by example
(protocol, tool, technique); the 14 here cover a technical library and
general books, plus `place` and `event`, which novels and histories need.
"""

from __future__ import annotations

import re
import unicodedata

ENTITY_TYPES: tuple[str, ...] = (
    "person", "organization", "place", "event", "work", "concept", "technique", "tool", "software",
    "protocol", "standard", "vulnerability", "algorithm", "hardware", "language", "other",
)

RELATION_TYPES: tuple[str, ...] = (
    "uses", "part_of", "type_of", "created_by", "depends_on", "implements", "targets", "mitigates",
    "located_in", "describes", "family_of", "associate_of", "related_to",
)

# People in books: the offline extractors found almost no relation between the people of
# the example library's novels other than co-occurrence (1,175 of 1,177 rows related_to),
# while the text states kinship and service outright ("Miss Turner, his daughter", "Mr.
# Windibank, her stepfather", "Ryder, the head attendant"). Two relations, not one per
# kind: which kin or tie it is stays in relation_raw ("father of", "servant of"), so the
# vocabulary stays small and closed.
# - family_of: source is a relative or spouse of target (raw says which);
# - associate_of: source is a friend, servant, employer, client, colleague... of target.
KIN_WORDS = frozenset({
    "father", "mother", "son", "daughter", "brother", "sister", "wife", "husband", "uncle", "aunt", "nephew",
    "niece", "cousin", "stepfather", "stepmother", "step-father", "step-mother", "stepdaughter", "stepson",
    "grandfather", "grandmother", "grandson", "granddaughter", "widow", "widower", "parent", "child",
    "fiancé", "fiancée", "fiance", "fiancee", "bride", "bridegroom", "twin", "sister-in-law", "brother-in-law",
    "father-in-law", "mother-in-law", "son-in-law", "daughter-in-law",
    "отец", "мать", "сын", "дочь", "брат", "сестра", "жена", "муж", "дядя", "тётя", "тетя", "племянник",
    "племянница", "невеста", "жених", "батюшка", "матушка", "дочка", "супруга", "супруг"})
SOCIAL_WORDS = frozenset({
    "friend", "servant", "maid", "employer", "master", "mistress", "client", "partner", "companion", "colleague",
    "assistant", "clerk", "lodger", "landlady", "landlord", "secretary", "butler", "coachman", "groom",
    "governess", "enemy", "rival", "lover", "associate", "confederate", "tenant", "ward", "guardian", "valet",
    "housekeeper", "neighbour", "neighbor", "employee", "accomplice", "agent", "attendant", "steward",
    "друг", "слуга", "дядька", "приятель", "товарищ", "хозяин", "хозяйка", "враг", "соперник", "служанка"})

# raw label (after _key) -> canonical type. Plurals are handled by _singular.
_ENTITY_SYNONYMS: dict[str, str] = {
    # NER tag sets: spaCy (OntoNotes) and natasha
    "per": "person", "people": "person", "character": "person", "author": "person", "human": "person",
    "individual": "person", "norp": "other",
    "org": "organization", "organisation": "organization", "company": "organization", "institution": "organization",
    "agency": "organization", "group": "organization", "team": "organization", "university": "organization",
    "gpe": "place", "loc": "place", "location": "place", "fac": "place", "facility": "place", "city": "place",
    "country": "place", "region": "place", "building": "place", "address": "place", "street": "place",
    "incident": "event", "war": "event", "battle": "event", "meeting": "event",
    "work_of_art": "work", "book": "work", "paper": "work", "article": "work", "story": "work", "novel": "work",
    "document": "work", "publication": "work", "film": "work", "poem": "work",
    "law": "standard", "specification": "standard", "spec": "standard", "rfc": "standard", "format": "standard",
    "file_format": "standard", "regulation": "standard",
    "idea": "concept", "theory": "concept", "topic": "concept", "field": "concept", "term": "concept",
    "method": "technique", "procedure": "technique", "attack": "technique", "practice": "technique",
    "tactic": "technique", "approach": "technique",
    "instrument": "tool", "utility": "tool", "product": "tool",
    "program": "software", "application": "software", "app": "software", "library": "software",
    "framework": "software", "operating_system": "software", "os": "software", "service": "software",
    "package": "software",
    "network_protocol": "protocol",
    "cve": "vulnerability", "weakness": "vulnerability", "flaw": "vulnerability", "exploit": "vulnerability",
    "data_structure": "algorithm",
    "device": "hardware", "machine": "hardware", "vehicle": "hardware", "component": "hardware",
    "programming_language": "language",
    "misc": "other", "miscellaneous": "other", "unknown": "other",
}

# predicate (after _key) -> canonical relation. The agentive "X by" forms map
# onto the same relation as the active verb, direction untouched.
_RELATION_SYNONYMS: dict[str, str] = {
    "use": "uses", "used": "uses", "used_by": "uses", "using": "uses", "utilizes": "uses", "utilises": "uses",
    "employs": "uses", "relies_on": "uses",
    "part": "part_of", "is_part_of": "part_of", "member_of": "part_of", "belongs_to": "part_of",
    "component_of": "part_of",
    "is_a": "type_of", "isa": "type_of", "kind_of": "type_of", "is_a_kind_of": "type_of", "instance_of": "type_of",
    "subclass_of": "type_of", "subtype_of": "type_of", "is_a_type_of": "type_of", "sort_of": "type_of",
    "written_by": "created_by", "authored_by": "created_by", "developed_by": "created_by", "designed_by": "created_by",
    "invented_by": "created_by", "founded_by": "created_by", "made_by": "created_by", "composed_by": "created_by",
    "published_by": "created_by", "built_by": "created_by", "painted_by": "created_by",
    "depends": "depends_on", "requires": "depends_on", "required_by": "depends_on", "needs": "depends_on",
    "implemented_by": "implements", "implement": "implements",
    "target": "targets", "targeted_by": "targets", "attacks": "targets", "exploits": "targets",
    "compromises": "targets", "affects": "targets",
    "mitigate": "mitigates", "mitigated_by": "mitigates", "prevents": "mitigates", "defends_against": "mitigates",
    "protects_against": "mitigates", "counters": "mitigates",
    "located": "located_in", "located_at": "located_in", "lives_in": "located_in", "based_in": "located_in",
    "in": "located_in", "situated_in": "located_in", "headquartered_in": "located_in",
    "describe": "describes", "described_by": "describes", "about": "describes", "explains": "describes",
    "documents": "describes",
    "related": "related_to", "associated_with": "related_to", "co_occurs_with": "related_to",
    "mentions": "related_to", "linked_to": "related_to", "connected_to": "related_to",
    "is_in": "located_in", "lives_in": "located_in", "lives_at": "located_in", "resides_in": "located_in",
    "kin_of": "family_of", "relative_of": "family_of",
    "married_to": "family_of", "spouse_of": "family_of", "friend_of": "associate_of", "works_for": "associate_of",
    "serves": "associate_of", "employed_by": "associate_of",
}
# "father of", "servant of": what the kin and social patterns write as the raw label
_RELATION_SYNONYMS.update({f"{w.replace('-', '_')}_of": "family_of" for w in KIN_WORDS})
_RELATION_SYNONYMS.update({f"{w.replace('-', '_')}_of": "associate_of" for w in SOCIAL_WORDS})

_NON_WORD = re.compile(r"[^\w+#]+")

# Forms of address and ranks before a name: not part of it. Extraction strips them
# ("Mr. Hyde" and "Edward Hyde" are one man) and so does a lookup. Ranks count too
# ("Colonel Lysander Stark", «капитан Миронов»).
FORM_OF_ADDRESS = re.compile(
    r"^(?:mr|mrs|ms|miss|dr|sir|mister|madame|madam|mme|mlle|monsieur|lord|lady|colonel|captain|inspector|"
    r"sergeant|major|general|professor|count|countess|господин|госпожа|г-н|г-жа|капитан|генерал|майор|"
    r"поручик|сержант|капрал|урядник|отец|граф|князь|княгиня|графиня)\.?\s+(?=\w)", re.IGNORECASE)


def _key(label: str) -> str:
    """`Part of`, `part-of`, ` PART_OF ` -> `part_of`."""
    text = unicodedata.normalize("NFKC", label or "").strip().lower()
    return _NON_WORD.sub("_", text).strip("_")


def _singular(word: str) -> str | None:
    for suffix, repl in (("ies", "y"), ("ses", "s"), ("s", "")):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)] + repl
    return None


def entity_type(raw: str | None) -> str:
    """Canonical entity type for a raw label; `other` when nothing fits."""
    key = _key(raw or "")
    for candidate in (key, _singular(key)):
        if not candidate:
            continue
        if candidate in ENTITY_TYPES:
            return candidate
        if candidate in _ENTITY_SYNONYMS:
            return _ENTITY_SYNONYMS[candidate]
    return "other"


def relation_type(raw: str | None) -> str:
    """Canonical relation for a raw predicate; `related_to` when nothing fits.
    Never swaps direction: the caller keeps its source and target."""
    key = _key(raw or "")
    for candidate in (key, key.removeprefix("is_"), key.removeprefix("was_"), key.removeprefix("are_")):
        if candidate in RELATION_TYPES:
            return candidate
        if candidate in _RELATION_SYNONYMS:
            return _RELATION_SYNONYMS[candidate]
    # a third-person or plural verb form of a known relation ("implement" vs "implements")
    single = _singular(key)
    if single and (single in RELATION_TYPES or single in _RELATION_SYNONYMS):
        return single if single in RELATION_TYPES else _RELATION_SYNONYMS[single]
    if key + "s" in RELATION_TYPES:
        return key + "s"
    return "related_to"


def is_entity_type(name: str) -> bool:
    return name in ENTITY_TYPES


def is_relation_type(name: str) -> bool:
    return name in RELATION_TYPES
