"""The one write path of the knowledge graph: ontology mapping, entity
resolution across files, and incremental, budgeted extraction per file.

Resolution: a name is normalised by the SQL function kg_normalise_name (the
read path uses the same function), then matched exactly against entity names
and known aliases; failing that, against existing names by edit distance
(rapidfuzz), bounded by the name's length - at most 1 edit from 8 characters,
2 from 12, none below 8. A flat bound of 2 merged different people ("Hosmer" /
"Homer", "Mary" / "Mark" are one or two edits apart), so short names must
match exactly. A fuzzy match also needs a
compatible type (same, or one side `other`) and is recorded as an alias.

An entity's type is the majority of its mentions' canonical types (`other`
only when nothing else was ever said): the small spaCy model calls "Arthur
Conan Doyle" an ORG in one sentence and a PERSON in the next.

Each batch of passages is one transaction together with the progress row, so
an interrupted run loses at most the batch in flight and the next run resumes
where the last commit left off. After a file's last batch, its person names are
merged within the file (kg_file_resolution), then its co-occurrence rows of too little
support are deleted (drop_weak_cooccurrence): until then a file being extracted shows them.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict

from psycopg.types.json import Jsonb
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from library_pipeline.documents import StepResult, ingested_document
from library_pipeline.enrich.extract import extract_graphs
from library_pipeline.enrich.gender import compatible as gender_compatible
from library_pipeline.enrich.gender import GENDERED_FORMS, is_first_name, is_patronymic, name_gender
from library_pipeline.enrich.kg_file_resolution import name_scope, resolve_within_file, scoped_name
from library_pipeline.enrich.passage_graph import PassageGraph, cooccurrence_kept, is_person
from serving.db import Database
from serving.generation import GenerationError, TextGenerator
from serving.graph import max_edits
from serving.ontology import RELATION_TYPES, entity_type, relation_type

log = logging.getLogger(__name__)

OFFLINE_EXTRACTOR = "offline-v6"   # bump to re-extract every file after changing the offline rules


def _compatible(a: str, b: str) -> bool:
    return a == b or "other" in (a, b)


def _top_type(votes: dict[str, int]) -> str:
    real = {t: c for t, c in votes.items() if t != "other" and c > 0}
    pool = real or votes
    return max(sorted(pool), key=lambda t: pool[t]) if pool else "other"


def write_graph(conn, document_id: int, graphs: list[PassageGraph]) -> tuple[int, int]:
    """Map, resolve and upsert one batch. Returns (entities touched, relation rows touched)."""
    mentions: Counter = Counter()        # (name, canonical type, raw label) -> count
    for g in graphs:
        for (name, raw), n in g.mentions.items():
            mentions[(name, entity_type(raw), raw)] += n
    edges = [e for g in graphs for e in g.edges]
    names = sorted({m[0] for m in mentions} | {e.source for e in edges} | {e.target for e in edges})
    if not names:
        return 0, 0
    norm = dict(conn.execute("SELECT n, kg_normalise_name(n) FROM unnest(%s::text[]) AS n", (names,)).fetchall())
    norm = {k: v for k, v in norm.items() if v and len(v) >= 2}

    # canonical type votes per normalised name, from mentions and from edge endpoints
    votes: dict[str, Counter] = defaultdict(Counter)
    raw_label: dict[tuple[str, str], str] = {}
    display: dict[str, str] = {}
    for (name, canonical, raw), n in mentions.items():
        if name in norm:
            votes[norm[name]][canonical] += n
            raw_label.setdefault((norm[name], canonical), raw)
            display.setdefault(norm[name], name)
    for e in edges:
        for name, raw in ((e.source, e.source_type), (e.target, e.target_type)):
            if name in norm:
                display.setdefault(norm[name], name)
                if not votes[norm[name]]:
                    votes[norm[name]][entity_type(raw)] += 0
                    raw_label.setdefault((norm[name], entity_type(raw)), raw)

    scoped = {k: scoped_name(k, document_id) for k, counter in votes.items()
              if _top_type(dict(counter)) == "person" and not distinctive_person(k)}
    if scoped:
        votes = defaultdict(Counter, {scoped.get(k, k): v for k, v in votes.items()})
        display = {scoped.get(k, k): v for k, v in display.items()}
        raw_label = {(scoped.get(k, k), t): v for (k, t), v in raw_label.items()}
        norm = {n: scoped.get(k, k) for n, k in norm.items()}
    ids = _resolve(conn, votes, display, raw_label)

    # votes, mentions and type in one pass over the touched entities
    rows = conn.execute("SELECT id, type_votes FROM entities WHERE id = ANY(%s) FOR UPDATE",
                        (list(set(ids.values())),)).fetchall()
    current = {r[0]: Counter(r[1]) for r in rows}
    added = defaultdict(Counter)
    for key, counter in votes.items():
        added[ids[key]].update(counter)
    for entity_id, counter in added.items():
        merged = current.get(entity_id, Counter()) + counter
        merged.update({t: 0 for t in counter})  # keep zero-count endpoint types visible
        winner = _top_type(dict(merged))
        raw = next((raw_label[(k, winner)] for k in votes if ids[k] == entity_id and (k, winner) in raw_label), None)
        conn.execute("UPDATE entities SET type_votes = %s, type = %s, type_raw = coalesce(%s, type_raw), "
                     "mentions = mentions + %s, updated_at = now() WHERE id = %s",
                     (Jsonb(dict(merged)), winner, raw, sum(counter.values()), entity_id))
    per_entity = Counter()
    for key, counter in votes.items():
        per_entity[ids[key]] += sum(counter.values())
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO entity_sources (entity_id, document_id, mentions) VALUES (%s, %s, %s) "
            "ON CONFLICT (entity_id, document_id) DO UPDATE SET mentions = entity_sources.mentions + EXCLUDED.mentions",
            [(eid, document_id, n) for eid, n in per_entity.items()])

    rel: dict[tuple, list] = {}
    for e in edges:
        if e.source not in norm or e.target not in norm:
            continue
        a, b = ids[norm[e.source]], ids[norm[e.target]]
        if a == b:
            continue
        canonical = e.relation if e.relation in RELATION_TYPES else relation_type(e.relation_raw)
        if e.extractor == "cooccurrence":
            a, b = min(a, b), max(a, b)   # undirected: one row per pair
        key = (a, b, canonical, e.relation_raw)
        entry = rel.setdefault(key, [0, e.evidence, e.extractor, set()])
        if e.extractor == "cooccurrence":
            # a co-occurrence row counts distinct sentences (its support, see
            # drop_weak_cooccurrence): the chunker's overlap repeats a window's last
            # sentences at the start of the next passage, and two names of one person
            # in one sentence ("Holmes", "Sherlock Holmes") join one pair twice
            if e.evidence in entry[3]:
                continue
            entry[3].add(e.evidence)
        entry[0] += 1
    with conn.cursor() as cur:
        # a batch's first sentence of a pair equal to the stored row's is the overlap
        # repeated across the batch boundary (the row then has that one sentence only)
        cur.executemany(
            "INSERT INTO relations (source_id, target_id, relation, relation_raw, document_id, count, evidence, "
            "extractor) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (source_id, target_id, relation, relation_raw, document_id) "
            "DO UPDATE SET count = relations.count + EXCLUDED.count - CASE WHEN relations.extractor = "
            "'cooccurrence' AND relations.evidence = EXCLUDED.evidence THEN 1 ELSE 0 END",
            [(a, b, canonical, raw, document_id, n, ev, ex)
             for (a, b, canonical, raw), (n, ev, ex, _) in rel.items()])
    return len(added), len(rel)


def distinctive_person(name_norm: str) -> bool:
    """Two words or more, one of them a surname: neither a first name, a patronymic nor a
    form of address."""
    words = name_norm.split()
    if len(words) < 2:
        return False
    return any(len(w) >= 3 and w not in GENDERED_FORMS and not is_patronymic(w) and not is_first_name(w)
               for w in words)


def _resolve(conn, votes: dict[str, Counter], display: dict[str, str],
             raw_label: dict[tuple[str, str], str]) -> dict[str, int]:
    keys = list(votes)
    ids: dict[str, int] = {}
    for name_norm, entity_id in conn.execute(
            "SELECT name_norm, id FROM entities WHERE name_norm = ANY(%s) "
            "UNION ALL SELECT alias_norm, entity_id FROM entity_aliases WHERE alias_norm = ANY(%s)",
            (keys, keys)).fetchall():
        ids.setdefault(name_norm, entity_id)
    missing = [k for k in keys if k not in ids]
    if missing:
        lengths = [len(k) for k in missing if max_edits(k)]
        choices: dict[int, tuple[str, str]] = {}
        if lengths:
            for entity_id, name_norm, etype in conn.execute(
                    "SELECT id, name_norm, type FROM entities WHERE length(name_norm) BETWEEN %s AND %s",
                    (min(lengths) - 2, max(lengths) + 2)).fetchall():
                choices[entity_id] = (name_norm, etype)
        for key in sorted(missing, key=lambda k: (-sum(votes[k].values()), k)):
            mine = _top_type(dict(votes[key]))
            limit = max_edits(name_scope(key)[0])
            match = None
            # a name held within one work is compared with that work's names only
            same_scope = {i: c[0] for i, c in choices.items() if name_scope(c[0])[1] == name_scope(key)[1]}
            if limit and same_scope:
                for _, dist, entity_id in process.extract(key, same_scope, scorer=Levenshtein.distance,
                                                           score_cutoff=limit, limit=5):
                    # "mr turner" and "mrs turner" are one edit apart and two people
                    if _compatible(mine, choices[entity_id][1]) and gender_compatible(
                            name_gender(key), name_gender(choices[entity_id][0])):
                        match = entity_id
                        break
            if match is not None:
                ids[key] = match
                conn.execute("INSERT INTO entity_aliases (alias_norm, entity_id) VALUES (%s, %s) "
                             "ON CONFLICT (alias_norm) DO NOTHING", (key, match))
                continue
            entity_id = conn.execute(
                "INSERT INTO entities (name, name_norm, type, type_raw) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (name_norm) DO UPDATE SET updated_at = now() RETURNING id",
                (display.get(key, key), key, mine, raw_label.get((key, mine)))).fetchone()[0]
            ids[key] = entity_id
            if limit:
                choices[entity_id] = (key, mine)
    return ids


def drop_weak_cooccurrence(conn, document_id: int) -> int:
    """Once a file is extracted and its names merged: delete the co-occurrence rows it
    keeps no related_to for (passage_graph.cooccurrence_kept: too little support, or a
    pair the file types; a person is judged by the entity's type votes over the library,
    the offline benchmark by the file's). Returns the rows deleted."""
    rows = conn.execute(
        "SELECT r.id, r.count, s.type_votes, t.type_votes, EXISTS (SELECT 1 FROM relations x WHERE "
        "x.document_id = r.document_id AND x.relation <> 'related_to' AND ((x.source_id, x.target_id) = "
        "(r.source_id, r.target_id) OR (x.source_id, x.target_id) = (r.target_id, r.source_id))) "
        "FROM relations r JOIN entities s ON s.id = r.source_id JOIN entities t ON t.id = r.target_id "
        "WHERE r.document_id = %s AND r.extractor = 'cooccurrence'", (document_id,)).fetchall()
    weak = [i for i, count, a, b, typed in rows
            if not cooccurrence_kept(count, is_person(a or {}) and is_person(b or {}), typed)]
    if weak:
        conn.execute("DELETE FROM relations WHERE id = ANY(%s)", (weak,))
    return len(weak)


def forget_document(conn, document_id: int) -> None:
    """Remove one file's contributions (before re-extraction), keeping other files' intact:
    schema.sql's kg_forget_documents, the same deletion `library purge` runs."""
    conn.execute("SELECT kg_forget_documents(ARRAY[%s]::bigint[])", (document_id,))


def collect_orphans(db: Database) -> int:
    """Entities no file mentions any more (their files were purged: the cascade
    removes sources and relations, not the entity rows). Run before each pass."""
    with db.transaction() as conn:
        return conn.execute("DELETE FROM entities e WHERE NOT EXISTS "
                            "(SELECT 1 FROM entity_sources s WHERE s.entity_id = e.id)").rowcount


PASSAGES_SQL = """
SELECT id, ordinal, content, ts_config::text FROM passages
WHERE document_id = %s AND summary_level = 0 AND NOT removed AND kind NOT IN ('toc', 'boilerplate')
  AND ordinal >= %s
ORDER BY ordinal LIMIT %s
"""


def kg_step(db: Database, key: str, generator: TextGenerator | None = None, *, budget: int = 2000,
            batch: int = 200, restart: bool = False) -> StepResult:
    started = time.perf_counter()
    extractor = generator.name if generator is not None else OFFLINE_EXTRACTOR
    with db.connect() as conn:
        doc, result = ingested_document(conn, key)
        if doc is None:
            return result
        version, total, text_hash = conn.execute(
            "SELECT version, (SELECT count(*) FROM passages WHERE document_id = d.id AND summary_level = 0 "
            "AND NOT removed AND kind NOT IN ('toc', 'boilerplate')), indexed_hash FROM documents d WHERE id = %s",
            (doc["id"],)).fetchone()
        progress = conn.execute("SELECT version, extractor, next_ordinal, completed_at FROM kg_progress "
                                "WHERE document_id = %s", (doc["id"],)).fetchone()
    if restart or progress is None or progress[0] != version or progress[1] != extractor:
        with db.transaction() as conn:
            conn.execute("SELECT 1 FROM documents WHERE id = %s FOR UPDATE", (doc["id"],))
            forget_document(conn, doc["id"])
            conn.execute(
                "INSERT INTO kg_progress (document_id, version, extractor, next_ordinal, passages_done, passages_total, "
                "content_hash) VALUES (%s, %s, %s, 0, 0, %s, %s) ON CONFLICT (document_id) DO UPDATE SET "
                "version = EXCLUDED.version, extractor = EXCLUDED.extractor, next_ordinal = 0, passages_done = 0, "
                "passages_total = EXCLUDED.passages_total, content_hash = EXCLUDED.content_hash, started_at = now(), "
                "updated_at = now(), completed_at = NULL",
                (doc["id"], version, extractor, total, text_hash))
        progress = (version, extractor, 0, None)
    if progress[3] is not None:
        result.status, result.reason = "skipped", "graph is current"
        return result
    if budget <= 0:
        result.status, result.reason = "skipped", "run budget spent; resumes next run"
        return result

    position, done, entities, relations, unsupported = progress[2], 0, 0, 0, 0
    extract_seconds = 0.0
    while done < budget:
        with db.connect() as conn:
            rows = conn.execute(PASSAGES_SQL, (doc["id"], position, min(batch, budget - done))).fetchall()
        if not rows:
            # nothing (left) to read, e.g. a file that is all licence text: done, not pending forever
            with db.transaction() as conn:
                conn.execute("UPDATE kg_progress SET completed_at = now(), updated_at = now() "
                             "WHERE document_id = %s AND version = %s AND completed_at IS NULL", (doc["id"], version))
            break
        t = time.perf_counter()
        graphs: list[PassageGraph] = []
        try:
            by_config: dict[str, list[int]] = defaultdict(list)
            for i, r in enumerate(rows):
                by_config[r[3]].append(i)
            slots: list[PassageGraph | None] = [None] * len(rows)
            for config, idx in by_config.items():
                found = extract_graphs([rows[i][2] for i in idx], config, generator)
                if found is None:
                    unsupported += len(idx)
                    found = [PassageGraph() for _ in idx]
                for i, g in zip(idx, found):
                    slots[i] = g
            graphs = [g for g in slots if g is not None]
        except GenerationError as exc:
            result.status, result.reason = "failed", f"extractor {extractor}: {exc} (progress kept at passage {position})"
            return result
        extract_seconds += time.perf_counter() - t
        last = rows[-1][1]
        with db.transaction() as conn:
            now = conn.execute("SELECT version, next_ordinal FROM kg_progress WHERE document_id = %s FOR UPDATE",
                               (doc["id"],)).fetchone()
            if now is None or now[0] != version or now[1] != position:
                result.status, result.reason = "skipped", "another run is extracting this file"
                return result
            e, r = write_graph(conn, doc["id"], graphs)
            more = conn.execute("SELECT EXISTS (SELECT 1 FROM passages WHERE document_id = %s AND summary_level = 0 "
                                "AND NOT removed AND kind NOT IN ('toc', 'boilerplate') AND ordinal > %s)", (doc["id"], last)).fetchone()[0]
            if not more:
                merged, unclear = resolve_within_file(conn, doc["id"])
                result.figures["merged_names"] = merged
                result.figures["ambiguous_names"] = unclear
                result.figures["weak_cooccurrence_dropped"] = drop_weak_cooccurrence(conn, doc["id"])
            conn.execute("UPDATE kg_progress SET next_ordinal = %s, passages_done = passages_done + %s, "
                         "updated_at = now(), completed_at = CASE WHEN %s THEN NULL ELSE now() END "
                         "WHERE document_id = %s", (last + 1, len(rows), more, doc["id"]))
        position, done = last + 1, done + len(rows)
        entities, relations = entities + e, relations + r
        if not more:
            break
    else:
        result.reason = "budget reached; resumes next run"
    if unsupported:
        result.reason = f"{unsupported} passages in a language without an offline extractor"
    result.figures = {**result.figures, "passages": done, "entities": entities, "relations": relations,
                      "extract_seconds": round(extract_seconds, 3), "extractor": extractor,
                      "seconds": round(time.perf_counter() - started, 3)}
    return result
