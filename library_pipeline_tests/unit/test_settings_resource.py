"""The one settings-shaped Dagster resource: every setting is a field of it, values go
Settings -> resource -> the same Settings, and the code location shows secrets as the
variables they come from, never their values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import dagster as dg

from library_pipeline.definitions import build_resources
from library_pipeline.resources import LibrarySettings, SettingsResource
from serving.settings import Settings


def _every_field_set() -> Settings:
    """Settings with no field at its default, so a field the round trip drops shows."""
    return Settings(
        library_dir=Path("/srv/books"), home=Path("/srv/home"), library_dir_explicit=True,
        db_dsn="postgresql://u:secret@db/library", dagster_dsn="postgresql://u:secret@db/dagster",
        schema_sql=Path("/srv/schema.sql"), embed_backend="ollama", embed_model="nomic", embed_dims=256,
        embed_dtype="float32", ollama_url="http://gpu:11434", max_file_bytes=7, ocr_languages="eng",
        vault_repo=Path("/srv/vault.git"), vault_branch="notes", vault_max_note_bytes=9, query_log=False,
        query_log_days=3, llm_backend="openai", llm_model="qwen", llm_url="http://gpu:8080", llm_timeout=5.0,
        llm_retries=0, embed_multilingual="off", reranker="bge", torch_threads=4, onnx_threads=3, usem3_threads=1,
        mcp_token="tok", mcp_max_request_kb=1.0, mcp_rate=2.0, mcp_burst=3.0, log_level="DEBUG", debug=True,
        identities=Path("/srv/ids.yaml"), agent="a", department="d", eval_dsn="postgresql://u:secret@db/eval",
        eval_queries="q.jsonl", library_questions="q.tsv", memory_eval_set="m", locomo_dir="/l", judge_model="j")


def test_every_setting_is_a_field_of_the_resource():
    assert set(LibrarySettings.model_fields) == {f.name for f in dataclasses.fields(Settings)}


def test_values_go_round_in_one_direction():
    settings = _every_field_set()
    assert dataclasses.asdict(settings) != dataclasses.asdict(Settings(library_dir=Path("/"), home=Path("/")))
    assert LibrarySettings.from_settings(settings).settings == settings


def test_the_pipeline_resources_hold_the_same_settings_and_no_config_of_their_own():
    settings = _every_field_set()
    resources = build_resources(settings)
    held = {k: r for k, r in resources.items() if isinstance(r, SettingsResource)}
    assert set(held) == {"library_db", "embedder", "vault", "llm"}
    assert all(r.config is resources["settings"] and set(type(r).model_fields) == {"config"} for r in held.values())
    assert resources["vault"].repo == "/srv/vault.git" and resources["vault"].max_note_bytes == 9
    assert resources["library_db"].settings == settings


def test_the_code_location_binds_secrets_as_their_variables():
    bound = LibrarySettings.for_definitions(_every_field_set())
    assert bound.db_dsn == dg.EnvVar("LIBRARY_DB_DSN") and bound.mcp_token == dg.EnvVar("LIBRARY_MCP_TOKEN")
    assert bound.eval_dsn == dg.EnvVar("LIBRARY_EVAL_DSN") and bound.dagster_dsn == dg.EnvVar("LIBRARY_DAGSTER_DSN")
    assert bound.home == "/srv/home"
    unset = LibrarySettings.for_definitions(Settings(library_dir=Path("/b"), home=Path("/h")))
    assert unset.db_dsn is None and unset.mcp_token is None
