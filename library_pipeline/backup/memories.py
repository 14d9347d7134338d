"""The memories-only backup: what cannot be ingested again. Agent memories with every
version, their passages (with their vectors, so nothing is re-embedded), the access
log, the curation state (relevance, decay, tier, duplicate_of, promotion: columns of
`memories`), the vault's notes with every indexed version (a re-sync from git brings
back only the head), and the query log. Files of the library are left out: they come
back from the library folder.

Saved as one COPY (text format, gzip) per table, all read in one REPEATABLE READ
snapshot. Restored beside a library that was ingested again, so every id is given
anew from the target's sequences and every reference translated: a re-ingested
library has taken the ids the saved rows had.
"""

from __future__ import annotations

import dataclasses
import gzip
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from library_pipeline.backup.archive import BackupError, Manifest, member
from library_pipeline.memory.curation import CURSOR_KEY


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    where: str | None = None                 # which rows are saved
    id_map: str | None = None                # ids are given anew; the map old -> new has this name
    refs: tuple[tuple[str, str], ...] = ()   # (column, map) translated through a map filled earlier
    keep_existing: str | None = None         # rows already in the target that make a saved row redundant


_VAULT_DOCS = "(SELECT id FROM documents WHERE source = 'vault')"

# in reference order: a table's maps are filled before any table that refers to them
TABLES: tuple[Table, ...] = (
    Table("memories", id_map="memory", refs=(("duplicate_of", "memory"),)),
    Table("memory_access_log", id_map="access", refs=(("memory_id", "memory"),)),
    Table("documents", "source = 'vault'", id_map="document"),
    Table("vault_syncs", id_map="sync"),
    Table("vault_state", refs=(("last_sync_id", "sync"),)),
    # summaries are left out: the RAPTOR assets rebuild them from the notes
    Table("passages", "source IN ('memory', 'vault') AND summary_level = 0", id_map="passage",
          refs=(("document_id", "document"), ("memory_id", "memory"))),
    Table("vault_note_versions", f"document_id IN {_VAULT_DOCS}", refs=(("document_id", "document"),)),
    Table("note_links", f"from_document IN {_VAULT_DOCS}", refs=(("from_document", "document"),)),
    # the target's own log stays; a row restored twice (a second --force) is not doubled
    Table("search_log", id_map="search", keep_existing="t.at = b.at AND t.query = b.query"),
)


def columns(conn: psycopg.Connection, table: str) -> list[str]:
    """The columns a COPY can write: stored, not generated (passages.tsv is computed)."""
    return [r[0] for r in conn.execute(
        "SELECT a.attname FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attnum > 0 "
        "AND NOT a.attisdropped AND a.attgenerated = '' ORDER BY a.attnum", (table,))]


def _select(table: Table, cols: list[str]) -> sql.Composed:
    query = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(map(sql.Identifier, cols)),
                                                sql.Identifier(table.name))
    if table.where:
        query += sql.SQL(" WHERE ") + sql.SQL(table.where)  # constant text of TABLES above
    return query + sql.SQL(" ORDER BY 1")


def save(conn: psycopg.Connection, into: Path, progress: Callable[[str], None] | None = None
         ) -> tuple[dict[str, Path], dict[str, list[str]], dict[str, int]]:
    """COPY every table's saved rows to `into` (inside the caller's snapshot): the member
    files, each table's columns and row counts."""
    files, tables, counts = {}, {}, {}
    for table in TABLES:
        if progress:
            progress(table.name)
        cols = columns(conn, table.name)
        path = into / f"{table.name}.copy.gz"
        rows = 0
        with gzip.open(path, "wb", compresslevel=4) as out, conn.cursor().copy(
                sql.SQL("COPY ({}) TO STDOUT").format(_select(table, cols))) as copy:
            for block in copy:
                out.write(block)
                rows += bytes(block).count(b"\n")
        files[path.name], tables[table.name], counts[table.name] = path, cols, rows
    return files, tables, counts


def _clear(conn: psycopg.Connection) -> None:
    """The target's memories and vault, replaced by the backup's (--force). The cascades
    take their passages, access log, note versions and links."""
    conn.execute("DELETE FROM memories")
    conn.execute("DELETE FROM documents WHERE source = 'vault'")
    conn.execute("DELETE FROM passages WHERE source = 'memory'")
    conn.execute("DELETE FROM vault_state")
    conn.execute("DELETE FROM vault_syncs")


def load(conn: psycopg.Connection, path: Path, manifest: Manifest, *, force: bool,
         progress: Callable[[str], None] | None = None) -> dict[str, int]:
    """Insert the saved rows with new ids in the caller's transaction; the rows inserted
    per table."""
    if force:
        _clear(conn)
    unknown = {f"{t}.{c}" for t, cols in manifest.tables.items()
               for c in set(cols) - set(columns(conn, t))}
    if unknown:
        raise BackupError(f"the backup has columns this release does not know ({', '.join(sorted(unknown))}): "
                          "it was written by a newer release")
    inserted: dict[str, int] = {}
    for table in TABLES:
        cols = manifest.tables.get(table.name)
        if cols is None:  # written before the table existed
            continue
        if progress:
            progress(table.name)
        staging = sql.Identifier(f"restore_{table.name}")
        conn.execute(sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
            staging, sql.SQL(", ").join(map(sql.Identifier, cols)), sql.Identifier(table.name)))
        with member(path, f"{table.name}.copy.gz") as raw, gzip.open(raw) as data, conn.cursor().copy(
                sql.SQL("COPY {} FROM STDIN").format(staging)) as copy:
            while block := data.read(1 << 20):
                copy.write(block)
        inserted[table.name] = _insert(conn, table, cols, staging)
    if "memories" in manifest.tables:
        _translate_cursor(conn, manifest.extra.get("near_dup_cursor"))
    return inserted


def _insert(conn: psycopg.Connection, table: Table, cols: list[str], staging: sql.Identifier) -> int:
    values = []
    for col in cols:
        ref = dict(table.refs).get(col)
        if col == "id" and table.id_map:
            values.append(sql.SQL("m.new"))
        elif ref:
            values.append(sql.SQL("(SELECT r.new FROM {} r WHERE r.old = b.{})").format(
                sql.Identifier(f"map_{ref}"), sql.Identifier(col)))
        else:
            values.append(sql.SQL("b.") + sql.Identifier(col))
    source = sql.SQL("{} b").format(staging)
    if table.id_map:
        mapping = sql.Identifier(f"map_{table.id_map}")
        # ids in the saved order, so a later record keeps a larger id (curation's cursor and
        # a thread's order read them)
        conn.execute(sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT s.id AS old, "
                             "nextval(pg_get_serial_sequence({}, 'id')) AS new "
                             "FROM (SELECT id FROM {} ORDER BY id) s").format(
            mapping, sql.Literal(table.name), staging))
        source += sql.SQL(" JOIN {} m ON m.old = b.id").format(mapping)
    query = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
        sql.Identifier(table.name), sql.SQL(", ").join(map(sql.Identifier, cols)),
        sql.SQL(", ").join(values), source)
    if table.keep_existing:
        query += sql.SQL(" WHERE NOT EXISTS (SELECT 1 FROM {} t WHERE {})").format(
            sql.Identifier(table.name), sql.SQL(table.keep_existing))
    if table.id_map:
        query += sql.SQL(" ORDER BY m.new")
    return conn.execute(query).rowcount


def near_dup_cursor(conn: psycopg.Connection) -> int | None:
    row = conn.execute("SELECT value #>> '{}' FROM settings WHERE key = %s", (CURSOR_KEY,)).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _translate_cursor(conn: psycopg.Connection, saved: int | None) -> None:
    """Curation's near-duplicate cursor (the last record id it examined): the restored
    records it had examined stay examined under their new ids."""
    if saved is None:
        return
    row = conn.execute("SELECT max(new) FROM map_memory WHERE old <= %s", (saved,)).fetchone()
    if row[0] is not None:
        conn.execute("INSERT INTO settings (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                     "SET value = EXCLUDED.value", (CURSOR_KEY, Jsonb(int(row[0]))))
