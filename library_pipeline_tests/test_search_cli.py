"""The CLI command functions (serving/cli.py), registered on a throwaway Typer app the
way the `library` app registers them, run against the sample library."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from library_pipeline_tests.search_fixtures import corpus  # noqa: F401  (fixture)
from serving import cli


@pytest.fixture()
def run(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("LIBRARY_DB_DSN", corpus.db.settings.db_dsn)
    monkeypatch.setenv("LIBRARY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps tables to the terminal width
    app = typer.Typer()
    app.command("search")(cli.search)
    app.command("files")(cli.files)
    app.command("serve")(cli.serve)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, list(args), catch_exceptions=False)

    return invoke


def test_search_json_prints_what_the_mcp_tool_returns(run):
    result = run("search", "moby dick", "--json", "-k", "3")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 3 and rows[0]["path"] == "epub/pg2701-moby-dick.epub"
    assert set(rows[0]) == {"id", "source", "path", "title", "author", "location", "kind", "score", "lanes", "text"}
    assert "title" in rows[0]["lanes"]


def test_search_table_is_readable(run):
    result = run("search", "table of contents", "--top-k", "3")
    assert result.exit_code == 0, result.output
    assert "sicp-2nd-ed-sarabander.pdf" in result.output and "structure" in result.output
    assert "rerank: skipped" in result.output  # the skipped stage is said, not hidden


def test_search_filters_and_bad_input(run):
    vault = json.loads(run("search", "hosting the site", "--json", "--source", "vault").output)
    assert vault and {r["source"] for r in vault} == {"vault"}
    empty = run("search", "   ")
    assert empty.exit_code == 2 and "query is empty" in empty.output
    bad_k = run("search", "whale", "-k", "0")
    assert bad_k.exit_code == 2 and "top_k" in bad_k.output
    bad_path = run("search", "whale", "--path", "nope.pdf")
    assert bad_path.exit_code == 2 and "library_files" in bad_path.output


def test_files_json_is_the_inventory_answer(run):
    absent = json.loads(run("files", "hitchhiker's guide to the galaxy", "--json").output)
    assert absent["matched"] == 0 and absent["total"] > 0
    one_word = run("files", "dochka of the regiment")  # 'dochka' alone is one shared term
    assert "not in the library" in " ".join(one_word.output.split())
    found = run("files", "kapitanskaya dochka")
    assert "pushkin_kapitanskaya-dochka.txt" in found.output and found.exit_code == 0
    # another spelling of the same title (c for k) is the same name by its cross-script key
    spelt = json.loads(run("files", "capitanskaya dochka", "--json").output)
    assert [f["match"] for f in spelt["files"]] == ["transliterated"]
