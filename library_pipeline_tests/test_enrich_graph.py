"""The knowledge graph on real books (Sherlock Holmes in English, Pushkin in
Russian): offline extraction with canonical types, incremental budgeted runs
that resume, entity resolution, the asset checks, the LLM path against a fake
Ollama server, and the graph queries (entity, one hop, paths, subgraph,
aggregates) through serving.graph, the MCP tools and the CLI."""

from __future__ import annotations

import asyncio
import json

import dagster as dg
import pytest
from mcp import Client

from library_pipeline.defs.enrich.assets import knowledge_graph
from library_pipeline.defs.enrich.checks import kg_no_dangling, kg_vocabulary_closed
from library_pipeline.defs.enrich.resources import GeneratorResource
from library_pipeline_tests.conftest import new_database
from library_pipeline_tests.enrich_fixtures import (FakeOllama, instance, llm_resource, partition_keys,  # noqa: F401 (fixture)
                                                    pushkin_excerpt, run_assets, sherlock_excerpt)
from library_pipeline_tests.ingest_helpers import ingest, latest_metadata, write
from serving import graph
from serving.mcp_server import build_server
from serving.runtime import Library

BOOK = "en/sherlock-scandal-in-bohemia.txt"
RU = "ru/pushkin-kapitanskaya-dochka.txt"


@pytest.fixture(scope="module")
def library(server_db, test_data, tmp_path_factory, instance):
    root = tmp_path_factory.mktemp("graph") / "library"
    sherlock_excerpt(test_data, root / BOOK)
    pushkin_excerpt(test_data, root / RU, chars=12000)
    db = new_database(server_db, root)
    assert ingest(db, instance)["failed"] == 0
    keys = partition_keys(db, [BOOK, RU])
    # a small budget first: the run stops mid-book and records where
    first = run_assets(db, instance, [knowledge_graph], keys,
                       run_config={"ops": {"knowledge_graph": {"config": {"budget": 40, "batch": 25}}}})
    assert first.success
    db.first_meta = latest_metadata(instance, "knowledge_graph")
    with db.connect() as conn:
        db.first_progress = conn.execute(
            "SELECT d.path, k.passages_done, k.next_ordinal, k.completed_at IS NOT NULL FROM kg_progress k "
            "JOIN documents d ON d.id = k.document_id ORDER BY d.path").fetchall()
    second = run_assets(db, instance, [knowledge_graph, kg_vocabulary_closed, kg_no_dangling], keys,
                        run_config={"ops": {"knowledge_graph": {"config": {"budget": 5000}}}})
    assert second.success
    db.second_result = second
    db.second_meta = latest_metadata(instance, "knowledge_graph")
    return db


def _entity(db, name):
    with db.connect() as conn:
        return graph.entity(conn, name)


def test_budget_stops_a_run_and_the_next_run_resumes(library):
    assert library.first_meta["passages_extracted"] == 40
    progress = {p: (done, nxt, complete) for p, done, nxt, complete in library.first_progress}
    assert progress[BOOK][0] == 40 and progress[BOOK][2] is False
    assert RU not in progress or progress[RU][0] == 0  # budget spent before the second file
    with library.connect() as conn:
        rows = conn.execute("SELECT k.passages_done, k.passages_total, k.completed_at IS NOT NULL FROM kg_progress k"
                            ).fetchall()
    assert len(rows) == 2 and all(done == total and complete for done, total, complete in rows)
    assert library.second_meta["coverage"] == 1.0
    assert library.second_meta["passages_extracted"] == sum(r[1] for r in rows) - 40


def test_english_people_and_places_have_canonical_types(library):
    irene = _entity(library, "Irene Adler")
    assert irene["found"] and irene["type"] == "person" and irene["mentions"] >= 3
    assert irene["files"] == [BOOK]
    assert _entity(library, "Holmes")["type"] == "person"
    places = {e["name"] for e in _top(library, "place")}
    assert places & {"London", "Bohemia", "Baker Street", "Briony Lodge", "St. John’s Wood", "Serpentine Avenue"}


def test_russian_people_and_places_have_canonical_types_and_nominative_names(library):
    people = {e["name"] for e in _top(library, "person")}
    places = {e["name"] for e in _top(library, "place")}
    assert {"Савельич", "Бопре"} & people, people
    assert {"Петербург", "Симбирск", "Оренбург"} & places, places
    # inflected forms resolved onto one nominative node
    with library.connect() as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM entities")}
    assert not {"Петербурге", "Петербурга", "Симбирске"} & names


def _top(db, type_):
    with db.connect() as conn:
        return graph.top_entities(conn, type=type_, limit=50)


def test_cooccurrence_relations_are_counted_and_ranked_by_files(library):
    with library.connect() as conn:
        out = graph.related(conn, "Irene Adler", relation="related_to")
    assert out["found"] and out["related"]
    top = out["related"][0]
    assert top["direction"] == "undirected" and top["files"] == 1 and top["count"] >= 1
    counts = [r["count"] for r in out["related"]]
    assert counts == sorted(counts, reverse=True)


def test_asset_checks_pass_and_report_coverage(library):
    checks = {e.check_name: e for e in library.second_result.get_asset_check_evaluations()}
    assert checks["kg_vocabulary_closed"].passed and checks["kg_no_dangling"].passed
    assert checks["kg_no_dangling"].metadata["coverage"].value == 1.0


def test_no_dangling_check_catches_an_orphan(library, instance):
    with library.transaction() as conn:
        conn.execute("INSERT INTO entities (name, name_norm, type) VALUES ('Nobody', 'nobody-orphan', 'person')")
    try:
        result = dg.materialize([kg_no_dangling], instance=instance, resources=_resources(library),
                                raise_on_error=False, selection=dg.AssetSelection.checks(kg_no_dangling))
        evaluation = result.get_asset_check_evaluations()[0]
        assert not evaluation.passed and evaluation.metadata["entities_without_sources"].value == 1
    finally:
        with library.transaction() as conn:
            conn.execute("DELETE FROM entities WHERE name_norm = 'nobody-orphan'")


def _resources(db):
    from library_pipeline.resources import EmbedderResource, LibraryDatabase

    return {"library_db": LibraryDatabase.from_settings(db.settings),
            "embedder": EmbedderResource.from_settings(db.settings), "llm": GeneratorResource.from_settings(db.settings)}


def test_paths_between_entities(library):
    with library.connect() as conn:
        direct = graph.path(conn, "Irene Adler", "Holmes")
        far = graph.path(conn, "Irene Adler", "Савельич")
        ambiguous = graph.path(conn, "Irene Adler", "zzzz-no-such")
    assert direct["found"] and direct["hops"] == 1
    step = direct["paths"][0][0]
    # "Holmes" is an alias of the one full name the story gives him
    assert {step["from"], step["to"]} == {"Irene Adler", "Sherlock Holmes"}
    assert not far["found"] and "3 hops" in far["note"]  # two books, no shared names
    assert not ambiguous["found"] and ambiguous["which"] == "target"
    with library.connect() as conn:
        # a 2-hop path exists between two of Irene's neighbours that never share a sentence
        neighbours = [r["entity"]["name"] for r in graph.related(conn, "Irene Adler", limit=50)["related"]]
        pair = None
        for a in neighbours:
            linked = {r["entity"]["name"] for r in graph.related(conn, a, limit=200)["related"]}
            b = next((n for n in neighbours if n != a and n not in linked), None)
            if b:
                pair = (a, b)
                break
        assert pair, "a pair of Irene's neighbours without a direct edge"
        two = graph.path(conn, *pair)
    assert two["found"] and two["hops"] == 2
    assert all(len(p) == 2 for p in two["paths"])


def test_subgraph_and_aggregates(library):
    with library.connect() as conn:
        sub = graph.subgraph(conn, "Holmes", depth=1, limit=10)
        deeper = graph.subgraph(conn, "Holmes", depth=2, limit=20)
        connected = graph.most_connected(conn, limit=5)
        stats = graph.stats(conn)
    names = {n["name"] for n in sub["nodes"]}
    assert sub["center"]["name"] == "Sherlock Holmes" and 2 <= len(names) <= 11
    assert all(e["source"] in names and e["target"] in names for e in sub["edges"])
    assert any("Sherlock Holmes" in (e["source"], e["target"]) for e in sub["edges"])
    assert len(deeper["nodes"]) >= len(sub["nodes"])
    assert connected[0]["degree"] >= connected[-1]["degree"]
    assert stats["files_extracted"] == 2 and set(stats["entity_types"]) <= set(graph.ENTITY_TYPES)


def test_lookup_of_partial_and_misspelt_names(library):
    with library.connect() as conn:
        partial = graph.resolve(conn, "Miss Irene Adler")
        typo = graph.resolve(conn, "Irene Adlr")
        absent = graph.entity(conn, "Hercule Poirot")
    assert partial["status"] in ("found", "ambiguous")
    names = [partial["entity"]["name"]] if partial["status"] == "found" else [c["name"] for c in partial["candidates"]]
    assert "Irene Adler" in names
    assert typo["status"] == "found" and typo["entity"]["name"] == "Irene Adler"
    assert absent["found"] is False and "no entity by that name" in absent["note"]
    assert absent["coverage"]["files_pending"] == 0 and "every ingested file is extracted" in absent["note"]


def test_graph_tools_over_mcp(library):
    lib = Library(library.settings)

    async def run():
        async with Client(build_server(lib)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"library_entity", "library_related", "library_path", "library_subgraph"} <= tools
            ent = json.loads((await client.call_tool("library_entity", {"name": "Irene Adler"})).content[0].text)
            rel = await client.call_tool("library_related", {"name": "Holmes", "relation": "friend_of"})
            path = json.loads((await client.call_tool("library_path", {"source": "Irene Adler",
                                                                       "target": "Holmes"})).content[0].text)
            sub = json.loads((await client.call_tool("library_subgraph", {"name": "Holmes"})).content[0].text)
            return ent, rel, path, sub

    try:
        ent, rel, path, sub = asyncio.run(run())
    finally:
        lib.close()
    assert ent["found"] and ent["type"] == "person"
    assert rel.is_error and "relation must be one of" in rel.content[0].text
    assert path["found"] and path["hops"] == 1
    assert sub["found"] and sub["nodes"]


def test_llm_extraction_path_maps_labels_and_keeps_direction(server_db, tmp_path):
    root = tmp_path / "library"
    write(root / "small.txt", "Sherlock Holmes examined the letter with his lens. The lens was used by Holmes "
                              "in every case. Dr. Watson wrote the account.")
    db = new_database(server_db, root)

    def answer(body):
        assert body["format"]["required"] == ["entities", "relations"]
        return json.dumps({"entities": [{"name": "Sherlock Holmes", "type": "Person"},
                                        {"name": "lens", "type": "tools"},
                                        {"name": "Dr. Watson", "type": "characters"}],
                           "relations": [{"source": "lens", "relation": "used by", "target": "Sherlock Holmes"},
                                         {"source": "Dr. Watson", "relation": "wrote about",
                                          "target": "Sherlock Holmes"}]})

    fake = FakeOllama(answer=answer).start()
    try:
        with dg.DagsterInstance.ephemeral() as inst:
            ingest(db, inst)
            llm = llm_resource(db, "ollama", "fake-chat", fake.url, retries=1)
            assert run_assets(db, inst, [knowledge_graph], partition_keys(db, ["small.txt"]), llm=llm).success
            assert latest_metadata(inst, "knowledge_graph")["extractor"] == "ollama:fake-chat"
    finally:
        fake.stop()
    assert fake.requests and fake.requests[0]["body"]["options"]["temperature"] == 0
    with db.connect() as conn:
        types = dict(conn.execute("SELECT name, type FROM entities").fetchall())
        raw = dict(conn.execute("SELECT name, type_raw FROM entities").fetchall())
        edges = conn.execute("SELECT s.name, r.relation, r.relation_raw, t.name FROM relations r JOIN entities s "
                             "ON s.id = r.source_id JOIN entities t ON t.id = r.target_id ORDER BY 3").fetchall()
    assert types == {"Sherlock Holmes": "person", "lens": "tool", "Dr. Watson": "person"}
    assert raw["lens"] == "tools"
    assert ("lens", "uses", "used by", "Sherlock Holmes") in edges  # direction as stated, raw kept
    assert ("Dr. Watson", "related_to", "wrote about", "Sherlock Holmes") in edges


def test_resolution_across_files_merges_spellings(db):
    from library_pipeline.enrich.passage_graph import PassageGraph
    from library_pipeline.enrich.kg_store import write_graph

    with db.transaction() as conn:
        a, b, c = (conn.execute("INSERT INTO documents (path, partition_key, status) VALUES (%s, %s, 'ingested') "
                                "RETURNING id", (p, p)).fetchone()[0] for p in ("a.txt", "b.txt", "c.txt"))
        for doc, name, label in ((a, "Sherlock Holmes", "PERSON"), (b, "Sherlok Holmes", "PERSON"),
                                 (c, "The Sherlock Holmes", "ORG"), (c, "Homer", "PERSON"), (a, "Hosmer", "PERSON")):
            g = PassageGraph()
            g.mentions[(name, label)] += 2
            write_graph(conn, doc, [g])
    with db.connect() as conn:
        res = graph.entity(conn, "sherlock holmes")
        names = {r[0] for r in conn.execute("SELECT name FROM entities")}
    assert res["found"] and res["source_count"] == 3 and res["mentions"] == 6
    assert res["type"] == "person"  # majority of mentions, not the first label
    assert {"Homer", "Hosmer"} <= names, "short names are never merged by edit distance"


def test_graph_cli(library, monkeypatch):
    from typer.testing import CliRunner

    from library_pipeline.cli.main import app

    monkeypatch.setenv("LIBRARY_DB_DSN", library.dsn)
    monkeypatch.setenv("LIBRARY_HOME", str(library.settings.home))
    runner = CliRunner()
    out = runner.invoke(app, ["graph", "path", "Irene Adler", "Holmes"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["hops"] == 1
    top = runner.invoke(app, ["graph", "top", "--type", "person", "--limit", "3"])
    assert top.exit_code == 0 and len(json.loads(top.stdout)) == 3
    bad = runner.invoke(app, ["graph", "related", "Holmes", "--direction", "sideways"])
    assert bad.exit_code == 2 and "direction must be" in bad.output


def test_purged_file_leaves_no_orphans_after_the_next_pass(db):
    from library_pipeline.enrich.passage_graph import Edge, PassageGraph
    from library_pipeline.enrich.kg_store import collect_orphans, write_graph

    with db.transaction() as conn:
        a, b = (conn.execute("INSERT INTO documents (path, partition_key, status) VALUES (%s, %s, 'ingested') "
                             "RETURNING id", (p, p)).fetchone()[0] for p in ("a.txt", "b.txt"))
        for doc, names in ((a, ("Sherlock Holmes", "John Watson")), (b, ("Sherlock Holmes", "Inspector Lestrade"))):
            g = PassageGraph()
            g.mentions.update({(n, "PERSON"): 1 for n in names})
            g.edges.append(Edge(names[0], "PERSON", "co-occurs with", names[1], "PERSON", "ev", "cooccurrence"))
            write_graph(conn, doc, [g])
        conn.execute("DELETE FROM documents WHERE id = %s", (a,))  # what `library purge` does
    assert collect_orphans(db) == 1  # Watson: only the purged file mentioned him
    with db.connect() as conn:
        assert {r[0] for r in conn.execute("SELECT name FROM entities")} == {"Sherlock Holmes", "Inspector Lestrade"}
        out = graph.entity(conn, "Sherlock Holmes")
    assert out["source_count"] == 1 and [r["entity"]["name"] for r in out["relations"]] == ["Inspector Lestrade"]


def test_a_common_name_is_one_person_per_work_and_a_full_name_one_person_everywhere(db):
    """«Иван Иваныч» of one story and of another are two people until the evidence says
    otherwise; «Пётр Андреевич Гринёв» named in two works is one. A lookup of the common
    name answers with one candidate per work, each naming its work."""
    from library_pipeline.enrich.kg_store import write_graph
    from library_pipeline.enrich.passage_graph import PassageGraph

    with db.transaction() as conn:
        a, b = (conn.execute("INSERT INTO documents (path, partition_key, status) VALUES (%s, %s, 'ingested') "
                             "RETURNING id", (p, p)).fetchone()[0] for p in ("Чехов - Крыжовник.txt",
                                                                             "Чехов - Человек в футляре.txt"))
        for doc in (a, b):
            g = PassageGraph()
            g.mentions.update({("Иван Иваныч", "PER"): 3, ("Пётр Андреевич Гринёв", "PER"): 1})
            write_graph(conn, doc, [g])
    with db.connect() as conn:
        people = conn.execute("SELECT name, count(*) FROM entities GROUP BY 1 ORDER BY 1").fetchall()
        common = graph.resolve(conn, "Иван Иваныч")
        full = graph.resolve(conn, "Пётр Андреевич Гринёв")
    assert people == [("Иван Иваныч", 2), ("Пётр Андреевич Гринёв", 1)]
    assert common["status"] == "ambiguous"
    assert {c["work"] for c in common["candidates"]} == {"Чехов - Крыжовник.txt", "Чехов - Человек в футляре.txt"}
    assert full["status"] == "found" and full["entity"]["source_count"] == 2 and "work" not in full["entity"]


BAKER_STREET = [   # the Holmes stories' sentences naming Holmes and Baker Street
    "At three o’clock precisely I was at Baker Street, but Holmes had not yet returned.",
    "The events in question occurred in the early days of my association with Holmes, when we were sharing rooms "
    "as bachelors in Baker Street.",
    "There was no truth, Mr. Holmes, in the conjecture which seemed to us to be probable in your rooms at Baker "
    "Street.",
]


def test_cooccurrence_counts_sentences_and_a_file_keeps_supported_rows(db):
    """Co-occurrence rows count distinct sentences (the chunker's overlap repeats a
    window's last sentence at the start of the next passage, here across two batches);
    once the file is extracted, drop_weak_cooccurrence keeps a pair of people from one
    sentence, anything else from COOCCURRENCE_SENTENCES, and no pair the file types.
    ("Holmes drove to Kilburn." is made up: the stories name Kilburn once.)"""
    from library_pipeline.enrich.kg_store import drop_weak_cooccurrence, write_graph
    from library_pipeline.enrich.passage_graph import COOCCURRENCE_SENTENCES, Edge, PassageGraph

    assert len(BAKER_STREET) == COOCCURRENCE_SENTENCES

    def passage(*edges):
        g = PassageGraph()
        for a, al, b, bl, evidence, extractor, relation in edges:
            g.mentions.update({(a, al): 1, (b, bl): 1})
            g.edges.append(Edge(a, al, "said to" if relation else "co-occurs with", b, bl, evidence, extractor,
                                relation))
        return g

    def co(a, al, b, bl, evidence):
        return (a, al, b, bl, evidence, "cooccurrence", None)

    overlap = "“I carried the bird all the way to Kilburn, Mr. Holmes.”"
    with db.transaction() as conn:
        doc = conn.execute("INSERT INTO documents (path, partition_key, status) VALUES ('c.txt', 'c', 'ingested') "
                           "RETURNING id").fetchone()[0]
        write_graph(conn, doc, [
            passage(co("Holmes", "PERSON", "Kilburn", "GPE", overlap)),
            passage(co("Holmes", "PERSON", "Kilburn", "GPE", overlap),   # the overlap, same batch
                    co("Holmes", "PERSON", "Lestrade", "PERSON", "“Very good, Lestrade,” said Holmes."),
                    ("Holmes", "PERSON", "Lestrade", "PERSON", "“Very good, Lestrade,” said Holmes.", "dependency",
                     "associate_of"),
                    co("Holmes", "PERSON", "Clay", "PERSON", "“It’s no use, John Clay,” said Holmes softly."))])
        write_graph(conn, doc, [   # the next batch starts with the overlap again
            passage(co("Holmes", "PERSON", "Kilburn", "GPE", overlap),
                    co("Holmes", "PERSON", "Kilburn", "GPE", "Holmes drove to Kilburn.")),
            *[passage(co("Holmes", "PERSON", "Baker Street", "FAC", sentence)) for sentence in BAKER_STREET]])
        counts = dict(conn.execute(
            "SELECT t.name, r.count FROM relations r JOIN entities t ON t.id = r.target_id "
            "WHERE r.extractor = 'cooccurrence' AND r.document_id = %s", (doc,)).fetchall())
        assert counts == {"Kilburn": 2, "Lestrade": 1, "Clay": 1, "Baker Street": COOCCURRENCE_SENTENCES}
        assert drop_weak_cooccurrence(conn, doc) == 2   # Kilburn: two sentences; Lestrade: typed
        kept = {(r[0], r[1]) for r in conn.execute(
            "SELECT t.name, r.relation FROM relations r JOIN entities t ON t.id = r.target_id "
            "WHERE r.document_id = %s", (doc,))}
    assert kept == {("Lestrade", "associate_of"), ("Clay", "related_to"), ("Baker Street", "related_to")}


def test_a_sentence_naming_a_person_twice_counts_once_after_the_merge(db):
    """Two names of one person beside a third in one sentence write two co-occurrence
    rows; merged into one entity (kg_file_resolution) they are one sentence, not two.
    The sentence is made up: the example library's sentences rarely name one person twice."""
    from library_pipeline.enrich.kg_file_resolution import resolve_within_file
    from library_pipeline.enrich.kg_store import write_graph
    from library_pipeline.enrich.passage_graph import Edge, PassageGraph

    sentence = "“Sherlock Holmes, sir?” said Peterson; “Mr. Holmes is expected.”"
    with db.transaction() as conn:
        doc = conn.execute("INSERT INTO documents (path, partition_key, status) VALUES ('d.txt', 'd', 'ingested') "
                           "RETURNING id").fetchone()[0]
        g = PassageGraph()
        g.mentions.update({("Sherlock Holmes", "PERSON"): 3, ("Holmes", "PERSON"): 1, ("Peterson", "PERSON"): 1})
        for name in ("Sherlock Holmes", "Holmes"):
            g.edges.append(Edge(name, "PERSON", "co-occurs with", "Peterson", "PERSON", sentence, "cooccurrence"))
        write_graph(conn, doc, [g])
        assert resolve_within_file(conn, doc)[0] == 1
        rows = conn.execute("SELECT count FROM relations WHERE document_id = %s", (doc,)).fetchall()
    assert rows == [(1,)]
