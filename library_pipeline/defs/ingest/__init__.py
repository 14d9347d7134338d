import dagster as dg

from library_pipeline.defs.ingest.assets import (
    chunks,
    embeddings,
    extracted_text,
    ingest_job,
    no_failed_files,
    passages_use_current_model,
)
from library_pipeline.defs.ingest.lexemes import automation_sensor, lexeme_df, lexeme_df_fresh
from library_pipeline.defs.ingest.sensors import library_folder_sensor
from library_pipeline.defs.ingest.vector_indexes import vector_indexes, vector_indexes_present

defs = dg.Definitions(
    assets=[extracted_text, chunks, embeddings, lexeme_df, vector_indexes],
    asset_checks=[no_failed_files, passages_use_current_model, lexeme_df_fresh, vector_indexes_present],
    jobs=[ingest_job],
    sensors=[library_folder_sensor, automation_sensor],
)
