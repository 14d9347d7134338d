"""Planning and recording a vault sync.

A sync compares the last processed commit with the branch head and sorts the
changed files into: index (added / modified / renamed-and-edited), rename
(the `documents` row follows the note, so its versions stay attached),
remove, and skip (attachments, `.base`, `.canvas` — with the reason). Without
a usable base the head's tree is compared with the database blob by blob.
`vault_syncs` records every sync; the last run of a sync closes it and moves
`vault_state.last_commit` forward.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from library_pipeline import documents
from library_pipeline.documents import partition_key_for
from library_pipeline.vault.git import Entry, GitRepo
from serving.db import Database

log = logging.getLogger(__name__)

NOTE_SUFFIX = ".md"
# Not notes, each with the reason `library vault status` shows.
SKIP_REASONS = {
    ".base": "Obsidian Base (a YAML database view), not a note",
    ".canvas": "Obsidian Canvas (JSON board), not a note",
}
MAX_SKIPPED_LISTED = 500


def is_note(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return path.lower().endswith(NOTE_SUFFIX) and not name.startswith(".") and not _hidden(path)


def _hidden(path: str) -> bool:
    return any(part.startswith(".") for part in path.split("/")[:-1])


def skip_reason(path: str, entry: Entry | None = None) -> str:
    suffix = "." + path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    if _hidden(path):
        return "inside a hidden folder (.obsidian settings, .trash, …)"
    if entry is not None and entry.mode == "120000":
        return "symbolic link"
    if entry is not None and entry.kind == "commit":
        return "git submodule"
    if suffix in SKIP_REASONS:
        return SKIP_REASONS[suffix]
    return f"attachment ({suffix or 'no extension'}), not a note"


# -- planning ---------------------------------------------------------------------------

@dataclass
class SyncPlan:
    repo: str
    branch: str
    head: str
    base: str | None
    mode: str                          # incremental | full
    reason: str | None = None          # why full
    index: list[str] = field(default_factory=list)               # paths to (re)index at head
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (old, new)
    removed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.index or self.renamed or self.removed)


def _live_notes(conn: psycopg.Connection) -> dict[str, tuple[str | None, str]]:
    """path -> (vault_blob, status) of every note not removed."""
    return {r[0]: (r[1], r[2]) for r in conn.execute(
        "SELECT path, vault_blob, status FROM documents WHERE source = 'vault' AND status <> 'removed'")}


def plan_sync(db: Database, repo: GitRepo, branch: str, base: str | None, *, full: bool = False,
              full_reason: str | None = None) -> SyncPlan:
    """What changed between `base` and the branch head. Without a usable base
    (none yet, gone after a gc, or not an ancestor: a force-push rewrote history)
    the head's tree is compared with what the database holds, blob by blob."""
    head = repo.head(branch)
    if head is None:
        raise ValueError(f"branch {branch!r} has no commits in {repo.path}")
    plan = SyncPlan(repo=str(repo.path.resolve()), branch=branch, head=head, base=base, mode="incremental")
    if not full:
        if base is None:
            full, full_reason = True, "no previous sync (missing cursor)"
        elif not repo.has_commit(base):
            full, full_reason = True, f"last processed commit {base[:12]} no longer exists (history rewritten)"
        elif not repo.is_ancestor(base, head):
            full, full_reason = True, f"head is not a descendant of {base[:12]} (force-push / history rewrite)"
    if full:
        plan.mode, plan.reason = "full", full_reason or "full comparison requested"
        _plan_full(db, repo, plan)
    elif base != head:
        _plan_diff(repo, plan)
    return plan


def _plan_diff(repo: GitRepo, plan: SyncPlan) -> None:
    for change in repo.diff(plan.base, plan.head):
        new_note = is_note(change.path)
        if change.status == "D":
            if new_note:
                plan.removed.append(change.path)
        elif change.status == "R":
            old_note = is_note(change.old_path or "")
            if old_note and new_note:
                plan.renamed.append((change.old_path, change.path))
                plan.index.append(change.path)  # renamed-and-edited: the edit is indexed too (skipped if identical)
            elif old_note:
                plan.removed.append(change.old_path)
                plan.skipped[change.path] = skip_reason(change.path)
            elif new_note:
                plan.index.append(change.path)
            else:
                plan.skipped[change.path] = skip_reason(change.path)
        elif new_note:  # A, M, C, T
            plan.index.append(change.path)
        else:
            plan.skipped[change.path] = skip_reason(change.path)


def _plan_full(db: Database, repo: GitRepo, plan: SyncPlan) -> None:
    tree = repo.tree(plan.head)
    with db.connect() as conn:
        live = _live_notes(conn)
    notes = {p: e for p, e in tree.items() if e.kind == "blob" and e.mode != "120000" and is_note(p)}
    for path, entry in tree.items():
        if path not in notes:
            plan.skipped[path] = skip_reason(path, entry)
    gone = {p: blob for p, (blob, _) in live.items() if p not in notes}
    # a note that vanished and a new one with the same blob: a rename, keep its history
    by_blob: dict[str, list[str]] = {}
    for p, blob in gone.items():
        if blob:
            by_blob.setdefault(blob, []).append(p)
    for path, entry in notes.items():
        known = live.get(path)
        if known is None:
            olds = by_blob.get(entry.blob)
            if olds:
                old = olds.pop(0)
                plan.renamed.append((old, path))
                del gone[old]
                continue
            plan.index.append(path)
        elif known[0] != entry.blob or known[1] != "ingested":
            plan.index.append(path)
    plan.removed.extend(sorted(gone))


# -- applying a plan: documents rows and the sync record ------------------------------------

def _register(conn: psycopg.Connection, path: str) -> str:
    return documents.register(conn, "vault", path, partition_key_for(path), file_format="md")[1]


def _rename(conn: psycopg.Connection, old: str, new: str) -> str:
    """Move a note's row to its new path (its versions come along). If a row
    already holds the new path (a note deleted there before), that row is
    revived instead and the old one marked removed."""
    clash = conn.execute("SELECT id FROM documents WHERE source = 'vault' AND path = %s", (new,)).fetchone()
    if clash:
        _remove(conn, [old])
        return _register(conn, new)
    key = partition_key_for(new)
    if documents.move(conn, "vault", old, new, key) is None:  # not known under the old name (never synced)
        return _register(conn, new)
    return key


def _remove(conn: psycopg.Connection, paths: list[str]) -> int:
    ids = documents.mark_removed(conn, "vault", paths)
    if ids:
        conn.execute("DELETE FROM note_links WHERE from_document = ANY(%s)", (ids,))
    return len(ids)


@dataclass
class AppliedSync:
    sync_id: int
    keys: list[str]                    # partition keys to run, in plan order
    old_keys: list[str]                # keys renamed away (their Dagster partitions may go)
    removed: int
    renamed: int


def apply_plan(db: Database, plan: SyncPlan, trigger: str) -> AppliedSync:
    """Register, rename and remove rows and open the sync record, in one transaction."""
    with db.transaction() as conn:
        keys: dict[str, str] = {}
        old_keys = []
        for old, new in plan.renamed:
            old_keys.append(partition_key_for(old))
            keys[new] = _rename(conn, old, new)
        for path in plan.index:
            if path not in keys:
                keys[path] = _register(conn, path)
        removed = _remove(conn, plan.removed) if plan.removed else 0
        skipped = dict(sorted(plan.skipped.items())[:MAX_SKIPPED_LISTED])
        if len(plan.skipped) > MAX_SKIPPED_LISTED:
            skipped["…"] = f"{len(plan.skipped) - MAX_SKIPPED_LISTED} more"
        sync_id = conn.execute(
            "INSERT INTO vault_syncs (repo, branch, trigger, mode, reason, from_commit, to_commit, requested, "
            "renamed, removed, skipped) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (plan.repo, plan.branch, trigger, plan.mode, plan.reason, plan.base, plan.head, len(keys),
             len(plan.renamed), removed, Jsonb(skipped))).fetchone()[0]
    return AppliedSync(sync_id, list(keys.values()), old_keys, removed, len(plan.renamed))


def set_runs(db: Database, sync_id: int, runs: int) -> None:
    """How many runs the sync launched; with none it is complete now."""
    with db.transaction() as conn:
        conn.execute("UPDATE vault_syncs SET runs_requested = %s WHERE id = %s", (runs, sync_id))
    if runs == 0:
        finish_run(db, sync_id, processed=0, chunks=0, failed=0, count_run=False)


def finish_run(db: Database, sync_id: int, *, processed: int, chunks: int, failed: int,
               count_run: bool = True) -> dict | None:
    """Add one run's figures to its sync; the last run closes the sync and moves
    the repository's synced commit forward (never backwards: an older sync that
    finishes late does not undo a newer one)."""
    with db.transaction() as conn:
        row = conn.execute(
            "UPDATE vault_syncs SET runs_done = runs_done + %s, files_processed = files_processed + %s, "
            "chunks_indexed = chunks_indexed + %s, failed = failed + %s WHERE id = %s "
            "RETURNING repo, branch, to_commit, runs_done, runs_requested, files_processed + removed, "
            "chunks_indexed, failed, finished_at",
            (1 if count_run else 0, processed, chunks, failed, sync_id)).fetchone()
        if row is None:
            return None
        repo, branch, to_commit, done, requested, files, total_chunks, total_failed, finished = row
        if done < requested or finished is not None:
            return None
        conn.execute("UPDATE vault_syncs SET finished_at = now() WHERE id = %s", (sync_id,))
        conn.execute(
            "INSERT INTO vault_state (repo, branch, last_commit, last_sync_id, last_synced_at) "
            "VALUES (%s, %s, %s, %s, now()) ON CONFLICT (repo, branch) DO UPDATE "
            "SET last_commit = EXCLUDED.last_commit, last_sync_id = EXCLUDED.last_sync_id, "
            "    last_synced_at = now(), updated_at = now() "
            "WHERE vault_state.last_sync_id IS NULL OR vault_state.last_sync_id < EXCLUDED.last_sync_id",
            (repo, branch, to_commit, sync_id))
    summary = {"sync_id": sync_id, "commit": to_commit, "files_processed": files,
               "chunks_indexed": total_chunks, "failed": total_failed}
    log.info("vault sync %d to %s: %d files processed, %d chunks indexed%s", sync_id, to_commit[:12], files,
             total_chunks, f", {total_failed} failed" if total_failed else "")
    return summary


def latest_requested_commit(db: Database, repo: str, branch: str) -> str | None:
    with db.connect() as conn:
        row = conn.execute("SELECT to_commit FROM vault_syncs WHERE repo = %s AND branch = %s "
                           "ORDER BY id DESC LIMIT 1", (repo, branch)).fetchone()
    return row[0] if row else None


def synced_commit(db: Database, repo: str, branch: str) -> tuple[str | None, object]:
    with db.connect() as conn:
        row = conn.execute("SELECT last_commit, last_synced_at FROM vault_state WHERE repo = %s AND branch = %s",
                           (repo, branch)).fetchone()
    return (row[0], row[1]) if row else (None, None)


def open_sync(db: Database, repo: str, branch: str) -> tuple[int, int] | None:
    """(id, runs requested) of the latest sync still waiting for runs, if any."""
    with db.connect() as conn:
        row = conn.execute("SELECT id, runs_requested FROM vault_syncs WHERE repo = %s AND branch = %s "
                           "ORDER BY id DESC LIMIT 1", (repo, branch)).fetchone()
        if row is None:
            return None
        open_ = conn.execute("SELECT finished_at IS NULL AND abandoned_at IS NULL FROM vault_syncs WHERE id = %s",
                             (row[0],)).fetchone()[0]
    return (row[0], row[1]) if open_ else None


def abandon_sync(db: Database, sync_id: int, why: str) -> None:
    with db.transaction() as conn:
        conn.execute("UPDATE vault_syncs SET abandoned_at = now(), reason = concat_ws('; ', reason, %s::text) "
                     "WHERE id = %s", (why, sync_id))
    log.warning("vault sync %d abandoned: %s", sync_id, why)

