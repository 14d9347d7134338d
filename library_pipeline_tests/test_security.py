"""Security against a real library: no path traversal through tool arguments, a
hypothesis fuzz of search against the real database, and memory scope isolation
under concurrent agents. The rules that need no database (tokens, limits, SQL
built with parameters, the parser fuzz, secrets in logs) are
library_pipeline_tests/unit/test_security_rules.py."""

from __future__ import annotations

import threading
import uuid

import dagster as dg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from library_pipeline_tests.conftest import new_database
from library_pipeline_tests.ingest_helpers import ingest, write
from serving.memory import service as memsvc
from serving.runtime import Library
from serving.search.types import SearchError, SearchFilters, Viewer

TIDE = "The harbour master kept tide tables for the northern coast; high water came at dawn. " * 12


@pytest.fixture(scope="module")
def small_library(server_db, tmp_path_factory, embedder):
    """Two ingested files, through the real pipeline."""
    lib_dir = tmp_path_factory.mktemp("security") / "library"
    db = new_database(server_db, lib_dir)
    write(lib_dir / "harbour tides.txt", TIDE)
    write(lib_dir / "notes/lighthouse.md", "# Lighthouse\n\nThe keeper trimmed the lantern wick at dusk. " * 10)
    with dg.DagsterInstance.ephemeral() as instance:
        assert ingest(db, instance)["ingested"] == 2
    lib = Library(db.settings, embedder=embedder)
    yield lib
    lib.close()


# -- path traversal ----------------------------------------------------------------------

TRAVERSALS = ["../../etc/passwd", "/etc/passwd", "..\\..\\etc\\passwd", "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
              "notes/../../../../etc/shadow", "~/.ssh/id_rsa", "file:///etc/passwd", "\x00../etc/passwd"]


@pytest.mark.parametrize("pattern", TRAVERSALS)
def test_tool_arguments_cannot_reach_outside_the_library(small_library, pattern):
    files = small_library.files(pattern)
    assert files["matched"] == 0 and files["files"] == []
    with pytest.raises(SearchError, match="no document with path|library_files|NUL"):
        small_library.search("password", filters=SearchFilters.from_mapping({"path": pattern}))
    result = small_library.search(pattern, top_k=5).to_dict()
    text = repr(result)
    assert "root:x:0:0" not in text and "PRIVATE KEY" not in text
    assert {r["path"] for r in result["results"]} <= {"harbour tides.txt", "notes/lighthouse.md"}


# -- fuzzing search against the database ---------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(query=st.one_of(st.text(min_size=1, max_size=200),
                       st.sampled_from(["'; DROP TABLE passages; --", "a' OR '1'='1", "!&|:*()<->", "\\x00",
                                        "$$ SELECT pg_sleep(10) $$", "tide & !tables", "tide:* | harbour"])),
       filters=st.one_of(st.none(), st.fixed_dictionaries({}, optional={
           "source": st.sampled_from(["library", "vault", "memory"]),
           "kind": st.text(max_size=8), "document_id": st.integers(min_value=-2**63, max_value=2**63 - 1),
           "include_removed": st.booleans(), "scope": st.sampled_from(["self", "department", "global"])})))
def test_fuzz_search_against_the_database(small_library, query, filters):
    try:
        result = small_library.search(query, top_k=5, filters=SearchFilters.from_mapping(filters))
    except SearchError:
        return
    assert len(result.results) <= 5
    with small_library.connection() as conn:
        assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 2


# -- memory scopes under concurrency ----------------------------------------------------------

def test_scope_isolation_under_concurrency(small_library):
    """Six agents in two departments index and search at the same time; nobody ever
    sees another agent's `self` record or another department's record."""
    lib = small_library
    agents = [Viewer(agent=f"agent{i}", department=f"dept{i % 2}") for i in range(6)]
    run = uuid.uuid4().hex[:6]
    seen: list[tuple[Viewer, dict]] = []
    errors: list[BaseException] = []
    own_ids: dict[str, list[int]] = {}
    barrier = threading.Barrier(len(agents))

    def work(me: Viewer) -> None:
        try:
            barrier.wait()
            for n in range(3):
                for scope in ("self", "department", "global"):
                    out = memsvc.memory_index(
                        lib, me, artifact_id=f"{run}-{me.agent}-{scope}-{n}", scope=scope,
                        content=f"Tide observation {n} by {me.agent} ({scope}, {me.department}): the harbour "
                                f"flooded at dawn; marker {run}.")
                    if scope == "self":
                        own_ids.setdefault(me.agent, []).append(out["id"])
                found = memsvc.memory_search(lib, me, f"tide observation harbour marker {run}", top_k=50)
                seen.extend((me, r) for r in found["results"])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(a,)) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert seen
    for me, r in seen:
        meta = r["meta"]
        if meta["scope"] == "self":
            assert meta["agent"] == me.agent, (me, meta)
        elif meta["scope"] == "department":
            author = next(a for a in agents if a.agent == meta["agent"])
            assert author.department == me.department, (me, meta)
    # another agent's self record reads as absent, by id too
    stranger = agents[1]
    for victim, ids in own_ids.items():
        if victim == stranger.agent:
            continue
        with pytest.raises(SearchError):
            memsvc.memory_get(lib, stranger, ids[0])
