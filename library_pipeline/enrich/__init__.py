"""Enrichment's domain logic, without Dagster: RAPTOR summary trees (`raptor`) and the
knowledge graph - what extractors return and the name rules they share
(`passage_graph`, `gender`, `pronouns`), the extractors (`extract_english`,
`extract_russian`, `extract`: the LLM one and the choice by language), typed
relations from the parse (`english_relations`, `english_people`,
`russian_relations`), names merged within a file (`kg_file_resolution`) and the one
write path (`kg_store`). The assets, checks and schedule in
`library_pipeline.defs.enrich` run these."""
