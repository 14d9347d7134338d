"""Invariants of the enrich stage, as asset checks.

The vocabulary is also enforced by foreign keys (schema.sql), so the first
check guards the guard: a migration that dropped a constraint, or vocabulary
tables that drifted from serving/ontology.py, fail here rather than splitting
`tool` from `tools` quietly.

No `from __future__ import annotations` (Dagster inspects annotations).
"""

import dagster as dg

from library_pipeline.defs.enrich.assets import COVERAGE_SQL, knowledge_graph, raptor_tree
from library_pipeline.resources import LibraryDatabase
from serving.ontology import ENTITY_TYPES, RELATION_TYPES

OUTSIDE_VOCABULARY_SQL = """
SELECT (SELECT count(*) FROM entities WHERE NOT (type = ANY(%(types)s))),
       (SELECT count(*) FROM relations WHERE NOT (relation = ANY(%(relations)s))),
       (SELECT array_agg(name ORDER BY name) FROM kg_entity_types),
       (SELECT array_agg(name ORDER BY name) FROM kg_relation_types)
"""

# Rows of a file marked `removed` stay until `library purge` (nothing is deleted
# unasked) and every query ignores them, so they are reported, not failed on.
DANGLING_SQL = """
SELECT (SELECT count(*) FROM relations r LEFT JOIN entities s ON s.id = r.source_id
        LEFT JOIN entities t ON t.id = r.target_id WHERE s.id IS NULL OR t.id IS NULL),
       (SELECT count(*) FROM relations r LEFT JOIN documents d ON d.id = r.document_id WHERE d.id IS NULL),
       (SELECT count(*) FROM entities e WHERE NOT EXISTS (SELECT 1 FROM entity_sources s WHERE s.entity_id = e.id)),
       (SELECT count(*) FROM relations r JOIN documents d ON d.id = r.document_id WHERE d.status = 'removed')
"""


def _coverage(conn) -> dict:
    complete, ingested = conn.execute(COVERAGE_SQL).fetchone()
    return {"files_extracted": complete, "files_ingested": ingested,
            "coverage": round(complete / ingested, 3) if ingested else 0.0}


@dg.asset_check(asset=knowledge_graph, description="Every entity type and relation is in the closed vocabulary, "
                                                   "and the database's vocabulary equals serving/ontology.py.")
def kg_vocabulary_closed(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    with library_db.get().connect() as conn:
        bad_types, bad_relations, db_types, db_relations = conn.execute(
            OUTSIDE_VOCABULARY_SQL, {"types": list(ENTITY_TYPES), "relations": list(RELATION_TYPES)}).fetchone()
        coverage = _coverage(conn)
    drift = sorted(set(db_types or []) ^ set(ENTITY_TYPES)) + sorted(set(db_relations or []) ^ set(RELATION_TYPES))
    return dg.AssetCheckResult(
        passed=not bad_types and not bad_relations and not drift,
        metadata={"entities_outside": bad_types, "relations_outside": bad_relations,
                  "vocabulary_drift": ", ".join(drift) or "none", **coverage})


@dg.asset_check(asset=knowledge_graph, description="No relation points at a missing entity or file; no entity "
                                                   "is left without a source file (purged files' entities are "
                                                   "collected by the next knowledge_graph run).")
def kg_no_dangling(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    with library_db.get().connect() as conn:
        missing_entity, missing_file, orphans, removed = conn.execute(DANGLING_SQL).fetchone()
        coverage = _coverage(conn)
    return dg.AssetCheckResult(
        passed=missing_entity == 0 and missing_file == 0 and orphans == 0,
        metadata={"relations_to_missing_entities": missing_entity, "relations_to_missing_files": missing_file,
                  "entities_without_sources": orphans, "relations_of_removed_files_hidden": removed,
                  **coverage})


@dg.asset_check(asset=raptor_tree, description="Every ingested file of 6+ passages has a summary tree built "
                                               "from its current passages.", blocking=False)
def raptor_trees_current(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    with library_db.get().connect() as conn:
        stale, eligible = conn.execute(
            "SELECT count(*) FILTER (WHERE b.document_id IS NULL OR b.version <> d.version), count(*) "
            "FROM documents d LEFT JOIN raptor_builds b ON b.document_id = d.id "
            "WHERE d.source = 'library' AND d.status = 'ingested' AND (SELECT count(*) FROM passages p "
            "WHERE p.document_id = d.id AND p.summary_level = 0 AND NOT p.removed) >= 6").fetchone()
        summaries = conn.execute("SELECT count(*) FROM passages WHERE summary_level > 0 AND NOT removed").fetchone()[0]
    return dg.AssetCheckResult(passed=stale == 0, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"files_without_current_tree": stale, "eligible_files": eligible,
                                         "summaries": summaries})
