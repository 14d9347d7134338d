"""Entity and relation extraction from passages, before resolution.

Offline (the default; no instruct LLM that writes usable summaries or JSON is packaged for offline use):
- English: spaCy NER and dependency patterns (extract_english).
- Russian: natasha NER, names lemmatised by pymorphy3 (extract_russian).
- Other languages: no offline extractor (the English model on German text
  tags capitalised nouns as organisations); such passages yield nothing, and
  the file's progress says so.

With a generator: one request per passage with a JSON schema (below); labels
mapped through serving/ontology.py like every other writer's.

Everything here returns raw labels; mapping onto the closed vocabulary and
name resolution happen in kg_store, the one write path.
"""

from __future__ import annotations

from library_pipeline.enrich.extract_english import english_graphs
from library_pipeline.enrich.extract_russian import russian_graphs
from library_pipeline.enrich.passage_graph import Edge, PassageGraph, clean_name
from serving.generation import GenerationError, TextGenerator
from serving.ontology import ENTITY_TYPES, RELATION_TYPES

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
