"""The multilingual vector lane end to end, on the example library's own books: the
one passage writer stores both models' vectors (reused across identical texts), a
Russian question finds the Russian book's passage and an English book's passage,
fusion leaves the English-only model out for a Russian query, the lane can be
switched off, a library written without it is filled by the migration - and the
same questions asked over MCP with the real client."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

import dagster as dg
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from library_pipeline.migrate import embedder as migrate
from library_pipeline_tests.ingest_helpers import ingest, latest_metadata
from serving.embedding import USEM3_NAME, multilingual_embedder
from serving.memory import Viewer, forget_memory, index_memory
from serving.search import SearchConfig, SearchFilters, search

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "library"
PUSHKIN = "Пушкин - Капитанская дочка.txt"
ALICE = "Carroll - Alice's Adventures in Wonderland.txt"
ALICE_EPUB = "Carroll - Alice's Adventures in Wonderland.epub"
# excerpts keep the module's ingest short on a shared 2-core box: Pushkin's chapter I
# (the departure), Alice's chapters I-II (the bottle)
PUSHKIN_CHARS = 12_000
ALICE_CHARS = 20_000

# the module ingests two books with two models: minutes on a loaded box
pytestmark = pytest.mark.timeout(2400)

# (question, the book, text the first passage must contain)
QUESTIONS = [
    ("Что надели на героя в дорогу, а сверху лисью шубу?", PUSHKIN, "заячий тулуп"),
    ("Что было написано на бутылочке, которую нашла Алиса?", ALICE, "DRINK ME"),
]

# an English question whose answer is in the English book: under min-max fusion the
# Russian book's best multilingual hit was worth as much as the answer (the example
# library put «Капитанская дочка» first for it); calibrated, no Cyrillic passage comes near
ENGLISH = [("What did the White Rabbit take out of its waistcoat-pocket?", ALICE, "watch")]


def _alice_text() -> str:
    """The example library's Alice EPUB as plain text, from chapter I (the pipeline's own EPUB
    extraction, so the text is what an ingest of the EPUB would index)."""
    from library_pipeline.ingest.extract import extract_file

    text = "\n\n".join(p.text for p in extract_file(EXAMPLES / ALICE_EPUB).pages)
    return text[text.find("Down the Rabbit-Hole"):]


@pytest.fixture(scope="module")
def library(server_db, tmp_path_factory):
    """Pushkin (an excerpt, to keep the test short) and Alice, ingested by the pipeline."""
    from library_pipeline_tests.conftest import new_database

    lib = tmp_path_factory.mktemp("multilingual") / "library"
    lib.mkdir()
    text = (EXAMPLES / PUSHKIN).read_text(encoding="utf-8")
    (lib / PUSHKIN).write_text(text[:PUSHKIN_CHARS], encoding="utf-8")
    (lib / ALICE).write_text(_alice_text()[:ALICE_CHARS], encoding="utf-8")
    db = new_database(server_db, lib)
    with dg.DagsterInstance.ephemeral() as instance:
        out = ingest(db, instance)
        assert out["failed"] == 0, out
        meta = latest_metadata(instance, "embeddings")
    yield db, meta
    db.stop()


def test_every_passage_has_the_vectors_of_the_models_that_read_it(library):
    """The multilingual model embeds every passage; the English-only primary model only the
    English ones (a Russian passage names that model and has no vector of it)."""
    from serving.search.language import script

    db, meta = library
    with db.connect() as conn:
        rows = conn.execute(
            "SELECT d.path, p.content, p.embedding IS NOT NULL, p.embed_model, "
            "p.embed_model_multi = %s AND p.embedding_multi IS NOT NULL "
            "FROM passages p JOIN documents d ON d.id = p.document_id", (USEM3_NAME,)).fetchall()
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'passages' "
                                              "AND indexname LIKE 'passages_hnsw_multi%'")}
        recorded = migrate.multilingual_counts(conn)
    assert len(rows) > 100 and all(multi for *_, multi in rows)
    russian = [r for r in rows if r[0] == PUSHKIN]
    english = [r for r in rows if r[0] == ALICE]
    assert russian and not any(has for _, _, has, _, _ in russian)
    assert all(has for _, _, has, _, _ in english)
    assert {model for *_, model, _ in rows} == {"sentence-transformers/all-MiniLM-L6-v2"}
    assert all(script(content) == "cyrillic" for _, content, *_ in russian)
    assert len(indexes) == 2   # verbatim and summaries, as for the primary model
    assert recorded == {"model": USEM3_NAME, "done": len(rows), "remaining": 0}
    assert meta["failed"] == 0


def test_no_cyrillic_passage_is_encoded_by_the_english_only_model(make_db, embedder, monkeypatch, tmp_path):
    """Ingest and the summary tree of a Russian file, with every text the English-only model
    is given recorded (the real model still encodes them): none is Cyrillic. The tree of the
    Russian book is built over the multilingual model's vectors."""
    from library_pipeline.enrich.raptor import raptor_step
    from serving.embedding import SentenceTransformerEmbedder
    from serving.search.language import script

    db = make_db(tmp_path / "library")
    db.settings.library_dir.mkdir(parents=True, exist_ok=True)
    given: list[str] = []
    real = SentenceTransformerEmbedder.encode_passages

    def recording(self, texts, **kw):
        given.extend(texts)
        return real(self, texts, **kw)

    monkeypatch.setattr(SentenceTransformerEmbedder, "encode_passages", recording)
    text = (EXAMPLES / PUSHKIN).read_text(encoding="utf-8")
    (db.settings.library_dir / PUSHKIN).write_text(text[PUSHKIN_CHARS:2 * PUSHKIN_CHARS], encoding="utf-8")
    (db.settings.library_dir / "lighthouse.txt").write_text(
        "The lighthouse keeper climbed the stairs every evening to light the lamp.\n\n" * 3, encoding="utf-8")
    with dg.DagsterInstance.ephemeral() as instance:
        out = ingest(db, instance)
    assert out["failed"] == 0, out
    with db.connect() as conn:
        key = conn.execute("SELECT partition_key FROM documents WHERE path = %s", (PUSHKIN,)).fetchone()[0]
    tree = raptor_step(db, key, embedder, force=True)
    assert tree.status == "ok" and tree.figures["summaries"] > 0, (tree.status, tree.reason)
    assert any(script(t) == "latin" for t in given), "the English file was not embedded by the primary model"
    assert [t[:80] for t in given if script(t) == "cyrillic"] == []
    with db.connect() as conn:
        summaries = conn.execute(
            "SELECT count(*), count(embedding), count(embedding_multi) FROM passages p JOIN documents d "
            "ON d.id = p.document_id WHERE d.path = %s AND p.summary_level > 0", (PUSHKIN,)).fetchone()
    assert summaries[0] > 0 and summaries[1] == 0 and summaries[2] == summaries[0], summaries
    # an English question still gets the Russian book's summaries: the multilingual model's
    with db.connect() as conn:
        resp = search(conn, embedder, "Who travelled through the snowstorm?", top_k=3,
                      config=SearchConfig(log_queries=False))
    assert resp.summaries and {r.path for r in resp.summaries} == {PUSHKIN}, resp.stages.get("summaries")


def test_a_russian_book_is_chunked_by_the_model_that_reads_it(library, embedder):
    """The 96-token window counted in MiniLM's English WordPiece cut Pushkin into single lines
    (median 91 characters against 270-310 for the English books on the example library); a
    text the primary model does not read is sized by the multilingual model's tokens, so
    passages of both languages hold about as much text, and none exceeds that model's window."""
    from statistics import median

    from serving.embedding import chunk_counter

    db, _ = library
    counter = chunk_counter(embedder, "ru")
    assert counter.name == USEM3_NAME and chunk_counter(embedder, "en") is embedder
    with db.connect() as conn:
        rows = conn.execute("SELECT d.path, p.content FROM passages p JOIN documents d ON d.id = p.document_id "
                            "WHERE p.summary_level = 0").fetchall()
    russian = [len(c) for path, c in rows if path == PUSHKIN]
    english = [len(c) for path, c in rows if path == ALICE]
    assert median(russian) >= 0.6 * median(english), (median(russian), median(english))
    assert max(counter.count_tokens(c) for path, c in rows if path == PUSHKIN) <= counter.max_tokens


@pytest.mark.parametrize("question,book,needle", QUESTIONS)
def test_questions_find_the_right_passage_first(library, embedder, question, book, needle):
    db, _ = library
    with db.connect() as conn:
        resp = search(conn, embedder, question, top_k=5)
    top = resp.results[0]
    assert top.path == book and needle in top.text, [(r.path, r.text[:80]) for r in resp.results]
    assert "multilingual" in top.lanes, top.lanes
    # a Russian question: the English-only model is left out
    assert resp.query_language == "ru" and resp.stages["vector"].startswith("skipped"), resp.stages


@pytest.mark.parametrize("question,book,needle", ENGLISH)
def test_english_question_keeps_the_other_script_out_of_its_top(library, embedder, question, book, needle):
    from serving.search.language import script

    db, _ = library
    with db.connect() as conn:
        resp = search(conn, embedder, question, top_k=5)
    assert resp.stages["fusion"].startswith("ok: calibrated"), resp.stages["fusion"]
    top = resp.results[0]
    assert top.path == book and needle in top.text, [(r.path, r.text[:80]) for r in resp.results]
    assert [script(r.text[:300]) for r in resp.results].count("cyrillic") == 0, [r.path for r in resp.results]
    # the English passage is scored by every lane that reads it, each lane's term kept
    assert {"vector", "keyword"} <= set(top.lane_scores), top.lane_scores


def test_english_only_model_alone_cannot_answer_the_russian_question(library, embedder):
    """The measurement the lane exists for, on this library: MiniLM alone does not put
    the Russian answer first, the multilingual lane alone does."""
    db, _ = library
    question, book, needle = QUESTIONS[1]
    with db.connect() as conn:
        alone = search(conn, embedder, question, top_k=3, config=SearchConfig.only("vector", log_queries=False))
        multi = search(conn, embedder, question, top_k=3, config=SearchConfig.only("multilingual", log_queries=False))
    assert needle not in alone.results[0].text
    assert needle in multi.results[0].text


def test_identical_text_reuses_both_vectors(library, tmp_path):
    """A second copy of a book embeds nothing: both models' vectors are reused."""
    from library_pipeline.ingest.store import chunk_step, embed_step, extract_step, register_files
    from serving.embedding import load_embedder

    db, _ = library
    copy = db.settings.library_dir / "copy" / PUSHKIN
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(db.settings.library_dir / PUSHKIN, copy)
    key = register_files(db, {f"copy/{PUSHKIN}": copy})[f"copy/{PUSHKIN}"]
    emb = load_embedder("minilm")
    try:
        extract_step(db, db.settings.library_dir, key)
        chunk_step(db, key, emb)
        res = embed_step(db, key, emb)
        assert res.status == "ok", res.reason
        assert res.figures["embedded"] == 0 and res.figures["embedded_multilingual"] == 0, res.figures
        assert res.figures["reused"] == res.figures["passages"] > 0
    finally:
        copy.unlink()


def test_fill_fills_a_library_written_without_the_lane(library, monkeypatch):
    db, _ = library
    with db.transaction() as conn:
        ids = [r[0] for r in conn.execute(
            "UPDATE passages SET embedding_multi = NULL, embed_model_multi = NULL WHERE id IN "
            "(SELECT id FROM passages ORDER BY id LIMIT 25) RETURNING id")]
    with db.connect() as conn:
        before = migrate.status(conn)["multilingual"]
    assert before["remaining"] == 25
    assert "25 without its vector" in migrate.describe({"state": "none", "active": "x", "multilingual": before})
    out = migrate.fill_multilingual(db, batch_size=10)
    assert out["passages"] == 25 and out["remaining"] == 0 and out["batches"] == 3
    assert out["reused"] + out["embedded"] == 25
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM passages WHERE id = ANY(%s) AND embed_model_multi = %s",
                            (ids, USEM3_NAME)).fetchone()[0] == 25


def test_the_lane_can_be_switched_off(make_db, embedder, monkeypatch):
    """LIBRARY_EMBED_MULTILINGUAL=off: one vector per passage, one vector lane."""
    monkeypatch.setenv("LIBRARY_EMBED_MULTILINGUAL", "off")
    assert multilingual_embedder() is None
    db = make_db()
    (db.settings.library_dir / "note.txt").write_text(
        "The lighthouse keeper climbed the stairs every evening to light the lamp.\n\n"
        "Ships passing the cape saw the light and kept away from the rocks.", encoding="utf-8")
    with dg.DagsterInstance.ephemeral() as instance:
        assert ingest(db, instance)["failed"] == 0
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FILTER (WHERE embedding_multi IS NOT NULL), count(*) "
                            "FROM passages").fetchone()[0] == 0
        resp = search(conn, embedder, "who lit the lamp", top_k=3)
    assert resp.stages["multilingual"].startswith("off") and resp.results
    assert "multilingual" not in resp.results[0].lanes
    db.stop()


def test_query_language_and_script():
    from serving.search.language import query_language, script

    assert query_language("0-dimensional biomaterials show inductive properties") == "en"
    assert query_language("ADHD gene variants") == "en"
    assert query_language("Кто комендант Белогорской крепости?") == "ru"
    assert query_language("Wer war der Kommandant der Festung am Fluss?") == "de"
    assert script("Савельич, дядька") == "cyrillic" and script("DRINK ME") == "latin" and script("1999") == "none"


def test_trust_drops_cross_script_noise_and_scales_the_only_reader():
    """Russian query over a mixed library: keyword and English-only hits in Latin script are
    dropped; the multilingual lane's Latin hit counts for the weight a Cyrillic passage can
    collect (keyword + multilingual = 2), so it is not outranked by a weak keyword match."""
    from serving.search.fusion import convex_fusion, trust_factors
    from serving.search.lanes import LaneHits

    scripts = {1: "cyrillic", 2: "cyrillic", 3: "latin", 4: "latin"}
    kw = LaneHits("keyword", [2, 4, 1], [9.0, 8.0, 1.0], graded=True)
    vec = LaneHits("vector", [4, 3, 1], [0.5, 0.4, 0.3], graded=True)
    multi = LaneHits("multilingual", [3, 1, 2], [0.8, 0.5, 0.2], graded=True)
    lanes, factors = trust_factors([vec, kw, multi], scripts, "cyrillic", primary_reads_query=False,
                                   cross_factor=2.0)
    by = {h.name: h for h in lanes}
    assert by["keyword"].ids == [2, 1] and "another script" in by["keyword"].status
    assert by["vector"].ids == [1]
    assert factors["multilingual"] == {3: 2.0, 1: 1.0, 2: 1.0}
    fused = convex_fusion([(by["keyword"], 1.0), (by["multilingual"], 1.0)], 20, {}, factors)
    assert fused[0].id == 3   # the English answer: 2.0 against the keyword match's 1.0 + 0.0

    # an English query over English text: the multilingual lane adds nothing at weight 0
    lanes, factors = trust_factors([vec, multi], {i: "latin" for i in range(1, 5)}, "latin",
                                   primary_reads_query=True, shared_weight=0.0)
    fused = convex_fusion([(lanes[0], 1.0), (lanes[1], 1.0)], 20, {}, factors)
    assert [f.id for f in fused][:3] == [4, 3, 1] and fused[0].parts["vector"] == 1.0


def test_library_eval_scores_the_files_search_returns(library, embedder, tmp_path, monkeypatch):
    """`library eval library` on the user's own question file: each figure is what the search
    agents call returns (first file, files' reciprocal rank, other-script passages in the top 5
    of same-language questions), questions across languages are reported apart, and a file the
    library does not hold is named."""
    import json

    from typer.testing import CliRunner

    from library_pipeline.cli.main import app
    from serving.search.language import script

    db, _ = library
    questions = tmp_path / "questions.tsv"
    questions.write_text(
        "question\tfiles\n"
        "What was written on the little bottle Alice found?\t" + ALICE + "\n"
        "Who did Alice follow down the rabbit-hole?\t" + ALICE + "\n"
        "Что надели на героя в дорогу, а сверху лисью шубу?\t" + PUSHKIN + "\n"
        "Что было написано на бутылочке, которую нашла Алиса?\t" + ALICE + "\n"
        "Who wrote this?\tnot-in-the-library.pdf\n", encoding="utf-8")
    monkeypatch.setenv("LIBRARY_DB_DSN", db.settings.db_dsn)
    monkeypatch.setenv("LIBRARY_HOME", str(tmp_path / "home"))
    # one agent's private note saying what the first question asks: the operator's search
    # ranks it first; an agent's search, which the evaluation is, never sees it
    note = "What was written on the little bottle Alice found? The little bottle said DRINK ME."
    with db.connect() as conn:
        index_memory(conn, embedder, Viewer(agent="reader"), artifact_id="bottle-note", content=note)
        conn.commit()
        operator = search(conn, embedder, "What was written on the little bottle Alice found?", top_k=10,
                          config=SearchConfig(rerank=False, summaries=False, log_queries=False))
    assert operator.results[0].path is None and "DRINK ME" in operator.results[0].text
    try:
        out = CliRunner().invoke(app, ["eval", "library", str(questions), "--json", "--out", str(tmp_path / "report")])
    finally:
        with db.connect() as conn:
            forget_memory(conn, Viewer(agent="reader"), "bottle-note")
            conn.commit()
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    summary, rows = data["summary"], data["questions"]
    assert summary["questions"] == 4 and summary["missing_files"] == ["Who wrote this? -> not-in-the-library.pdf"]
    assert summary["same_language_questions"] == 3 and summary["cross_language_questions"] == 1
    with db.connect() as conn:
        for row in rows:
            resp = search(conn, embedder, row["question"], top_k=10, filters=SearchFilters(viewer=Viewer()),
                          config=SearchConfig(rerank=False, summaries=False, log_queries=False))
            files = []
            for r in resp.results:
                files.append(r.path) if r.path not in files else None
            assert row["right_at_1"] == (resp.results[0].path in row["files"])
            rank = files.index(row["files"][0]) + 1 if row["files"][0] in files else None
            assert row["reciprocal_rank"] == (round(1 / rank, 4) if rank else 0.0)
            if row["same_language"]:
                qs = script(row["question"])
                assert row["other_script_top5"] == sum(script(r.text) != qs for r in resp.results[:5])
    assert summary["right_at_1"] == sum(r["right_at_1"] for r in rows) / 4
    assert "| question | right at 1 |" in (tmp_path / "report.md").read_text(encoding="utf-8")
    # the bar decides the exit status
    strict = CliRunner().invoke(app, ["eval", "library", str(questions), "--min-right-at-1", "1"])
    assert strict.exit_code == (0 if summary["right_at_1"] == 1 else 1), strict.output


def test_setting_is_validated(monkeypatch):
    from serving.settings import multilingual_setting

    monkeypatch.setenv("LIBRARY_EMBED_MULTILINGUAL", "labse")
    with pytest.raises(ValueError, match="usem3 or off"):
        multilingual_setting()


def test_mcp_answers_russian_questions_about_both_books(library, tmp_path):
    """The same questions (and the English one) over MCP, with the real client and the server as agents start it."""
    db, _ = library
    env = {"LIBRARY_DB_DSN": db.settings.db_dsn, "LIBRARY_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "LIBRARY_LOG_LEVEL": "WARNING", "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "serving.mcp_server"], env=env, cwd=str(REPO))

    async def run() -> None:
        async with Client(params, read_timeout_seconds=300) as client:
            for question, book, needle in QUESTIONS:
                found = await client.call_tool("library_search", {"query": question, "top_k": 3})
                assert not found.is_error
                top = found.structured_content["results"][0]
                assert top["path"] == book and needle in top["text"], (question, top["path"], top["text"][:120])
                assert "multilingual" in top["lanes"]
            for question, book, needle in ENGLISH:
                found = await client.call_tool("library_search", {"query": question, "top_k": 3})
                paths = [r["path"] for r in found.structured_content["results"]]
                assert paths[0] == book and needle in found.structured_content["results"][0]["text"], paths
                assert PUSHKIN not in paths, paths

    asyncio.run(run())


# English and Russian questions, a filter, a document filter (the exact-scan path)
SIDE_SEARCHES = [(q, None) for q, _, _ in QUESTIONS] + [
    ("Alice follows the White Rabbit down the hole", None),
    ("Гринёв уезжает из дома", {"source": "library"}),
    ("the bottle marked DRINK ME", {"path": ALICE}),
]


def _answer(resp) -> tuple:
    return ([(r.passage_id, r.score, r.lanes) for r in resp.results], [r.passage_id for r in resp.summaries],
            list(resp.stages.items()), list(resp.timings), resp.warnings, resp.query_language)


def test_vector_stage_on_a_second_connection_gives_the_same_answer(library, embedder):
    """search(side=...) runs the query embeddings, both vector lanes and the summaries on the
    second connection while the keyword lane runs on the first; given a third, the primary
    vector lane runs there beside the multilingual one, and fusion's look-ups run on the two
    beside the title lane. The answer, the stages and their order are those of the search
    that runs everything in turn."""
    db, _ = library
    ran: dict[str, list[str]] = {"conn": [], "side": [], "third": []}
    with db.connect() as conn, db.connect() as side, db.connect() as third:
        for name, c in (("conn", conn), ("side", side), ("third", third)):
            real = c.execute

            def spy(query, params=None, *args, _real=real, _name=name, _c=c, **kwargs):
                text = query if isinstance(query, str) else query.as_string(_c)
                ran[_name].append(text)
                return _real(query, params, *args, **kwargs)

            c.execute = spy
        apart = 0
        for sides in ((side,), (side, third)):
            for query, filters in SIDE_SEARCHES:
                one = search(conn, embedder, query, top_k=8, filters=filters,
                             config=SearchConfig(log_queries=False))
                for queries in ran.values():
                    queries.clear()
                two = search(conn, embedder, query, top_k=8, filters=filters, side=sides,
                             config=SearchConfig(log_queries=False))
                assert one.results, query
                assert _answer(one) == _answer(two), (query, len(sides))
                assert any("<=>" in q for q in ran["side"]) and any("postings" in q for q in ran["conn"])
                # the fusion stage scores the fused pool's own rows by id on the first connection
                # (calibrated fusion); a vector lane's nearest-neighbour scan orders by distance
                assert not any("<=>" in q and "ORDER BY" in q for q in ran["conn"]), \
                    "a vector lane ran on the first connection"
                assert not any("postings" in q for q in ran["side"] + ran["third"])
                primary = [q for q in ran["side"] + ran["third"] if '"embedding"' in q and "ORDER BY" in q
                           and "summary_level = 0" in q]
                if len(sides) == 2 and "vector" in two.stages and two.stages["vector"].startswith("ok"):
                    # an English question: the primary lane ran on the third connection, the
                    # multilingual one on the second
                    assert primary and all(q in ran["third"] for q in primary), query
                    assert any('"embedding_multi"' in q and "ORDER BY" in q for q in ran["side"])
                    apart += 1
                else:   # the lanes in turn on the second; the third scores fusion's pool at most
                    assert not any("ORDER BY" in q for q in ran["third"]), query
                # calibrated fusion scores the pool: its BM25 on the second connection, its
                # vectors on the third when there is one, else on the first
                scored = [name for name, queries in ran.items() if any("THEN 1 - (" in q for q in queries)]
                assert scored == (["third"] if len(sides) == 2 else ["conn"]), query
                assert any("ts_filter" in q for q in ran["side"]), query
                assert all(c.info.transaction_status.name == "IDLE" for c in (side, third))
        assert apart >= 2   # both English questions (one of them filtered) ran their lanes apart


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: torch has a single thread count to use")
def test_the_vector_stage_encodes_with_the_callers_thread_count(library, embedder):
    """OpenMP keeps torch's thread count per OS thread: a pool thread started while the
    process used 2 threads encoded with 2 after the process went down to 1, and its scores
    differed from the serial search's in the sixth decimal. The side thread takes the
    caller's count for each search."""
    import torch

    db, _ = library
    query, filters = SIDE_SEARCHES[-3]
    before = torch.get_num_threads()
    try:
        with db.connect() as conn, db.connect() as side:
            for threads in (2, 1, 2):
                torch.set_num_threads(threads)
                one = search(conn, embedder, query, top_k=8, filters=filters, config=SearchConfig(log_queries=False))
                two = search(conn, embedder, query, top_k=8, filters=filters, side=side,
                             config=SearchConfig(log_queries=False))
                assert _answer(one) == _answer(two), threads
    finally:
        torch.set_num_threads(before)


def test_a_broken_second_connection_fails_the_search_and_spares_the_first(library, embedder):
    import psycopg

    db, _ = library
    with db.connect() as conn:
        side = db.connect()
        side.close()
        with pytest.raises(psycopg.OperationalError):
            search(conn, embedder, QUESTIONS[0][0], top_k=3, side=side)
        assert conn.info.transaction_status.name == "IDLE"
        assert search(conn, embedder, QUESTIONS[0][0], top_k=3).results
        # a broken third connection (the primary vector lane's) fails an English question's
        # search the same way, and leaves the other two idle
        with db.connect() as spare:
            with pytest.raises(psycopg.OperationalError):
                search(conn, embedder, ENGLISH[0][0], top_k=3, side=(spare, side))
            assert conn.info.transaction_status.name == "IDLE"
            assert spare.info.transaction_status.name == "IDLE"
            assert search(conn, embedder, ENGLISH[0][0], top_k=3, side=spare).results


def test_the_serving_runtime_lends_a_free_connection_only(library, embedder):
    """Library.search borrows spare pooled connections when they are free at once; with
    the pool in use it searches on fewer rather than wait."""
    from serving.runtime import Library

    db, _ = library
    question = QUESTIONS[1][0]
    with db.connect() as conn:
        expected = [r.passage_id for r in search(conn, embedder, question, top_k=5).results]
    lib = Library(db.settings, embedder=embedder, pool_size=2)
    try:
        with lib.connection() as first, lib.spare_connections(2) as spares:
            assert len(spares) == 1 and spares[0] is not first   # the one other pooled connection
            with lib.spare_connections(2) as more:
                assert more == ()   # both pooled connections are taken
        assert [r.passage_id for r in lib.search(question, top_k=5).results] == expected
    finally:
        lib.close()
