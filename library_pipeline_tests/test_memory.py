"""Agent memory through serving.memory: index (chunked, embedded, searchable at once),
versions, exact dedup, search through the one search path, get, forget, identity
files, scopes in SQL, bad input (clear errors, nothing partially written), and the
`library memory` CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from library_pipeline_tests.search_fixtures import create_database
from serving.memory import (IdentityError, MemoryInputError, MemoryNotFound, Viewer, forget_memory, get_memory,
                            index_memory, load_identities, parse_identities, search_memory)
from serving.memory.chunk import split_memory
from serving.memory.store import MAX_CONTENT_CHARS, record_score

A = Viewer("Agent-Scout", "marketing")
A2 = Viewer("Agent-Analyst", "marketing")
B = Viewer("Agent-Ops", "operations")
NOBODY = Viewer()


@pytest.fixture(scope="module")
def mdb(server_db):
    return create_database(server_db)


@pytest.fixture()
def conn(mdb):
    with mdb.connect(autocommit=True) as c:
        yield c


def _counts(conn) -> tuple[int, int, int]:
    return tuple(conn.execute("SELECT (SELECT count(*) FROM memories), (SELECT count(*) FROM passages), "
                              "(SELECT count(*) FROM memory_access_log)").fetchone())


def test_index_is_searchable_at_once_with_meta_and_access_log(conn, embedder):
    r = index_memory(conn, embedder, A, artifact_id="cs-1", scope="department",
                     content="TikTok seeding campaigns by competitors in the UAE cost 2,000 dollars a month.",
                     meta={"type": "competitor_report", "task_id": "t-42", "date": "2026-04-14"})
    assert r.status == "created" and r.chunks == 1
    found = search_memory(conn, embedder, A2, "TikTok seeding competitors pricing UAE", top_k=5,
                          filter={"scope": ["department", "global"], "type": "competitor_report",
                                  "min_relevance": 0.3})
    top = found["results"][0]
    assert top["id"] == r.record["id"] and "TikTok" in top["content"] and top["score"] > 0
    assert top["meta"]["agent"] == A.agent and top["meta"]["task_id"] == "t-42"
    assert top["meta"]["date"] == "2026-04-14" and top["meta"]["type"] == "competitor_report"
    assert found["returned"] == len(found["results"]) and found["total_found"] >= found["returned"]
    row = conn.execute("SELECT access_count, accessed_at IS NOT NULL FROM memories WHERE id = %s",
                       (r.record["id"],)).fetchone()
    assert row == (1, True)
    log = conn.execute("SELECT agent, department, action, query FROM memory_access_log WHERE memory_id = %s",
                       (r.record["id"],)).fetchall()
    assert log == [(A2.agent, A2.department, "search", "TikTok seeding competitors pricing UAE")]
    # other filters exclude it
    assert search_memory(conn, embedder, A2, "TikTok seeding", filter={"type": "other"})["results"] == []
    assert search_memory(conn, embedder, A2, "TikTok seeding", filter={"scope": "self"})["total_found"] == 0
    assert search_memory(conn, embedder, A2, "TikTok seeding", filter={"min_relevance": 1.0})["returned"] == 1


def test_scopes_hide_records_in_search_get_and_counts(conn, embedder):
    mine = index_memory(conn, embedder, A, artifact_id="secret-1", scope="self",
                        content="zebrafinch protocol: the launch code is in the blue folder")
    dept = index_memory(conn, embedder, A, artifact_id="secret-2", scope="department",
                        content="zebrafinch budget for the marketing department")
    for viewer, expected in ((A, {mine.record["id"], dept.record["id"]}), (A2, {dept.record["id"]}),
                             (B, set()), (NOBODY, set())):
        if viewer is NOBODY:
            with pytest.raises(MemoryInputError, match="no agent identity"):
                search_memory(conn, embedder, viewer, "zebrafinch")
            continue
        res = search_memory(conn, embedder, viewer, "zebrafinch", top_k=50,
                            filter={"include_archived": True, "include_cold": True, "include_superseded": True})
        ids = {r["id"] for r in res["results"]}
        assert expected <= ids
        hidden = {mine.record["id"], dept.record["id"]} - expected
        assert not ids & hidden
        assert all(r["meta"]["scope"] == "global" or r["meta"]["agent"] == viewer.agent
                   or (r["meta"]["scope"] == "department" and viewer.department == "marketing")
                   for r in res["results"])
    # get: a hidden record reads exactly like a missing one
    with pytest.raises(MemoryNotFound) as hidden:
        get_memory(conn, B, mine.record["id"])
    with pytest.raises(MemoryNotFound) as missing:
        get_memory(conn, B, 99_999_999)
    assert str(hidden.value).replace(str(mine.record["id"]), "N") == str(missing.value).replace("99999999", "N")
    with pytest.raises(MemoryNotFound):
        get_memory(conn, B, "secret-1")
    got = get_memory(conn, A, "secret-1")
    assert got["content"].startswith("zebrafinch protocol") and got["meta"]["scope"] == "self"
    # B indexing an artifact with A's id is B's own artifact, not a clash (or a leak)
    b_own = index_memory(conn, embedder, B, artifact_id="secret-1", scope="self", content="ops runbook v1")
    assert b_own.status == "created" and b_own.record["agent"] == B.agent
    assert get_memory(conn, B, "secret-1")["content"] == "ops runbook v1"
    assert get_memory(conn, A, "secret-1")["content"].startswith("zebrafinch")
    # library_search-style: a memory passage is invisible through the plain search path too
    from serving.search import search
    from serving.search.types import SearchFilters

    resp = search(conn, embedder, "zebrafinch launch code", top_k=20,
                  filters=SearchFilters(sources=("memory",), viewer=B))
    assert all(r.passage_id not in _passages(conn, mine.record["id"]) for r in resp.results)


def _passages(conn, memory_id: int) -> set[int]:
    return {r[0] for r in conn.execute("SELECT id FROM passages WHERE memory_id = %s", (memory_id,))}


def test_versions_supersede_and_exact_duplicates_merge(conn, embedder):
    v1 = index_memory(conn, embedder, A, artifact_id="plan", scope="global", content="Plan: ship in May.",
                      meta={"type": "plan"})
    same = index_memory(conn, embedder, A, artifact_id="plan", scope="global", content="  plan:   SHIP in may. ",
                        meta={"owner": "scout"})
    assert same.status == "unchanged" and same.record["id"] == v1.record["id"]
    assert same.record["meta"]["owner"] == "scout" and same.record["meta"]["type"] == "plan"
    v2 = index_memory(conn, embedder, A, artifact_id="plan", scope="global", content="Plan: ship in June.")
    assert v2.status == "new_version" and v2.record["version"] == 2 and v2.superseded == v1.record["id"]
    old = conn.execute("SELECT superseded FROM memories WHERE id = %s", (v1.record["id"],)).fetchone()[0]
    assert old is True
    assert {r[0] for r in conn.execute("SELECT superseded FROM passages WHERE memory_id = %s",
                                       (v1.record["id"],))} == {True}
    res = search_memory(conn, embedder, B, "ship plan May June", top_k=10)
    ids = [r["id"] for r in res["results"]]
    assert v2.record["id"] in ids and v1.record["id"] not in ids
    res = search_memory(conn, embedder, B, "ship plan May June", top_k=10, filter={"include_superseded": True})
    assert v1.record["id"] in [r["id"] for r in res["results"]]
    got = get_memory(conn, B, "plan")
    assert got["id"] == v2.record["id"] and [v["version"] for v in got["versions"]] == [1, 2]
    # another agent's identical text in global: the existing record comes back, meta merged
    dup = index_memory(conn, embedder, B, artifact_id="ops-plan", scope="global", content="PLAN: ship in June.",
                       meta={"task_id": "t-9"})
    assert dup.status == "duplicate" and dup.record["id"] == v2.record["id"]
    assert dup.record["meta"]["task_id"] == "t-9"
    assert {"agent": B.agent, "artifact_id": "ops-plan"} in dup.record["meta"]["also_indexed_as"]
    # same text in another scope is a different record
    other = index_memory(conn, embedder, B, artifact_id="ops-plan-self", scope="self", content="Plan: ship in June.")
    assert other.status == "created"
    n = conn.execute("SELECT count(*) FROM memories WHERE scope = 'global' AND content_hash = "
                     "memory_content_hash('plan: ship in june.') AND NOT superseded").fetchone()[0]
    assert n == 1


def test_long_artifact_is_chunked_and_each_part_is_found(conn, embedder):
    parts = [f"Section {i}: " + " ".join(f"token{i}x{j}" for j in range(60)) + "." for i in range(12)]
    parts[9] += " The warehouse in Jebel Ali flooded on Tuesday."
    text = "\n\n".join(parts)
    r = index_memory(conn, embedder, A, artifact_id="long-1", scope="self", content=text)
    assert r.chunks > 3
    rows = conn.execute("SELECT content FROM passages WHERE memory_id = %s ORDER BY ordinal",
                        (r.record["id"],)).fetchall()
    assert len(rows) == r.chunks and all(embedder.count_tokens(c) <= embedder.max_tokens for c, in rows)
    res = search_memory(conn, embedder, A, "Jebel Ali warehouse flooded", top_k=3)
    assert res["results"][0]["id"] == r.record["id"] and "Jebel Ali" in res["results"][0]["content"]
    assert [x["id"] for x in res["results"]].count(r.record["id"]) == 1  # one result per record
    assert get_memory(conn, A, r.record["id"])["content"] == text
    assert split_memory("short", embedder) == (["short"], False)



def test_transcript_is_cut_between_lines_each_passage_with_its_first_line(conn, embedder):
    """A session saved as one note: one 254-token window held ~20 turns and its one vector
    stood for all of them; cut between lines, each turn is a passage of its own that still
    says which session it was (the note's first line as its heading). Prose keeps windows."""
    header = "team-sync, session 4, 3 March 2025"
    lines = [f"{'Dana' if i % 2 else 'Omar'}: update {i} on the quarterly budget, the hiring plan and "
             f"the office move, nothing decided yet about item {i}." for i in range(40)]
    lines[23] = "Dana: The warehouse in Jebel Ali flooded on Tuesday, so the shipment is late."
    text = "\n".join([header, *lines])
    chunks, by_lines = split_memory(text, embedder, max_chunks=400)
    assert by_lines and len(chunks) > 10
    assert all(set(c.split("\n")) <= {header, *lines} for c in chunks)   # whole lines only
    assert all(embedder.count_tokens(c) <= embedder.max_tokens for c in chunks)
    r = index_memory(conn, embedder, A, artifact_id="sync-4", scope="self", content=text, meta={"type": "session"})
    headings = {h for h, in conn.execute("SELECT heading FROM passages WHERE memory_id = %s", (r.record["id"],))}
    assert headings == {f"session — {header}"}
    res = search_memory(conn, embedder, A, "When did the Jebel Ali warehouse flood?", top_k=3)
    top = res["results"][0]
    assert top["id"] == r.record["id"] and "Jebel Ali" in top["content"] and len(top["content"]) < 300
    # prose (one long line) is cut into overlapping windows, headed by its type alone
    prose = " ".join(f"word{i} of a long paragraph about shipping." for i in range(120))
    chunks, by_lines = split_memory(prose, embedder)
    assert not by_lines and len(chunks) > 1
    p = index_memory(conn, embedder, A, artifact_id="prose-1", scope="self", content=prose, meta={"type": "note"})
    assert {h for h, in conn.execute("SELECT heading FROM passages WHERE memory_id = %s",
                                     (p.record["id"],))} == {"note"}


def test_record_score_best_passage_then_half_and_quarter():
    assert record_score([0.7]) == 0.7                         # one passage: its own score
    assert record_score([0.2, 0.9, 0.5, 0.1]) == pytest.approx(0.9 + 0.25 + 0.05)

BAD = [
    (A, dict(artifact_id="e1", content="", scope="self"), "content is empty"),
    (A, dict(artifact_id="e2", content=" \n\t", scope="self"), "content is empty"),
    (A, dict(artifact_id="e3", content="x" * (10 * 1024 * 1024), scope="self"), "limit is"),
    (A, dict(artifact_id="e4", content="hello", scope="team"), "unknown scope 'team'"),
    (A, dict(artifact_id="e5", content="hello", scope=None), "unknown scope"),
    (NOBODY, dict(artifact_id="e6", content="hello", scope="self"), "no agent identity"),
    (None, dict(artifact_id="e6", content="hello", scope="self"), "no agent identity"),
    (Viewer("solo"), dict(artifact_id="e7", content="hello", scope="department"), "no department"),
    (A, dict(artifact_id="e8", content="hello", scope="self", meta="{not json"), "meta must be a JSON object"),
    (A, dict(artifact_id="e9", content="hello", scope="self", meta=[1, 2]), "meta must be an object"),
    (A, dict(artifact_id="e10", content="hello", scope="self", meta={"date": "yesterday"}), "meta.date"),
    (A, dict(artifact_id="e11", content="hello", scope="self", meta={"type": 5}), "meta.type"),
    (A, dict(artifact_id="e12", content="hello", scope="self", meta={"agent": "Agent-Ops"}), "may not set 'agent'"),
    (A, dict(artifact_id="e13", content="hello", scope="self", meta={"x": float("nan")}), "JSON values"),
    (A, dict(artifact_id="e14", content="bad \udcff surrogate", scope="self"), "not valid UTF-8"),
    (A, dict(artifact_id="e15", content=b"\xff\xfe bytes", scope="self"), "not valid UTF-8"),
    (A, dict(artifact_id="e16", content="nul \x00 inside", scope="self"), "NUL"),
    (A, dict(artifact_id="", content="hello", scope="self"), "artifact_id is empty"),
    (A, dict(artifact_id="x" * 500, content="hello", scope="self"), "artifact_id must be"),
    (A, dict(artifact_id=None, content="hello", scope="self"), "artifact_id must be a string"),
    (A, dict(artifact_id="e17", content=12345, scope="self"), "content must be a string"),
]


@pytest.mark.parametrize("viewer,kwargs,needle", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_is_refused_and_nothing_is_written(conn, embedder, viewer, kwargs, needle):
    before = _counts(conn)
    with pytest.raises(MemoryInputError) as err:
        index_memory(conn, embedder, viewer, **kwargs)
    assert needle in str(err.value)
    assert _counts(conn) == before


def test_bad_search_and_get_input(conn, embedder):
    for flt, needle in (({"colour": "red"}, "unknown filter 'colour'"), ({"scope": "team"}, "unknown scope"),
                        ({"min_relevance": 2}, "between 0 and 1"), ({"include_cold": "yes"}, "true or false"),
                        ("scope=self", "filter must be an object"), ({"type": 5}, "string")):
        with pytest.raises(MemoryInputError, match=needle if needle != "unknown scope" else "unknown scope"):
            search_memory(conn, embedder, A, "anything", filter=flt)
    with pytest.raises(MemoryInputError, match="top_k"):
        search_memory(conn, embedder, A, "anything", top_k=0)
    with pytest.raises(MemoryInputError, match="query is empty"):
        search_memory(conn, embedder, A, "   ")
    with pytest.raises(MemoryNotFound):
        get_memory(conn, A, "no-such-artifact")


def test_forget_says_what_it_removes_and_only_for_the_author(conn, embedder):
    r1 = index_memory(conn, embedder, A, artifact_id="gone", scope="global", content="temporary note one")
    index_memory(conn, embedder, A, artifact_id="gone", scope="global", content="temporary note two")
    with pytest.raises(MemoryInputError, match="only its author"):
        forget_memory(conn, B, "gone")
    preview = forget_memory(conn, A, "gone", dry_run=True)
    assert preview["memories"] == 2 and preview["passages"] == 2 and preview["dry_run"]
    assert conn.execute("SELECT count(*) FROM memories WHERE artifact_id = 'gone'").fetchone()[0] == 2
    done = forget_memory(conn, A, r1.record["id"])
    assert done["memories"] == 2 and [v["version"] for v in done["versions"]] == [1, 2]
    assert conn.execute("SELECT count(*) FROM memories WHERE artifact_id = 'gone'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM passages WHERE memory_id = ANY(%s)",
                        ([v["id"] for v in done["versions"]],)).fetchone()[0] == 0


def test_identity_files(tmp_path, monkeypatch):
    toml = tmp_path / "ids.toml"
    toml.write_text('[tokens."tok-aaaa-1111"]\nagent = "Agent-Scout"\ndepartment = "marketing"\n'
                    '[tokens."tok-bbbb-2222"]\nagent = "Agent-Ops"\n')
    ids = load_identities(toml)
    assert ids.lookup("tok-aaaa-1111") == Viewer("Agent-Scout", "marketing")
    assert ids.lookup("tok-bbbb-2222") == Viewer("Agent-Ops", None)
    assert ids.lookup("tok-unknown") is None and ids.lookup(None) is None
    js = tmp_path / "ids.json"
    js.write_text(json.dumps({"tokens": {"tok-cccc-3333": {"agent": "X", "department": "d"}}}))
    monkeypatch.setenv("LIBRARY_IDENTITIES", str(js))
    assert load_identities().lookup("tok-cccc-3333") == Viewer("X", "d")
    for raw, needle in (({}, "tokens"), ({"tokens": {"short": {"agent": "x"}}}, "shorter"),
                        ({"tokens": {"long-enough-token": {"department": "d"}}}, "agent"),
                        ({"tokens": {"long-enough-token": "x"}}, "must map")):
        with pytest.raises(IdentityError, match=needle):
            parse_identities(raw)
    (tmp_path / "bad.toml").write_text("tokens = [")
    with pytest.raises(IdentityError, match="not valid TOML"):
        load_identities(tmp_path / "bad.toml")
    with pytest.raises(IdentityError, match="cannot read"):
        load_identities(tmp_path / "missing.toml")


def test_cli_index_search_get_forget(mdb, tmp_path, monkeypatch):
    from serving.memory_cli import memory_app

    monkeypatch.setenv("LIBRARY_DB_DSN", mdb.settings.db_dsn)
    monkeypatch.setenv("LIBRARY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LIBRARY_AGENT", "Agent-Cli")
    monkeypatch.setenv("LIBRARY_DEPARTMENT", "qa")
    note = tmp_path / "note.txt"
    note.write_text("The nightly regression run takes forty minutes on the staging cluster.", encoding="utf-8")
    runner = CliRunner()
    out = runner.invoke(memory_app, ["index", "cli-1", str(note), "--scope", "department",
                                     "--meta", '{"type": "ops-note"}'])
    assert out.exit_code == 0, out.output
    rec = json.loads(out.stdout)
    assert rec["status"] == "created"
    out = runner.invoke(memory_app, ["search", "nightly regression duration", "--type", "ops-note"])
    assert out.exit_code == 0 and json.loads(out.stdout)["results"][0]["id"] == rec["id"]
    out = runner.invoke(memory_app, ["get", "cli-1", "--agent", "Agent-Other", "--department", "sales"])
    assert out.exit_code == 2 and "no memory 'cli-1' is visible" in out.output
    out = runner.invoke(memory_app, ["forget", "cli-1"])
    assert out.exit_code == 0 and json.loads(out.stdout)["dry_run"] is True
    out = runner.invoke(memory_app, ["forget", "cli-1", "--yes"])
    assert out.exit_code == 0 and json.loads(out.stdout)["memories"] == 1
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\xff\xfe\x00binary")
    out = runner.invoke(memory_app, ["index", "cli-2", str(bad)])
    assert out.exit_code == 2 and "not UTF-8" in out.output
    out = runner.invoke(memory_app, ["index", "cli-3", str(note), "--scope", "team"])
    assert out.exit_code == 2 and "unknown scope" in out.output


def test_memory_serving_never_imports_the_pipeline():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, json, serving.memory, serving.memory.service, serving.memory_cli, serving.mcp_server; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('library_pipeline', 'dagster'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=str(Path(__file__).resolve().parent.parent),
                         capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_search_can_span_library_passages(conn, embedder):
    from pgvector import HalfVector

    doc = conn.execute("INSERT INTO documents (path, partition_key, title, status) VALUES "
                       "('guides/dune-surfing.txt', 'dune', 'Dune surfing', 'ingested') RETURNING id").fetchone()[0]
    text = "Dune surfing near Liwa oasis: rent boards at the north car park."
    conn.execute("INSERT INTO passages (document_id, content, content_hash, embedding, embed_model, ts_config) "
                 "VALUES (%s, %s, 'h', %s, %s, 'english')",
                 (doc, text, HalfVector(embedder.encode_passages([text])[0]), embedder.name))
    mem = index_memory(conn, embedder, B, artifact_id="liwa", scope="self",
                       content="Team offsite idea: dune surfing at Liwa oasis in March.")
    only = search_memory(conn, embedder, B, "dune surfing Liwa oasis", top_k=5)
    assert {r["source"] for r in only["results"]} == {"memory"} and only["results"][0]["id"] == mem.record["id"]
    both = search_memory(conn, embedder, B, "dune surfing Liwa oasis", top_k=5, filter={"include_library": True})
    sources = {r["source"]: r for r in both["results"]}
    assert "library" in sources and sources["library"]["meta"]["path"] == "guides/dune-surfing.txt"
    assert mem.record["id"] in [r["id"] for r in both["results"]]


def test_the_error_type_does_not_shadow_the_builtin():
    """`MemoryInputError` is the refusal type; the old name stays importable from
    serving.memory for callers, and no module of the store rebinds the builtin."""
    import builtins

    from serving.memory import MemoryError as legacy
    from serving.memory import store, validation

    assert legacy is MemoryInputError and issubclass(MemoryNotFound, MemoryInputError)
    assert "MemoryError" not in vars(store) and "MemoryError" not in vars(validation)
    assert builtins.MemoryError is MemoryError
