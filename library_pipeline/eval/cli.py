"""`library eval ...`: BEIR evaluation, agent memory on LoCoMo, the regression query set, pooled judgments.

Registered by the main CLI with `app.add_typer(eval_app, name="eval")`; also
runnable alone: `python -m library_pipeline.eval.cli beir DATASET_DIR`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

eval_app = typer.Typer(help="Retrieval evaluation: BEIR datasets, agent memory (LoCoMo), the regression query set, "
                            "pooled judgments.",
                       no_args_is_help=True)


def _embedder():
    from serving.embedding import load_embedder
    from serving.settings import get_settings

    s = get_settings()
    return load_embedder(s.embed_backend, s.embed_model, dims=s.embed_dims, ollama_url=s.ollama_url)


def _dense_models(embedder, anchors: bool, threads: int = 2):
    """The dense anchors: the project's embedder, and USE-m3 (multilingual)."""
    if not anchors:
        return []
    from library_pipeline.eval.harness import ProjectEmbedder, UseM3

    return [ProjectEmbedder(embedder, "minilm" if "minilm" in embedder.name.lower() else embedder.name),
            UseM3(threads=threads)]


def _login_name() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "person"


def _cache_dir() -> Path:
    from serving.settings import get_settings

    return get_settings().home / "eval-cache"


def default_split(dataset_dir: Path) -> str:
    """test when the folder has it, else the only / first split it has."""
    splits = sorted(p.stem for p in (dataset_dir / "qrels").glob("*.tsv"))
    if not splits:
        raise typer.BadParameter(f"{dataset_dir}: no qrels/<split>.tsv")
    return "test" if "test" in splits else splits[0]


def _configs(configs: str | None):
    from library_pipeline.eval.harness import select_configs

    try:
        return select_configs(configs.split(",") if configs else None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@eval_app.command("beir")
def beir(
    dataset_dir: Path = typer.Argument(..., exists=True, file_okay=False,
                                       help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv"),
    split: str = typer.Option("test", help="Qrels split to score (qrels/<split>.tsv)."),
    out: Path = typer.Option(None, "--out", help="JSON results file (default: eval-<dataset>-<split>.json)."),
    configs: str = typer.Option(None, "--configs",
                                help="Comma-separated configurations (default: all available): vector, multilingual, keyword, "
                                     "fused-no-title, fused-rrf, fused-convex, fused, fused+rerank."),
    markdown: Path = typer.Option(None, "--markdown", help="Markdown table file (default: beside --out, .md)."),
    plot: Path = typer.Option(None, "--plot", help="PNG chart (default: beside --out, .png)."),
    max_queries: int = typer.Option(0, "--max-queries", min=0, help="Score only the first N queries (smoke runs)."),
    dsn: str = typer.Option(None, "--dsn", help="Database for the corpus (default: library_eval_<dataset> on the "
                                                "embedded server, or LIBRARY_EVAL_DSN). Never the library itself."),
    reindex: bool = typer.Option(False, "--reindex", help="Re-chunk and re-embed even if the corpus is loaded."),
    anchors: bool = typer.Option(True, "--anchors/--no-anchors",
                                 help="Also score each dense model alone on whole documents (the project's "
                                      "embedder, USE-m3) and its naive RRF with bm25s, in the same run."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Load a BEIR dataset into an isolated database through the pipeline's own
    chunk/embed/lexeme code and score search configurations against bm25s and the anchors."""
    from library_pipeline.eval.report import markdown_table, write_json, write_plot

    logging.getLogger("serving").setLevel(logging.WARNING)
    result = _evaluate_folder(dataset_dir, split, configs, max_queries, dsn, reindex, anchors, progress)
    out = out or Path(f"eval-{result.dataset}-{split}.json")
    write_json(result, out)
    table = markdown_table(result)
    (markdown or out.with_suffix(".md")).write_text(table, encoding="utf-8")
    write_plot(result, plot or out.with_suffix(".png"))
    typer.echo(table)
    typer.echo(f"wrote {out}, {markdown or out.with_suffix('.md')}, {plot or out.with_suffix('.png')}")


def _evaluate_folder(dataset_dir: Path, split: str, configs: str | None, max_queries: int, dsn: str | None,
                     reindex: bool, anchors: bool, progress: bool, embedder=None, dense=None):
    from tqdm import tqdm

    from library_pipeline.eval.beir import build_index, eval_database, load_beir, release
    from library_pipeline.eval.harness import evaluate_dataset

    dataset = load_beir(dataset_dir, split)
    if max_queries:
        dataset = dataset.subset(list(dataset.queries)[:max_queries])
    selected = _configs(configs)
    embedder = embedder or _embedder()
    dense = dense if dense is not None else _dense_models(embedder, anchors)
    db = eval_database(dataset.name, dsn=dsn)
    try:
        with tqdm(total=len(dataset.corpus), desc="index", unit="doc", disable=not progress) as bar:
            def tick(done: int, total: int) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()
            figures = build_index(db, dataset, embedder, progress=tick, force=reindex)
        with db.connect() as conn:
            result = evaluate_dataset(conn, embedder, dataset, selected, progress=progress, dense_models=dense,
                                      cache_dir=_cache_dir())
        result.index = figures
    finally:
        release(db)
    return result


@eval_app.command("suite")
def suite(
    dataset_dirs: list[Path] = typer.Argument(None, exists=True, file_okay=False,
                                              help="BEIR folders; each is scored on its test split when it has one."),
    out: Path = typer.Option(Path("eval-suite"), "--out",
                             help="Output prefix: writes <out>.md, <out>.json and <out>.png."),
    configs: str = typer.Option(None, "--configs", help="Comma-separated configurations (default: all available)."),
    split: str = typer.Option(None, "--split", help="Score this split everywhere (default: test, else the one there)."),
    max_queries: int = typer.Option(0, "--max-queries", min=0, help="Score only the first N queries of each."),
    reindex: bool = typer.Option(False, "--reindex"),
    anchors: bool = typer.Option(True, "--anchors/--no-anchors"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    merge: list[Path] = typer.Option(None, "--merge", exists=True, dir_okay=False,
                                     help="An earlier suite's .json whose collections join the table "
                                          "(collections run in separate processes, one table)."),
) -> None:
    """Run every BEIR folder given and write ONE table (markdown + JSON) and ONE plot comparing
    every lane, the shipped default and the anchors across collections, with the goals checked."""
    from library_pipeline.eval.report import results_from_suite_json, suite_markdown, write_suite

    logging.getLogger("serving").setLevel(logging.WARNING)
    results = [r for path in merge or [] for r in results_from_suite_json(path)]
    dataset_dirs = dataset_dirs or []
    if not dataset_dirs and not results:
        raise typer.BadParameter("give BEIR folders, or --merge earlier suite results")
    embedder = _embedder() if dataset_dirs else None
    dense = _dense_models(embedder, anchors) if dataset_dirs else []
    for folder in dataset_dirs:
        chosen = split or default_split(folder)
        results.append(_evaluate_folder(folder, chosen, configs, max_queries, None, reindex, anchors, progress,
                                        embedder=embedder, dense=dense))
    md, js, png = write_suite(results, out)
    typer.echo(suite_markdown(results))
    typer.echo(f"wrote {md}, {js}, {png}")


@eval_app.command("memory")
def memory(
    dataset_dir: Path = typer.Argument(..., exists=True, file_okay=False,
                                       help="LoCoMo-shaped folder: turns.jsonl, questions.jsonl."),
    out: Path = typer.Option(None, "--out", help="Output prefix: writes <out>.md, <out>.json and <out>.png "
                                                 "(default: eval-memory-<folder>)."),
    conversations: str = typer.Option(None, "--conversations", help="Comma-separated conversations to ask (default: all)."),
    limit: int = typer.Option(0, "--limit", min=0, help="Ask only the first N questions of each conversation "
                                                        "(every turn is still loaded)."),
    corrections: Path = typer.Option(None, "--corrections", exists=True, dir_okay=False, help=(
        "An audit of the answer key (errors.json of github.com/dial481/locomo-audit) to score against.")),
    sessions: bool = typer.Option(True, "--sessions/--no-sessions",
                                  help="Also measure whole-session notes (one record per session, R@5 and MRR)."),
    anchors: bool = typer.Option(True, "--anchors/--no-anchors",
                                 help="Also score bm25s, each dense model alone and naive RRF on the same turns."),
    alone: bool = typer.Option(False, "--records-alone",
                               help="Rank every record alone (no thread neighbours): the search before context."),
    reuse: bool = typer.Option(False, "--reuse", help="Keep the records an earlier run loaded when they are this "
                                                      "set (for a search-side change; loading takes minutes)."),
    dsn: str = typer.Option(None, "--dsn", help="Database to load into (default: library_eval_locomo on the "
                                                "embedded server, or LIBRARY_EVAL_DSN). Never the library itself."),
    clients: int = typer.Option(5, "--clients", min=1, help="Agents indexing at once (one conversation each)."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Agent memory on a LoCoMo-shaped conversation set: every conversation one agent, every turn
    one record through index_memory, every question one search_memory (top_k 10) as that agent;
    evidence recall@5 / @10 / all-evidence@10 overall and per category, beside bm25s, the dense
    models and naive RRF on the same turns; and the whole-session unit."""
    from library_pipeline.eval.locomo import run_locomo_eval
    from library_pipeline.eval.locomo_data import load_locomo
    from library_pipeline.eval.locomo_report import markdown, write_json, write_plot

    logging.getLogger("serving").setLevel(logging.WARNING)
    try:
        lset = load_locomo(dataset_dir, limit=limit, corrections=corrections,
                           conversations=[c.strip() for c in conversations.split(",") if c.strip()]
                           if conversations else None)
    except (ValueError, FileNotFoundError) as exc:
        raise typer.BadParameter(str(exc)) from None
    embedder = _embedder()
    # index and search as the server runs them: one torch thread per call (serving/threads.py)
    from serving.threads import limit_torch_threads

    limit_torch_threads()
    result = run_locomo_eval(None, embedder, lset, dsn=dsn, dense_models=_dense_models(embedder, anchors),
                             sessions=sessions, cache_dir=_cache_dir(), progress=progress, reuse=reuse,
                             thread_share=0.0 if alone else None, clients=clients)
    out = out or Path(f"eval-memory-{lset.name}")
    md, js, png = (out.with_name(out.name + ext) for ext in (".md", ".json", ".png"))
    table = markdown(result)
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(table, encoding="utf-8")
    write_json(result, js)
    write_plot(result, png)
    typer.echo(table)
    typer.echo(f"wrote {md}, {js}, {png}")


@eval_app.command("regression")
def regression(
    query_set: Path = typer.Option(None, "--queries", help="Query-set JSON (default: the shipped example set)."),
    disable: str = typer.Option("", "--disable", help="Comma-separated lanes to switch off."),
    json_out: bool = typer.Option(False, "--json"),
) -> None:
    """Score the fixed regression query set on the live library (what the asset check does)."""
    from library_pipeline.eval.regression import lanes_config, load_query_set, score_query_set
    from serving.db import Database

    qs = load_query_set(query_set)
    db = Database()
    try:
        with db.connect() as conn:
            result = score_query_set(conn, _embedder(), qs,
                                     config=lanes_config([x for x in disable.split(",") if x]))
    finally:
        db.stop()
    data = {"metrics": result.metrics, "thresholds": qs.thresholds, "by_kind": result.by_kind,
            "unjudgeable": result.unjudgeable, "failures": result.failures}
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False) if json_out else
               "\n".join([*(f"{k}: {v:.4f}" for k, v in result.metrics.items()),
                          *(f"FAIL {f}" for f in result.failures)]))
    raise typer.Exit(0 if result.passed else 1)


@eval_app.command("library")
def library(
    questions: Path = typer.Argument(..., exists=True, dir_okay=False,
                                     help="Questions (TSV: question<TAB>file | file; or YAML), each naming the "
                                          "file(s) that answer it."),
    out: Path = typer.Option(None, "--out", help="Also write <out>.md and <out>.json."),
    json_out: bool = typer.Option(False, "--json"),
    min_right_at_1: float = typer.Option(0.0, "--min-right-at-1", min=0, max=1,
                                         help="Exit 1 when fewer questions get the right file first."),
    max_other_script: int = typer.Option(-1, "--max-other-script",
                                         help="Exit 1 above this many other-script passages in the top 5 of "
                                              "same-language questions (-1: no limit)."),
) -> None:
    """Ask your own questions of the live library through the search agents use: right file at
    rank 1, MRR over files, other-script passages in the top 5 (what the asset check runs)."""
    from library_pipeline.eval.library_questions import QuestionFileError, evaluate_library, load_questions, markdown
    from serving.db import Database

    try:
        qs = load_questions(questions)
    except QuestionFileError as exc:
        raise typer.BadParameter(str(exc)) from None
    db = Database()
    try:
        with db.connect() as conn:
            evaluation = evaluate_library(conn, _embedder(), qs)
    finally:
        db.stop()
    summary = evaluation.summary()
    data = {"summary": summary, "questions": [r.to_dict() for r in evaluation.results]}
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".md").write_text(markdown(evaluation) + "\n", encoding="utf-8")
        out.with_suffix(".json").write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False) if json_out else markdown(evaluation))
    failed = ((summary["right_at_1"] or 0.0) < min_right_at_1
              or 0 <= max_other_script < summary["other_script_in_top5"])
    raise typer.Exit(1 if failed else 0)


@eval_app.command("pool")
def pool(
    out: Path = typer.Argument(..., help="Pool file to write (JSON)."),
    queries: Path = typer.Option(None, "--queries", help="Queries: BEIR-style JSONL ({_id, text}) or a query-set "
                                                          "JSON; default: the most frequent queries in search_log."),
    from_log: int = typer.Option(50, "--from-log", help="How many logged queries when --queries is not given."),
    configs: str = typer.Option("vector,keyword,fused", "--configs"),
    depth: int = typer.Option(10, "--depth", min=1, max=100),
) -> None:
    """Pool every configuration's top candidates for queries without gold answers."""
    from library_pipeline.eval.judge import build_pool, queries_from_log
    from serving.db import Database

    selected = _configs(configs)
    db = Database()
    try:
        with db.connect() as conn:
            if queries is None:
                qs = queries_from_log(conn, from_log)
            elif queries.suffix == ".jsonl":
                qs = {str(j["_id"]): j["text"] for j in map(json.loads, queries.read_text().splitlines()) if j}
            else:
                qs = {q["id"]: q["query"] for q in json.loads(queries.read_text())["queries"]}
            if not qs:
                raise typer.BadParameter("no queries (the search log is empty?)")
            data = build_pool(conn, _embedder(), qs, selected, depth=depth)
    finally:
        db.stop()
    out.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    typer.echo(f"{len(data['queries'])} queries, {len(data['candidates'])} pooled candidates -> {out}")


@eval_app.command("judge")
def judge(
    pool_file: Path = typer.Argument(..., exists=True),
    judgments: Path = typer.Option(None, "--judgments", help="JSONL to append to (default: <pool>.judgments.jsonl)."),
    model: str = typer.Option(None, "--model", help="Ollama model as judge (default: LIBRARY_JUDGE_MODEL; "
                                                    "unset = you judge at the prompt)."),
    name: str = typer.Option(None, "--name", help="Your name, when you judge (default: your login name)."),
    limit: int = typer.Option(0, "--limit", min=0, help="Stop after N judgments (resume later)."),
) -> None:
    """Judge each pooled candidate once, blind to which configuration found it."""
    from library_pipeline.eval.judge import OllamaJudge, PromptJudge, judge_pool

    data = json.loads(pool_file.read_text(encoding="utf-8"))
    from serving.settings import get_settings

    settings = get_settings()
    model = model or settings.judge_model
    who = (OllamaJudge(model, settings.ollama_url) if model else PromptJudge(name or _login_name()))
    path = judgments or pool_file.with_suffix(".judgments.jsonl")
    n = judge_pool(data, path, who, limit=limit or None)
    typer.echo(f"{n} judged by {who.name} -> {path}")


@eval_app.command("score-pool")
def score_pool_cmd(
    pool_file: Path = typer.Argument(..., exists=True),
    judgments: Path = typer.Option(None, "--judgments"),
) -> None:
    """Score every pooled configuration on the shared judgments."""
    from library_pipeline.eval.judge import read_judgments, score_pool

    data = json.loads(pool_file.read_text(encoding="utf-8"))
    result = score_pool(data, read_judgments(judgments or pool_file.with_suffix(".judgments.jsonl")))
    typer.echo(json.dumps(result, indent=2))


@eval_app.command("real-set")
def real_set(
    out: Path = typer.Argument(..., help="Query-set JSON to write (input for `library eval pool --queries`)."),
    days: int = typer.Option(0, "--days", min=0, help="Only searches of the last N days (0 = all kept)."),
    limit: int = typer.Option(200, "--limit", min=1, help="At most this many distinct queries, most asked first."),
    min_count: int = typer.Option(1, "--min-count", min=1, help="Only queries asked at least this often."),
    kinds: str = typer.Option("library,memory", "--kinds", help="library, memory or both."),
    compare: Path = typer.Option(None, "--compare", help="A synthetic query set to set the shape against "
                                                         "(default: the shipped example set)."),
) -> None:
    """Build a deduplicated, PII-light query set from the query log (no caller names)."""
    from library_pipeline.eval.realset import build_real_set, shape
    from library_pipeline.eval.regression import load_query_set
    from serving.db import Database

    db = Database()
    try:
        with db.connect() as conn:
            data = build_real_set(conn, days=days or None, limit=limit, min_count=min_count,
                                  kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()))
    finally:
        db.stop()
    if not data["queries"]:
        typer.echo("no logged queries to build a set from (is LIBRARY_QUERY_LOG off, or the log pruned?)", err=True)
        raise typer.Exit(1)
    out.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    synthetic = load_query_set(compare)
    other = shape([{"query": q["query"]} for q in synthetic.queries])
    typer.echo(f"{len(data['queries'])} distinct queries from {data['logged_searches']} logged searches -> {out}")
    typer.echo(f"{'trait':28} {'real':>8} {'synthetic':>10}")
    for key, value in data["shape"].items():
        typer.echo(f"{key:28} {value!s:>8} {other.get(key, '-')!s:>10}")
    typer.echo(f"next: library eval pool pool.json --queries {out}; library eval judge pool.json; "
               "library eval score-pool pool.json")


if __name__ == "__main__":
    eval_app()
