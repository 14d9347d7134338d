"""One settings object: the environment is read in serving/settings.py only, once per
process, never at import time."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.settings import DEFAULT_OLLAMA_URL, Settings, get_settings, reset_settings

REPO = Path(__file__).resolve().parents[2]


def _sources() -> list[tuple[str, ast.AST]]:
    out = []
    for path in sorted([*(REPO / "serving").rglob("*.py"), *(REPO / "library_pipeline").rglob("*.py")]):
        rel = path.relative_to(REPO).as_posix()
        out.append((rel, ast.parse(path.read_text(encoding="utf-8"))))
    return out


def _library_name(arg: ast.AST | None) -> bool:
    """A LIBRARY_* literal, or a name held in a constant (`TOKEN_ENV`)."""
    if isinstance(arg, ast.Constant):
        return isinstance(arg.value, str) and arg.value.startswith("LIBRARY_")
    return isinstance(arg, (ast.Name, ast.Attribute))


def _env_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, expression) of each read of a LIBRARY_* variable: os.environ.get / os.getenv /
    dg.EnvVar / os.environ[...]. Other variables (PATH, DAGSTER_HOME, USER) belong to other programs."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = ast.unparse(node.func)
            if f in ("os.environ.get", "os.getenv", "environ.get", "dg.EnvVar", "EnvVar") \
                    and _library_name(node.args[0]):
                lines.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ" \
                and isinstance(node.ctx, ast.Load) and _library_name(node.slice):
            lines.append((node.lineno, ast.unparse(node)))
    return lines


# Dagster resolves an EnvVar in each run's process; the code location binds the
# secrets that way so the UI does not show them (LibrarySettings.for_definitions)
DAGSTER_ENV_VARS = {"library_pipeline/resources.py": ["dg.EnvVar(env)"]}


def test_environment_is_read_in_settings_only():
    found = []
    for rel, tree in _sources():
        if rel == "serving/settings.py":
            continue
        reads = _env_reads(tree)
        if [call for _, call in reads] == DAGSTER_ENV_VARS.get(rel):
            reads = []
        found += [f"{rel}:{line}" for line, _ in reads]
    assert found == [], "environment read outside serving/settings.py:\n" + "\n".join(found)


def test_the_ollama_default_is_written_once():
    hits = [rel for rel, _ in _sources() if DEFAULT_OLLAMA_URL in (REPO / rel).read_text(encoding="utf-8")]
    assert hits == ["serving/settings.py"]


def test_settings_are_cached_until_reset(monkeypatch):
    monkeypatch.setenv("LIBRARY_QUERY_LOG_DAYS", "7")
    first = get_settings()
    assert first.query_log_days == 7 and get_settings() is first
    os.environ["LIBRARY_QUERY_LOG_DAYS"] = "8"   # not through monkeypatch: the cache holds
    try:
        assert get_settings().query_log_days == 7
        reset_settings()
        assert get_settings().query_log_days == 8
    finally:
        monkeypatch.setenv("LIBRARY_QUERY_LOG_DAYS", "7")


def test_bad_values_name_their_variable(monkeypatch):
    monkeypatch.setenv("LIBRARY_MAX_FILE_MB", "lots")
    with pytest.raises(ValueError, match="LIBRARY_MAX_FILE_MB must be an integer"):
        Settings.from_env()
    monkeypatch.setenv("LIBRARY_MAX_FILE_MB", "1")
    monkeypatch.setenv("LIBRARY_MCP_BURST", "-1")
    with pytest.raises(ValueError, match="LIBRARY_MCP_BURST must be >= 0"):
        Settings.from_env()


def test_thread_settings_tolerate_typos(monkeypatch):
    monkeypatch.setenv("LIBRARY_TORCH_THREADS", "many")
    assert get_settings().torch_threads == 1


def test_importing_the_code_locations_reads_no_environment(tmp_path):
    """A bad value fails when settings are first used, not at import: importing the
    Dagster code locations, the CLI and the MCP server succeeds, building the
    definitions then names the variable."""
    env = dict(os.environ, LIBRARY_MAX_FILE_MB="lots", LIBRARY_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    code = ("import library_pipeline.definitions, library_pipeline.launch.celery_ingest, library_pipeline.cli.main, "
            "serving.mcp_server, serving.cli\n"
            "try:\n    library_pipeline.definitions.defs\nexcept ValueError as e:\n    print('late:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "late: LIBRARY_MAX_FILE_MB must be an integer" in out.stdout
