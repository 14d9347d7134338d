"""Bad input in a real vault repository, synced through `run_sync` (what
`library vault sync` and the post-receive hook run): each bad note fails or
is skipped alone with a readable reason, and everything else lands."""

from __future__ import annotations

import dataclasses

import dagster as dg

from library_pipeline.defs.vault import VaultResource
from library_pipeline.resources import EmbedderResource
from library_pipeline.launch.vault_runner import run_sync
from library_pipeline_tests.vault_helpers import commit_all, init_repo, last_sync, notes, write
from serving.search.engine import search
from serving.search.types import SearchConfig

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + bytes(64)


def test_bad_input_fails_or_skips_alone(make_db, embedder, tmp_path):
    db = make_db()
    repo = init_repo(tmp_path / "vault")
    write(repo / "plain note.md", "No front matter at all, just a sentence about the walrus migration.\n")
    write(repo / "broken yaml.md", "---\ntitle: [unclosed\ntags: x\n---\n## Body\n\nThe albatross glides.\n")
    write(repo / "huge.md", "# Huge\n\n" + ("lorem ipsum dolor sit amet " * 200_000))  # 5.4 MB
    write(repo / "Заметки/Кириллица cp1251.md",
          "## Погода\n\nСегодня шёл снег и дул северный ветер над заливом.\n".encode("cp1251"))
    write(repo / "binary note.md", b"\x00\x01\x02 not text \x00" * 50)
    write(repo / "attachments/photo.png", PNG)
    write(repo / "views/All notes.base", "views:\n  - type: table\n")
    write(repo / "boards/Plan.canvas", '{"nodes": [], "edges": []}')
    write(repo / ".obsidian/app.json", "{}")
    write(repo / "folder with spaces/ünïcödé — «name».md", "## Section\n\nThe narwhal tusk is a tooth.\n")
    commit_all(repo, "bad input")

    with dg.DagsterInstance.ephemeral() as instance:
        summary = run_sync(db, VaultResource.from_settings(dataclasses.replace(db.settings, vault_repo=repo)), instance=instance,
                           embedder=EmbedderResource.from_settings(db.settings))
    rows = notes(db)
    assert summary["mode"] == "full" and summary["complete"]
    assert summary["failed_runs"] == []  # bad notes fail alone inside one range run
    assert rows["plain note.md"]["status"] == "ingested" and rows["plain note.md"]["error"] is None
    assert rows["broken yaml.md"]["status"] == "ingested" and "not valid YAML" in rows["broken yaml.md"]["error"]
    assert rows["huge.md"]["status"] == "failed" and "5.1 MB, over the 2 MB limit" in rows["huge.md"]["error"]
    assert rows["huge.md"]["live"] == 0
    cyr = rows["Заметки/Кириллица cp1251.md"]
    assert cyr["status"] == "ingested" and "not UTF-8" in cyr["error"]
    assert rows["binary note.md"]["status"] == "failed" and "binary" in rows["binary note.md"]["error"]
    assert rows["folder with spaces/ünïcödé — «name».md"]["status"] == "ingested"
    skipped = last_sync(db)["skipped"]
    assert "attachment (.png)" in skipped["attachments/photo.png"]
    assert "Obsidian Base" in skipped["views/All notes.base"]
    assert "Obsidian Canvas" in skipped["boards/Plan.canvas"]
    assert "hidden folder" in skipped[".obsidian/app.json"]
    assert summary["files_processed"] == 6 and summary["failed"] == 2
    assert sorted(p for p, _ in summary["failures"]) == ["binary note.md", "huge.md"]

    with db.connect() as conn:
        hits = search(conn, embedder, "снег северный ветер", top_k=5, config=SearchConfig(rerank=False)).results
        assert hits and hits[0].path == "Заметки/Кириллица cp1251.md"
        lang = conn.execute("SELECT language, ts_config::text FROM documents WHERE path = %s",
                            ("Заметки/Кириллица cp1251.md",)).fetchone()
        assert lang == ("ru", "russian")
        hits = search(conn, embedder, "albatross glides", top_k=5, config=SearchConfig(rerank=False)).results
        assert hits[0].path == "broken yaml.md"

    # fixing the huge note lets it land; the failure reason goes away
    write(repo / "huge.md", "# Huge\n\nNow a short note about the pangolin.\n")
    commit_all(repo, "shrink huge note")
    with dg.DagsterInstance.ephemeral() as instance:
        summary = run_sync(db, VaultResource.from_settings(dataclasses.replace(db.settings, vault_repo=repo)), instance=instance,
                           embedder=EmbedderResource.from_settings(db.settings))
    assert summary["mode"] == "incremental" and summary["requested"] == 1
    assert notes(db)["huge.md"]["status"] == "ingested" and notes(db)["huge.md"]["error"] is None

    # --full compares every note with the index: only the still-broken note is retried
    with dg.DagsterInstance.ephemeral() as instance:
        summary = run_sync(db, VaultResource.from_settings(dataclasses.replace(db.settings, vault_repo=repo)), instance=instance, full=True,
                           embedder=EmbedderResource.from_settings(db.settings))
    assert (summary["mode"], summary["reason"], summary["requested"]) == ("full", "--full", 1)
    assert [p for p, _ in summary["failures"]] == ["binary note.md"]


class _Crash(RuntimeError):
    pass


def test_crash_inside_the_swap_keeps_the_previous_version(make_db, embedder, tmp_path):
    from library_pipeline.vault.git import GitRepo
    from library_pipeline.vault.store import index_note

    db = make_db()
    repo = init_repo(tmp_path / "vault")
    write(repo / "n.md", "## One\n\nThe first version mentions the okapi.\n")
    commit_all(repo, "v1")
    with dg.DagsterInstance.ephemeral() as instance:
        run_sync(db, VaultResource.from_settings(dataclasses.replace(db.settings, vault_repo=repo)), instance=instance, embedder=EmbedderResource.from_settings(db.settings))
    write(repo / "n.md", "## One\n\nThe second version mentions the axolotl.\n")
    head = commit_all(repo, "v2")

    def crash(stage: str) -> None:
        if stage == "inside_swap":
            raise _Crash(stage)

    key = notes(db)["n.md"]["key"]
    try:
        index_note(db, GitRepo(repo), head, key, embedder, max_bytes=1 << 20, crash_hook=crash)
    except _Crash:
        pass
    else:
        raise AssertionError("the crash hook did not fire")
    row = notes(db)["n.md"]
    assert row["version"] == 1 and row["live"] == 1 and row["superseded"] == 0
    with db.connect() as conn:
        assert "okapi" in conn.execute("SELECT content FROM passages WHERE NOT superseded").fetchone()[0]
    result = index_note(db, GitRepo(repo), head, key, embedder, max_bytes=1 << 20)
    assert result.status == "ok" and notes(db)["n.md"]["version"] == 2
