"""`lexeme_df`: corpus document frequencies the keyword lane's BM25 takes its IDF
from (the postings index itself is kept in step by triggers in schema.sql; this
refresh also checks it and rebuilds it if something bypassed them).

Unpartitioned and downstream of every file's embeddings and every vault
note's sections: declarative automation (eager) refreshes it after ingests
and vault syncs, and `library ingest` / `library vault sync` refresh it at the
end of a run that changed anything. The computation itself lives
in serving.lexemes (the read side owns what it ranks on)."""

import dagster as dg

from library_pipeline.launch import plans as launch
from library_pipeline.defs.ingest.assets import OWNERS, embeddings
from library_pipeline.resources import LibraryDatabase
from serving.lexemes import refresh_lexeme_df


# Vault note sections are searchable passages too (library_pipeline.defs.vault); named
# by key so that this module does not import the vault domain.
VAULT_SECTIONS = dg.AssetKey("vault_note_sections")


@dg.asset(
    deps=[embeddings, VAULT_SECTIONS],
    group_name="ingest",
    kinds={"postgres"},
    owners=OWNERS,
    automation_condition=dg.AutomationCondition.eager(),
    description="Document frequency of every lexeme per text-search configuration and source, over searchable "
                "passages: the IDF, passage count and average length of the keyword lane's BM25. "
                "Also checks the `postings` index against the tsvectors and rebuilds it if out of step. "
                "Rows: `lexeme_df`, `lexeme_df_totals`.",
)
def lexeme_df(library_db: LibraryDatabase) -> dg.MaterializeResult:
    with library_db.get().connect() as conn:
        figures = refresh_lexeme_df(conn)
    configs = figures.pop("configs")
    table = ["| configuration | passages | by source | lexemes | avg length |", "|---|---|---|---|---|"]
    table += [f"| {name} | {c['passages']} | {', '.join(f'{s} {n}' for s, n in sorted(c['sources'].items()))} "
              f"| {c['lexemes']} | {c['avg_length']} |" for name, c in configs.items()]
    return dg.MaterializeResult(metadata={**figures, "configurations": dg.MetadataValue.md("\n".join(table))})


@dg.asset_check(asset=lexeme_df, description="The lexeme table is at least as fresh as the last ingest.")
def lexeme_df_fresh(library_db: LibraryDatabase) -> dg.AssetCheckResult:
    with library_db.get().connect() as conn:
        refreshed, ingested = conn.execute(
            "SELECT (SELECT min(refreshed_at) FROM lexeme_df_totals), "
            "(SELECT max(updated_at) FROM documents WHERE status = 'ingested')").fetchone()
    passed = ingested is None or (refreshed is not None and refreshed >= ingested)
    return dg.AssetCheckResult(passed=passed, severity=dg.AssetCheckSeverity.WARN, metadata={
        "refreshed_at": str(refreshed), "last_ingest_at": str(ingested)})


automation_sensor = dg.AutomationConditionSensorDefinition(
    launch.AUTOMATION_SENSOR,
    # the enrich group has its own sensor, whose runs carry the enrich lane's tag
    target=dg.AssetSelection.all() - dg.AssetSelection.groups("enrich"),
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Declarative automation: refreshes lexeme_df (and other eager assets) after ingests.",
)
