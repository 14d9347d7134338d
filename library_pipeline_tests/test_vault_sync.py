"""Vault sync against a real git repository built from both test vaults: the
git-push sensor (build_sensor_context) and the real asset, the real embedder,
the real database, and searches through the serving search path."""

from __future__ import annotations

import dataclasses
import shutil
import time

import dagster as dg
import pytest

from library_pipeline.defs.ingest.partitions import partition_key_for
from library_pipeline.defs.vault import VaultResource, vault_freshness
from library_pipeline.defs.vault.assets import vault_lag
from library_pipeline.resources import EmbedderResource
from library_pipeline_tests.vault_helpers import (
    commit_all,
    copy_vaults,
    execute,
    git,
    init_repo,
    last_sync,
    notes,
    resources,
    sync_by_sensor,
    tick,
    write,
)
from serving.search.engine import search
from serving.search.types import SearchConfig

NO_RERANK = SearchConfig(rerank=False)


def _search(db, embedder, query, **filters):
    with db.connect() as conn:
        return search(conn, embedder, query, top_k=10, filters=filters or None, config=NO_RERANK).results


@pytest.fixture()
def instance():
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


@pytest.mark.slow  # 60-100 s on 2 shared cores: embeds every section of both vaults (173 notes)
def test_vault_lifecycle_through_the_sensor(make_db, embedder, test_data, tmp_path, instance):
    db = make_db()
    repo = init_repo(tmp_path / "vault")
    copy_vaults(test_data, repo)
    first_commit = commit_all(repo, "import both vaults")
    md_files = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*.md") if p.is_file() and ".git" not in p.parts)

    # -- initial sync: no cursor -> full comparison, every note indexed --------------------
    result, runs = sync_by_sensor(instance, db, repo, None)
    assert result.cursor == first_commit
    assert runs and all(r.success for r in runs)
    # 173 notes: ranges of at most 200 partitions, not 173 runs
    assert len(runs) == 1
    rows = notes(db)
    assert sorted(rows) == md_files
    assert {r["status"] for r in rows.values()} == {"ingested"}
    sync = last_sync(db)
    assert sync["mode"] == "full" and "missing cursor" in sync["reason"]
    assert sync["files_processed"] == len(md_files) and sync["finished_at"] is not None
    assert sync["chunks_indexed"] == sum(r["live"] for r in rows.values()) > len(md_files)
    assert "Obsidian Base" in sync["skipped"]["kepano_vault/Templates/Bases/Albums.base"]
    assert "attachment" in sync["skipped"]["kepano_vault/LICENSE.txt"]
    # broken YAML (kepano templates' `{{date}}`) is indexed, with the reason kept
    template = rows["kepano_vault/Templates/Movie Template.md"]
    assert template["status"] == "ingested" and "not valid YAML" in template["error"]
    with db.connect() as conn:
        state = conn.execute("SELECT last_commit FROM vault_state").fetchone()[0]
        links = dict(conn.execute("SELECT kind, count(*) FROM note_links GROUP BY kind").fetchall())
        scope_agent = set(conn.execute("SELECT DISTINCT scope, agent, kind FROM passages WHERE source = 'vault'"))
        resolved = conn.execute("SELECT count(*) FILTER (WHERE to_document IS NOT NULL), count(*) FROM note_edges "
                                "WHERE kind = 'link'").fetchone()
    assert state == first_commit
    assert links["link"] > 100 and links["embed"] > 20 and links["property"] > 20
    assert scope_agent == {("global", "vault", "note")}
    assert resolved[0] > resolved[1] // 2  # most wikilinks resolve to a note of the vault
    # nothing new: the next tick requests nothing
    quiet = tick(instance, db, repo, first_commit)
    assert isinstance(quiet, dg.SkipReason)

    # -- search finds a section by its content and a note by its title -------------------------
    hits = _search(db, embedder, "callouts nested collapsed multiple layers of nesting")
    assert any(h.path == "quartz_docs/features/callouts.md" and h.heading == "Showcase" for h in hits[:3]), \
        [(h.path, h.heading) for h in hits[:5]]
    hits = _search(db, embedder, "Mermaid diagrams")
    assert hits[0].path == "quartz_docs/features/Mermaid diagrams.md" and hits[0].source == "vault"

    # -- an edit: only that note is re-embedded; the old version superseded, still retrievable --
    darkmode = repo / "quartz_docs/features/darkmode.md"
    old_text = darkmode.read_text()
    darkmode.write_text(old_text + "\n## Lunar eclipse theme\n\nA zircon-tinted palette appears during lunar "
                        "eclipses, switching the site to twilight colours.\n")
    edit_commit = commit_all(repo, "edit darkmode")
    result, runs = sync_by_sensor(instance, db, repo, first_commit)
    key = partition_key_for("quartz_docs/features/darkmode.md")
    assert [r.partition_key for r in result.run_requests] == [key]
    assert result.cursor == edit_commit and runs[0].success
    meta = {k: v.value for k, v in runs[0].asset_materializations_for_node("vault_note_sections")[0].metadata.items()}
    assert meta["files_processed"] == 1 and meta["embedded"] == 1  # only the new section; the rest reused
    note = notes(db)["quartz_docs/features/darkmode.md"]
    assert note["version"] == 2 and note["superseded"] > 0
    assert last_sync(db)["files_processed"] == 1 and last_sync(db)["mode"] == "incremental"
    hits = _search(db, embedder, "zircon-tinted palette lunar eclipses")
    assert hits[0].path == "quartz_docs/features/darkmode.md" and "zircon" in hits[0].text
    # the old version is hidden from search by default, and found on request
    old_ids = {h.passage_id for h in _search(db, embedder, "dark mode toggle theme", include_superseded=True)}
    with db.connect() as conn:
        superseded = {r[0] for r in conn.execute(
            "SELECT id FROM passages WHERE document_id = %s AND superseded", (note["id"],))}
    assert old_ids & superseded
    assert not ({h.passage_id for h in _search(db, embedder, "dark mode toggle theme")} & superseded)

    # -- rename + edit in one commit keeps the note's history ------------------------------------
    git(repo, "mv", "quartz_docs/features/breadcrumbs.md", "quartz_docs/features/Хлебные крошки (breadcrumbs).md")
    moved = repo / "quartz_docs/features/Хлебные крошки (breadcrumbs).md"
    moved.write_text(moved.read_text().replace("breadcrumb", "breadcrumb trail", 1))
    rename_commit = commit_all(repo, "rename and edit breadcrumbs")
    before_id = notes(db)["quartz_docs/features/breadcrumbs.md"]["id"]
    result, runs = sync_by_sensor(instance, db, repo, edit_commit)
    assert all(r.success for r in runs) and result.cursor == rename_commit
    rows = notes(db)
    assert "quartz_docs/features/breadcrumbs.md" not in rows
    renamed = rows["quartz_docs/features/Хлебные крошки (breadcrumbs).md"]
    assert renamed["id"] == before_id and renamed["version"] == 2 and renamed["superseded"] > 0
    assert partition_key_for("quartz_docs/features/breadcrumbs.md") not in \
        instance.get_dynamic_partitions("vault_notes")
    with db.connect() as conn:
        paths = [r[0] for r in conn.execute(
            "SELECT path FROM vault_note_versions WHERE document_id = %s ORDER BY version", (before_id,))]
    assert paths == ["quartz_docs/features/breadcrumbs.md", "quartz_docs/features/Хлебные крошки (breadcrumbs).md"]
    assert last_sync(db)["renamed"] == 1

    # -- a commit that deletes half the vault ---------------------------------------------------
    victims = sorted(p for p in repo.joinpath("kepano_vault").rglob("*.md"))
    victims = victims[: len(victims) // 2] + sorted(repo.joinpath("quartz_docs/plugins").rglob("*.md"))
    for path in victims:
        path.unlink()
    delete_commit = commit_all(repo, "delete half")
    result, runs = sync_by_sensor(instance, db, repo, rename_commit)
    assert result.run_requests == [] and runs == []  # deletions need no run
    rows = notes(db)
    gone = {p.relative_to(repo).as_posix() for p in victims}
    assert {rows[p]["status"] for p in gone} == {"removed"}
    assert last_sync(db)["removed"] == len(gone) and last_sync(db)["finished_at"] is not None
    hits = _search(db, embedder, "ObsidianFlavoredMarkdown plugin callouts wikilinks", sources=["vault"])
    assert not {h.path for h in hits} & gone
    with db.connect() as conn:
        assert conn.execute("SELECT last_commit FROM vault_state").fetchone()[0] == delete_commit

    # -- a history rewrite (force-push): full comparison from the new head ------------------------
    git(repo, "reset", "-q", "--hard", rename_commit)  # the deletion never happened
    extra = write(repo / "quartz_docs/rewritten note.md", "# Rewritten\n\n## Origin\n\nWritten after a force-push "
                  "rewrote the branch: quokka telemetry.\n")
    rewrite_commit = commit_all(repo, "rewritten history")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")  # the old cursor commit no longer exists
    result, runs = sync_by_sensor(instance, db, repo, delete_commit)
    assert all(r.success for r in runs) and result.cursor == rewrite_commit
    sync = last_sync(db)
    assert sync["mode"] == "full" and "no longer exists" in sync["reason"]
    rows = notes(db)
    assert {rows[p]["status"] for p in gone} == {"ingested"}  # back from removed, history kept
    assert rows["quartz_docs/rewritten note.md"]["status"] == "ingested"
    assert sync["files_processed"] == len(gone) + 1
    assert extra.exists()
    hits = _search(db, embedder, "quokka telemetry force-push")
    assert hits[0].path == "quartz_docs/rewritten note.md"


def test_force_push_to_unrelated_history_and_freshness(make_db, embedder, tmp_path, instance):
    """A head that does not descend from the cursor (still present) -> full
    comparison; the freshness check fails while the head is > 24 h ahead."""
    db = make_db()
    repo = init_repo(tmp_path / "vault")
    write(repo / "a.md", "# A\n\nalpha note about harbours\n")
    write(repo / "b.md", "---\ntags: [x]\n---\nbeta note about lighthouses\n")
    old = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 48 * 3600))
    first = commit_all(repo, "two notes", date=old)
    vault = resources(db, repo)["vault"]
    library_db = resources(db, repo)["library_db"]

    # never synced, head two days old: the check fails, lag ~48 h
    check = vault_freshness(vault=vault, library_db=library_db)
    assert not check.passed and 47.5 < check.metadata["lag_hours"].value < 48.5

    result, runs = sync_by_sensor(instance, db, repo, None)
    assert all(r.success for r in runs)
    check = vault_freshness(vault=vault, library_db=library_db)
    assert check.passed and check.metadata["lag_hours"].value == 0.0

    # a side branch with different history replaces main, cursor commit still present
    git(repo, "checkout", "-q", "--orphan", "rewrite")
    git(repo, "rm", "-q", "-rf", ".")
    write(repo / "a.md", "# A\n\nalpha note about harbours\n")  # same blob as before
    write(repo / "c.md", "gamma note about tides\n")
    commit_all(repo, "rewritten", date=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 30 * 3600)))
    git(repo, "branch", "-f", "main", "rewrite")
    git(repo, "checkout", "-q", "main")
    # 30 h ahead of the synced commit: stale
    assert vault_lag(vault, db)["lag_hours"] > 24
    assert not vault_freshness(vault=vault, library_db=library_db).passed
    result, runs = sync_by_sensor(instance, db, repo, first)
    sync = last_sync(db)
    assert sync["mode"] == "full" and "not a descendant" in sync["reason"]
    assert [r.partition_key for r in result.run_requests] == [partition_key_for("c.md")]  # a.md unchanged
    rows = notes(db)
    assert rows["b.md"]["status"] == "removed" and rows["c.md"]["status"] == "ingested"
    assert rows["a.md"]["version"] == 1
    assert vault_freshness(vault=vault, library_db=library_db).passed


def test_unconfigured_or_empty_vault_skips(make_db, tmp_path, instance):
    db = make_db()
    res = resources(db, tmp_path)
    from library_pipeline.defs.vault.sensors import vault_push_sensor

    unconfigured = VaultResource.from_settings(dataclasses.replace(db.settings, vault_repo=None))
    with dg.build_sensor_context(instance=instance,
                                 resources={"library_db": res["library_db"], "vault": unconfigured}) as ctx:
        assert "LIBRARY_VAULT_REPO" in vault_push_sensor(ctx).skip_message
    repo = init_repo(tmp_path / "empty")
    assert "no commits" in tick(instance, db, repo).skip_message
    shutil.rmtree(repo / ".git")
    assert "not a git repository" in tick(instance, db, repo).skip_message


def test_sensor_retries_a_sync_whose_runs_failed(make_db, tmp_path, instance, monkeypatch):
    from library_pipeline.defs.vault import sensors

    db = make_db()
    repo = init_repo(tmp_path / "vault")
    write(repo / "a.md", "## A\n\nalpha note about harbours\n")
    head = commit_all(repo, "one note")
    first = tick(instance, db, repo, None)
    broken = EmbedderResource.from_settings(dataclasses.replace(
        db.settings, embed_backend="sentence-transformers", embed_model=str(tmp_path / "no-such-model")))
    runs = execute(instance, db, repo, first, embedder_resource=broken)
    assert runs and not runs[0].success  # the embedder cannot load: the whole run fails
    with db.connect() as conn:
        assert conn.execute("SELECT last_commit FROM vault_state").fetchone() is None
    # the cursor is at the head, but the sync never closed: retried once its runs are old enough
    assert isinstance(tick(instance, db, repo, first.cursor), dg.SkipReason)  # too recent (RETRY_AFTER_S)
    monkeypatch.setattr(sensors, "RETRY_AFTER_S", 0.0)
    retry = tick(instance, db, repo, first.cursor)
    assert [r.partition_key for r in retry.run_requests] == [partition_key_for("a.md")]
    sync = last_sync(db)
    assert "retry of sync" in sync["reason"]
    runs = execute(instance, db, repo, retry)
    assert runs[0].success
    with db.connect() as conn:
        assert conn.execute("SELECT last_commit FROM vault_state").fetchone()[0] == head
        abandoned = conn.execute("SELECT count(*) FROM vault_syncs WHERE abandoned_at IS NOT NULL").fetchone()[0]
    assert abandoned == 1
    assert isinstance(tick(instance, db, repo, retry.cursor), dg.SkipReason)  # closed: nothing to retry
