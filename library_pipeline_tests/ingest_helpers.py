"""Helpers for ingest tests: run the real assets through the real runner."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from library_pipeline.launch.ingest_runner import run_ingest
from serving.db import Database


def ingest(db: Database, instance: dg.DagsterInstance, relpaths: list[str] | None = None, **kw) -> dict:
    return run_ingest(db, relpaths, instance=instance, progress=False, **kw)


def latest_metadata(instance: dg.DagsterInstance, asset: str) -> dict:
    event = instance.get_latest_materialization_event(dg.AssetKey(asset))
    assert event is not None, f"{asset} was never materialized"
    meta = event.asset_materialization.metadata
    return {k: getattr(v, "value", v) for k, v in meta.items()}


def doc_rows(db: Database) -> dict[str, dict]:
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT d.path, d.status, d.pages, d.ocr_pages, d.error, d.ts_config::text, d.language, d.title, "
            "(SELECT count(*) FROM passages p WHERE p.document_id = d.id AND p.summary_level = 0 AND NOT p.removed) "
            "FROM documents d ORDER BY d.path").fetchall()
    keys = ("path", "status", "pages", "ocr_pages", "error", "ts_config", "language", "title", "passages")
    return {r[0]: dict(zip(keys, r)) for r in rows}


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path
