"""The import rules of docs/architecture.md, checked on the source: a module that
imports up a layer fails here, not in a deployment that lacks the upper layer (an MCP
server installed without the pipeline, a benchmark that loads the BEIR harness)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in sorted(_imports(path)):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def test_serving_imports_neither_the_pipeline_nor_dagster():
    assert _violations("serving", ("library_pipeline", "dagster")) == []


def test_domain_logic_does_not_import_the_definitions_or_entry_points():
    upper = ("library_pipeline.defs", "library_pipeline.definitions", "library_pipeline.celery_ingest",
             "library_pipeline.cli", "library_pipeline.up", "library_pipeline.ingest_runner",
             "library_pipeline.vault_runner", "library_pipeline.resources")
    for package in ("library_pipeline/ingest", "library_pipeline/vault", "library_pipeline/eval"):
        assert _violations(package, upper) == [], package


def test_the_check_sees_an_import_up_a_layer(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from library_pipeline.defs.ingest.assets import embeddings\nimport dagster as dg\n")
    assert {"library_pipeline.defs.ingest.assets", "dagster"} <= _imports(bad)
