"""`vector_indexes`: the verbatim passages' HNSW indexes, built once after a first sync.

The ingest's range runs write passages without a missing verbatim HNSW index
(serving.passage_writer, `verbatim_index=False`): pgvector inserts every row into
the graph on its own, and that cost five times the rest of a small file's write.
This asset builds what is missing over the rows in place, after the sync: declarative
automation (eager, like lexeme_df) once no file is still being embedded, and
`library ingest` / `library vault sync` at the end of a run. Once built, writers keep
the indexes up to date row by row, and this asset has nothing left to do.
"""

import dagster as dg

from library_pipeline.defs.ingest.assets import OWNERS, embeddings
from library_pipeline.defs.ingest.lexemes import VAULT_SECTIONS
from library_pipeline.resources import LibraryDatabase
from serving.passage_writer import build_vector_indexes


@dg.asset(
    deps=[embeddings, VAULT_SECTIONS],
    group_name="ingest",
    kinds={"postgres", "pgvector"},
    owners=OWNERS,
    automation_condition=dg.AutomationCondition.eager(),
    description="The HNSW indexes of the library's embedding models (both vector lanes), built once "
                "over the passages after a first sync; until then the vector lanes scan exactly. "
                "A no-op when they exist.",
)
def vector_indexes(library_db: LibraryDatabase) -> dg.MaterializeResult:
    with library_db.get().connect() as conn:
        figures = build_vector_indexes(conn)
    return dg.MaterializeResult(metadata={
        "built": dg.MetadataValue.md("\n".join(f"- `{name}`" for name in figures["built"]) or "nothing missing"),
        "seconds": figures["seconds"], "passages": figures["passages"]})


@dg.asset_check(asset=vector_indexes, description="Every embedding model in use has its verbatim HNSW index "
                                                  "(else its vector lane scans every row).")
def vector_indexes_present(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    with library_db.get().connect() as conn:
        models = conn.execute(
            "SELECT m.model, m.col, m.n, EXISTS (SELECT 1 FROM pg_indexes i WHERE i.tablename = 'passages' "
            "  AND i.indexname = hnsw_index_name(m.prefix, m.model, false)) "
            "FROM (SELECT embed_model AS model, 'embedding' AS col, 'passages_hnsw_' AS prefix, count(*) AS n "
            "      FROM passages WHERE summary_level = 0 AND embed_model IS NOT NULL GROUP BY 1 "
            "      UNION ALL SELECT embed_model_multi, 'embedding_multi', 'passages_hnsw_multi_', count(*) "
            "      FROM passages WHERE summary_level = 0 AND embed_model_multi IS NOT NULL GROUP BY 1) m "
            "ORDER BY 2, 1").fetchall()
    missing = [f"{model} ({col}, {n} passages)" for model, col, n, present in models if not present]
    return dg.AssetCheckResult(passed=not missing, severity=dg.AssetCheckSeverity.WARN, metadata={
        "missing": ", ".join(missing) or "none", "models": len(models)})
