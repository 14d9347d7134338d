"""The database DSN setting through the Dagster code location, against a real
database (the settings rules alone are library_pipeline_tests/unit/test_settings.py)."""

from __future__ import annotations


def test_the_code_location_shows_the_dsn_variable_and_a_run_resolves_it(db, monkeypatch):
    """An external DSN (it may hold a password) reaches the Dagster UI as the variable's
    name; a run of the code location's resource still connects to that database."""
    import dagster as dg
    import psycopg

    from library_pipeline.definitions import build_definitions

    dsn = db.settings.db_dsn
    monkeypatch.setenv("LIBRARY_DB_DSN", dsn)
    monkeypatch.setenv("LIBRARY_HOME", str(db.settings.home))
    monkeypatch.setenv("LIBRARY_DIR", str(db.settings.library_dir))
    defs = build_definitions()
    resources = defs.get_repository_def().get_top_level_resources()
    shown = resources["settings"].config_schema.default_value
    assert shown["db_dsn"] == {"env": "LIBRARY_DB_DSN"}
    assert dsn not in repr({k: r.config_schema.default_value for k, r in resources.items()})
    # settings given by the caller are bound as values (no variable holds them)
    given = build_definitions(db.settings).get_repository_def().get_top_level_resources()["settings"]
    assert given.config_schema.default_value["db_dsn"] == dsn

    @dg.asset(required_resource_keys={"library_db"})   # this module's annotations are strings
    def probe(context) -> str:
        with context.resources.library_db.get().connect() as conn:
            return conn.execute("SELECT current_database()").fetchone()[0]

    result = dg.materialize([probe], resources={"library_db": defs.resources["library_db"]})
    assert result.success
    assert result.output_for_node("probe") == psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
