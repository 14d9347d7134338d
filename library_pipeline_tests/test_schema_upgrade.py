"""schema.sql upgrades a database created by an earlier version in place: the
passages' tsvector gained the document title and heading (passages.context)."""

from __future__ import annotations

from serving.db import Database
from serving.lexemes import refresh_lexeme_df


def test_old_tsvector_is_migrated_with_context_and_fresh_statistics(db: Database):
    with db.transaction() as conn:
        doc = conn.execute(
            "INSERT INTO documents (path, partition_key, title, status) "
            "VALUES ('moby.txt', 'moby', 'Moby-Dick; or, The Whale', 'ingested') RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO passages (document_id, ordinal, heading, content, content_hash, ts_config) "
                     "VALUES (%s, 0, 'CHAPTER 1. Loomings', 'Call me Ishmael.', 'h', 'english')", (doc,))
    with db.connect() as conn:
        # what a database of the previous schema looked like
        conn.autocommit = True
        conn.execute("DROP TRIGGER passages_context ON passages")
        conn.execute("ALTER TABLE passages ALTER COLUMN tsv SET EXPRESSION AS (to_tsvector(ts_config, content))")
        conn.execute("ALTER TABLE passages DROP COLUMN context")
        refresh_lexeme_df(conn)
        assert conn.execute("SELECT count(*) FROM lexeme_df WHERE lexeme = 'whale'").fetchone()[0] == 0
        before = conn.execute("SELECT id, content, content_hash FROM passages").fetchall()

    for _ in range(2):  # as at the next two starts: the second run changes nothing
        db._schema_ready = False
        db.ensure_schema()

    with db.connect() as conn:
        assert conn.execute("SELECT id, content, content_hash FROM passages").fetchall() == before
        context, matches = conn.execute(
            "SELECT context, tsv @@ to_tsquery('english', 'whale & loomings & ishmael') FROM passages").fetchone()
        assert context == "Moby-Dick; or, The Whale — CHAPTER 1. Loomings" and matches
        # the statistics describe the new tsvectors without waiting for the next ingest
        assert conn.execute("SELECT df FROM lexeme_df WHERE lexeme = 'whale'").fetchone()[0] == 1
        # and new rows get their context from the trigger
        conn.execute("INSERT INTO passages (document_id, ordinal, content, content_hash, ts_config) "
                     "VALUES (%s, 1, 'It was the Pequod.', 'h2', 'english')",
                     (conn.execute("SELECT id FROM documents").fetchone()[0],))
        assert conn.execute("SELECT context FROM passages WHERE ordinal = 1").fetchone()[0] == "Moby-Dick; or, The Whale"


def test_statistics_counted_over_every_source_are_recounted_per_source(db: Database):
    with db.transaction() as conn:
        doc = conn.execute("INSERT INTO documents (path, partition_key, title, status) "
                           "VALUES ('moby.txt', 'moby', 'Moby-Dick', 'ingested') RETURNING id").fetchone()[0]
        conn.execute("INSERT INTO passages (document_id, ordinal, content, content_hash, ts_config) "
                     "VALUES (%s, 0, 'The whale surfaced.', 'h', 'english')", (doc,))
        conn.execute("INSERT INTO passages (source, kind, content, content_hash, ts_config) "
                     "VALUES ('memory', 'memory', 'A whale and a harpoon, said the agent.', 'm', 'english')")
    with db.connect() as conn:
        # the tables as the previous schema had them, filled as its rebuild did
        conn.autocommit = True
        conn.execute("DROP TABLE lexeme_df, lexeme_df_totals")
        conn.execute("CREATE TABLE lexeme_df (ts_config regconfig NOT NULL, lexeme text NOT NULL, "
                     "df integer NOT NULL, PRIMARY KEY (ts_config, lexeme))")
        conn.execute("CREATE TABLE lexeme_df_totals (ts_config regconfig PRIMARY KEY, passages integer NOT NULL, "
                     "avg_length double precision NOT NULL, refreshed_at timestamptz NOT NULL DEFAULT now(), "
                     "documents integer)")
        conn.execute("INSERT INTO lexeme_df SELECT ts_config, u.lexeme, count(*) FROM passages, "
                     "unnest(tsvector_to_array(tsv)) AS u(lexeme) GROUP BY 1, 2")
        conn.execute("INSERT INTO lexeme_df_totals (ts_config, passages, avg_length, documents) "
                     "SELECT ts_config, count(*), avg(length(tsv)), count(*) FROM passages GROUP BY 1")

    for _ in range(2):
        db._schema_ready = False
        db.ensure_schema()

    with db.connect() as conn:
        assert dict(conn.execute("SELECT source, df FROM lexeme_df WHERE lexeme = 'whale'").fetchall()) == {
            "library": 1, "memory": 1}
        assert conn.execute("SELECT source FROM lexeme_df WHERE lexeme = 'harpoon'").fetchall() == [("memory",)]
        assert dict(conn.execute("SELECT source, passages FROM lexeme_df_totals").fetchall()) == {
            "library": 1, "memory": 1}
        # the new key: a refresh writes one row per (configuration, source, lexeme)
        refresh_lexeme_df(conn)
        assert conn.execute("SELECT count(*) FROM lexeme_df WHERE lexeme = 'whale'").fetchone()[0] == 2
