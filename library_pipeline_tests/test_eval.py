"""The evaluation harness: metrics with known values, a tiny BEIR set loaded
through the pipeline's chunk/embed code and scored with the serving search,
the regression asset checks (passing, and failing when lanes are disabled),
and pooled judgments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from library_pipeline.eval.beir import build_index, load_beir
from library_pipeline.eval.harness import bm25s_run, evaluate_dataset, standard_configs
from library_pipeline.eval.metrics import evaluate, paired_difference, per_query

DOCS = {
    "photo": ("Photosynthesis in plants", "Chlorophyll in plant leaves absorbs sunlight and converts carbon "
              "dioxide and water into glucose and oxygen."),
    "volcano": ("Volcanic eruptions", "Magma rising through the crust erupts as lava, ash and volcanic gases "
                "from a volcano."),
    "bees": ("Honey bee colonies", "A honey bee colony has one queen, thousands of worker bees and drones; "
             "workers gather nectar to make honey."),
    "holes": ("Black holes", "A black hole is a region of spacetime where gravity is so strong that not even "
              "light can escape its event horizon."),
    "bread": ("Sourdough bread", "Sourdough bread is leavened by a starter of wild yeast and lactic acid "
              "bacteria fermenting flour and water."),
    "ice": ("Glacier retreat", "Glaciers retreat when summer melting of ice exceeds winter snowfall "
            "accumulation."),
}
QUERIES = {
    "1": ("how do plant leaves turn sunlight into glucose", "photo"),
    "2": ("lava and ash from a volcano eruption", "volcano"),
    "3": ("queen and worker bees making honey", "bees"),
    "4": ("gravity so strong light cannot escape", "holes"),
}


def write_beir(root: Path, docs=DOCS, queries=QUERIES) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w") as fh:
        for did, (title, text) in docs.items():
            fh.write(json.dumps({"_id": did, "title": title, "text": text, "metadata": {}}) + "\n")
    with (root / "queries.jsonl").open("w") as fh:
        for qid, (text, _) in queries.items():
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
        fh.write(json.dumps({"_id": "99", "text": "a query outside the split"}) + "\n")
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, (_, d) in queries.items()))
    return root


# -- metrics: hand-computed values --------------------------------------------------

def test_metrics_known_values():
    qrels = {"a": {"d1": 1}, "b": {"d2": 1, "d3": 1}, "c": {"d9": 1}}
    run = {"a": {"x": 3.0, "d1": 2.0, "y": 1.0},        # relevant at rank 2
           "b": {"d2": 5.0, "z": 4.0, "d3": 3.0},       # relevant at ranks 1 and 3
           }                                            # "c": nothing returned -> scores 0, not skipped
    values = per_query(qrels, run)
    import math
    ndcg_a = 1 / math.log2(3)
    ndcg_b = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert values["ndcg@10"]["a"] == pytest.approx(ndcg_a, abs=1e-4)
    assert values["ndcg@10"]["b"] == pytest.approx(ndcg_b, abs=1e-4)
    assert values["ndcg@10"]["c"] == 0.0
    m = evaluate(qrels, run)
    assert m["ndcg@10"] == pytest.approx((ndcg_a + ndcg_b) / 3, abs=1e-4)
    assert m["mrr@10"] == pytest.approx((0.5 + 1.0 + 0.0) / 3, abs=1e-4)
    assert m["p@5"] == pytest.approx((1 / 5 + 2 / 5 + 0) / 3, abs=1e-4)
    assert m["recall@100"] == pytest.approx((1 + 1 + 0) / 3, abs=1e-4)
    mean, se = paired_difference({"a": 1.0, "b": 0.5}, {"a": 0.5, "b": 0.5})
    assert mean == pytest.approx(0.25) and se == pytest.approx(0.25)


def test_load_beir_reads_split(tmp_path):
    ds = load_beir(write_beir(tmp_path / "tiny"), "test")
    assert len(ds.corpus) == 6 and list(ds.queries) == ["1", "2", "3", "4"]  # "99" has no qrels
    assert ds.qrels["3"] == {"bees": 1}
    with pytest.raises(FileNotFoundError):
        load_beir(tmp_path / "tiny", "train")


def test_bm25s_baseline_on_tiny_set(tmp_path):
    ds = load_beir(write_beir(tmp_path / "tiny"), "test")
    run = bm25s_run(ds)
    assert evaluate(ds.qrels, run)["ndcg@10"] == pytest.approx(1.0)


# -- the harness end to end, through chunk_step / embed_step and serving.search ---------

@pytest.fixture()
def tiny_index(tmp_path, db, embedder):
    ds = load_beir(write_beir(tmp_path / "tiny"), "test")
    figures = build_index(db, ds, embedder)
    return ds, db, figures


def test_harness_scores_the_serving_search(tiny_index, embedder):
    ds, db, figures = tiny_index
    assert figures["loaded"] == 6 and figures["total_passages"] >= 6
    with db.connect() as conn:
        docs = conn.execute("SELECT count(*) FROM documents WHERE status = 'ingested'").fetchone()[0]
        assert docs == 6
        assert conn.execute("SELECT count(*) FROM lexeme_df").fetchone()[0] > 0
        result = evaluate_dataset(conn, embedder, ds, standard_configs(reranker_available=False),
                                  progress=False)
    # each query has exactly one relevant document and every lane puts it first:
    # nDCG@10 = MRR@10 = R@100 = 1, P@5 = 1/5
    assert set(result.configs) == {"vector", "multilingual", "keyword", "fused-no-title", "fused-rrf", "fused-convex",
                                   "fused"}
    for name, m in {**result.configs, "bm25s": result.bm25s}.items():
        assert m["ndcg@10"] == pytest.approx(1.0), name
        assert m["mrr@10"] == pytest.approx(1.0), name
        assert m["p@5"] == pytest.approx(0.2), name
        assert m["recall@100"] == pytest.approx(1.0), name
    data = result.to_json()
    assert set(data) >= {"dataset", "queries", "configs", "bm25s"}
    assert data["configs"]["fused"].keys() == {"ndcg@10", "p@5", "mrr@10", "recall@100"}
    assert data["ratio_to_bm25s"]["fused"]["ndcg@10"] == pytest.approx(1.0)


def test_reload_is_cached(tiny_index, embedder):
    ds, db, _ = tiny_index
    again = build_index(db, ds, embedder)
    assert again["loaded"] == 0 and again["embedded"] == 0
    ds.corpus["ice"] = {"title": "Glacier retreat", "text": DOCS["ice"][1] + " Sea level rises."}
    changed = build_index(db, ds, embedder)
    assert changed["loaded"] == 1 and changed["embedded"] >= 1


def test_cli_writes_json_markdown_and_plot(tmp_path, make_db):
    from typer.testing import CliRunner

    from library_pipeline.eval.cli import eval_app

    target = make_db()
    data_dir = write_beir(tmp_path / "tiny")
    out = tmp_path / "out" / "tiny.json"
    result = CliRunner().invoke(eval_app, ["beir", str(data_dir), "--out", str(out), "--dsn", target.settings.db_dsn,
                                           "--configs", "vector,keyword", "--no-progress", "--no-anchors"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["dataset"] == "tiny" and data["queries"] == 4
    assert set(data["configs"]) == {"vector", "keyword"}
    assert data["bm25s"]["ndcg@10"] == pytest.approx(1.0)
    assert "| ours: keyword |" in out.with_suffix(".md").read_text()
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    bad = CliRunner().invoke(eval_app, ["beir", str(data_dir), "--configs", "nope", "--dsn", target.settings.db_dsn])
    assert bad.exit_code != 0


RU_DOCS = {
    "krepost": ("Белогорская крепость", "Капитан Миронов защищал Белогорскую крепость от войска Пугачёва."),
    "metel": ("Буран в степи", "Ямщик сбился с дороги, когда в степи поднялся буран и повалил снег."),
    "pismo": ("Письмо отца", "Отец написал сыну строгое письмо и запретил ему жениться на дочери капитана."),
    "sud": ("Суд императрицы", "Маша поехала в Петербург и просила императрицу о помиловании жениха."),
}
RU_QUERIES = {
    "1": ("крепости защищали", "krepost"),          # inflected: the text says "защищал ... крепость"
    "2": ("буран поднялся в степи и ямщик сбился", "metel"),
    "3": ("письмо отца сыну", "pismo"),
}


def test_bm25s_stems_in_the_collections_language(tmp_path):
    from library_pipeline.eval.beir import collection_language

    ds = load_beir(write_beir(tmp_path / "tiny_ru", RU_DOCS, RU_QUERIES), "test")
    assert collection_language(ds) == "ru"
    run = bm25s_run(ds)
    assert evaluate(ds.qrels, run)["ndcg@10"] == pytest.approx(1.0)
    # stemmed as English, "крепость" and "крепости" are different words
    english = bm25s_run(ds, language="en")
    assert "krepost" not in english.get("1", {})


def test_suite_writes_one_table_and_one_plot(tmp_path, server_db, monkeypatch):
    """`library eval suite` over two BEIR folders (English, Russian): one markdown table,
    one JSON, one PNG; every lane, the default and the same-run anchors; goals checked."""
    from typer.testing import CliRunner

    from library_pipeline.eval.cli import eval_app

    monkeypatch.setenv("LIBRARY_HOME", str(tmp_path / "home"))      # the dense-anchor cache goes here
    monkeypatch.setenv("LIBRARY_DB_DSN", server_db.dsn)              # eval databases on the test server
    monkeypatch.delenv("LIBRARY_EVAL_DSN", raising=False)
    en = write_beir(tmp_path / "suite_en")
    ru = write_beir(tmp_path / "suite_ru", RU_DOCS, RU_QUERIES)
    out = tmp_path / "out" / "suite"
    result = CliRunner().invoke(eval_app, ["suite", str(en), str(ru), "--out", str(out), "--no-progress",
                                           "--configs", "vector,keyword,fused"])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "out" / "suite.md").read_text()
    header = table.splitlines()[2]
    assert "suite_en (test, 4 q)" in header and "suite_ru (test, 3 q)" in header
    for row in ("| ours: keyword |", "| **ours: fused (shipped default)** |", "| bm25s (collection's language) |",
                "| minilm dense alone (whole documents) |", "| use-m3 dense alone (whole documents) |",
                "| naive RRF k 60 (bm25s+minilm) |", "| naive RRF k 60 (bm25s+use-m3) |"):
        assert row in table, row
    assert "keyword lane ≥ 1.00× bm25s" in table and ("| met |" in table or "gap" in table)
    data = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert [c["dataset"] for c in data["collections"]] == ["suite_en", "suite_ru"]
    ru_result = data["collections"][1]
    assert ru_result["language"] == "ru"
    assert ru_result["bm25s"]["ndcg@10"] == pytest.approx(1.0)
    # the Russian passages were stemmed as Russian: the keyword lane finds every answer
    assert ru_result["configs"]["keyword"]["ndcg@10"] == pytest.approx(1.0)
    assert {"dense minilm", "dense use-m3", "rrf bm25s+minilm", "rrf bm25s+use-m3"} == set(ru_result["anchors"])
    assert ru_result["anchors"]["dense use-m3"]["ndcg@10"] > 0.5    # multilingual model reads Russian
    goals = {(g["dataset"], g["goal"]) for g in data["goals"]}
    assert ("suite_ru", "keyword lane ≥ 1.00× bm25s") in goals
    assert all(isinstance(g["met"], bool) for g in data["goals"])
    assert (tmp_path / "out" / "suite.png").read_bytes()[:4] == b"\x89PNG"
    assert list((tmp_path / "home" / "eval-cache").glob("suite_ru-use-m3-*.npy"))

    # collections run in separate processes join one table
    merged = tmp_path / "out" / "merged"
    result = CliRunner().invoke(eval_app, ["suite", "--merge", str(tmp_path / "out" / "suite.json"),
                                           "--out", str(merged)])
    assert result.exit_code == 0, result.output
    again = json.loads((tmp_path / "out" / "merged.json").read_text())
    keys = ("dataset", "split", "queries", "configs", "bm25s", "anchors", "language")
    assert [{k: c[k] for k in keys} for c in again["collections"]] == [{k: c[k] for k in keys}
                                                                        for c in data["collections"]]
    assert [(g["goal"], g["met"]) for g in again["goals"]] == [(g["goal"], g["met"]) for g in data["goals"]]
    assert (tmp_path / "out" / "merged.md").read_text().splitlines()[2] == header


# -- asset checks: the regression eval --------------------------------------------------

def _query_set(tmp_path: Path) -> Path:
    queries = [{"id": f"q{q}", "kind": "question", "query": text, "relevant": [{"path": did}]}
               for q, (text, did) in QUERIES.items()]
    queries.append({"id": "q5", "kind": "question", "query": "wild yeast starter",
                    "relevant": [{"path": "bread", "contains": ["lactic acid"]}]})
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"name": "tiny", "thresholds": {"p@5": 0.15, "ndcg@10": 0.9, "mrr@10": 0.9,
                                                                "question/ndcg@10": 0.9},
                                "queries": queries}))
    return path


def _resources(db):
    from library_pipeline.resources import EmbedderResource, LibraryDatabase

    return LibraryDatabase.from_settings(db.settings), EmbedderResource.from_settings(db.settings)


def test_retrieval_check_passes_then_fails_with_lanes_disabled(tiny_index, tmp_path):
    from library_pipeline.defs.eval.checks import RetrievalCheckConfig, retrieval_quality

    _, db, _ = tiny_index
    library_db, embedder_res = _resources(db)
    qs = str(_query_set(tmp_path))
    ok = retrieval_quality(config=RetrievalCheckConfig(query_set=qs), library_db=library_db,
                           embedder=embedder_res)
    assert ok.passed, ok.description
    assert ok.metadata["ndcg@10"].value == pytest.approx(1.0)
    assert ok.metadata["queries"].value == 5
    # both vector lanes and the keyword lane off: only the title lane is left, which finds
    # "bees" by name (2 shared terms) and nothing else. (With the primary vector lane off,
    # the multilingual lane takes its full weight, and alone it still finds these.)
    broken = retrieval_quality(config=RetrievalCheckConfig(
                                   query_set=qs, disable_lanes=["vector", "multilingual", "keyword"]),
                               library_db=library_db, embedder=embedder_res)
    assert not broken.passed
    assert broken.metadata["ndcg@10"].value < 0.5
    assert "question/ndcg@10" in broken.description and "< threshold" in broken.description


def test_orphan_check_catches_live_passages_of_removed_files(tiny_index):
    from library_pipeline.defs.eval.checks import no_orphan_passages

    _, db, _ = tiny_index
    library_db, _ = _resources(db)
    assert no_orphan_passages(library_db=library_db).passed
    with db.transaction() as conn:
        conn.execute("UPDATE documents SET status = 'removed' "
                     "WHERE path = 'ice'")
    orphan = no_orphan_passages(library_db=library_db)
    assert not orphan.passed and orphan.metadata["of_removed_files_live"].value >= 1


# -- pooled judgments ------------------------------------------------------------------

def test_pooled_judgments_are_blind_and_shared(tiny_index, tmp_path, embedder):
    from library_pipeline.eval.judge import PromptJudge, build_pool, judge_pool, read_judgments, score_pool
    from serving.search import SearchConfig

    _, db, _ = tiny_index
    configs = {"vector": SearchConfig.only("vector"), "keyword": SearchConfig.only("keyword")}
    queries = {"1": QUERIES["1"][0], "3": QUERIES["3"][0]}
    with db.connect() as conn:
        pool = build_pool(conn, embedder, queries, configs, depth=3)
        paths = {r[0]: r[1] for r in conn.execute(
            "SELECT p.id, d.path FROM passages p JOIN documents d ON d.id = p.document_id")}
    assert pool["candidates"] and len({(c["query_id"], c["passage_id"]) for c in pool["candidates"]}) == \
        len(pool["candidates"])
    seen_prompts = []

    def ask(prompt: str) -> str:  # a "person" who knows the answers, and never sees the config
        seen_prompts.append(prompt)
        assert "vector" not in prompt and "keyword" not in prompt
        for qid, (text, did) in QUERIES.items():
            if text in prompt:
                return "1" if DOCS[did][1][:40] in prompt else "0"
        return "0"

    judgments = tmp_path / "j.jsonl"
    n = judge_pool(pool, judgments, PromptJudge("tester", ask=ask))
    assert n == len(pool["candidates"]) == len(seen_prompts)
    assert judge_pool(pool, judgments, PromptJudge("tester", ask=ask)) == 0  # each judged once
    scored = score_pool(pool, read_judgments(judgments))
    assert scored["queries"] == 2 and scored["unjudged_candidates"] == 0
    for name in configs:
        assert scored["configs"][name]["mrr@10"] == pytest.approx(1.0)
    assert all(paths[c["passage_id"]] for c in pool["candidates"])
