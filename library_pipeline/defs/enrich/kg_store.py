"""The one write path of the knowledge graph: ontology mapping, entity
resolution across files, and incremental, budgeted extraction per file.

Resolution: a name is normalised by the SQL function kg_normalise_name (the
read path uses the same function), then matched exactly against entity names
and known aliases; failing that, against existing names by edit distance
(rapidfuzz), bounded by the name's length - at most 1 edit from 8 characters,
2 from 12, none below 8. The brief's bound is 2; applying it to short names
merged different people ("Hosmer" / "Homer", "Mary" / "Mark" are one or two
edits apart), so short names must match exactly. A fuzzy match also needs a
compatible type (same, or one side `other`) and is recorded as an alias.

An entity's type is the majority of its mentions' canonical types (`other`
only when nothing else was ever said): the small spaCy model calls "Arthur
Conan Doyle" an ORG in one sentence and a PERSON in the next.

Each batch of passages is one transaction together with the progress row, so
an interrupted run loses at most the batch in flight and the next run resumes
where the last commit left off.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter, defaultdict

from psycopg.types.json import Jsonb
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from library_pipeline.defs.enrich.extract import PassageGraph, extract_graphs
from library_pipeline.defs.enrich.gender import GENDERED_FORMS, name_gender
from library_pipeline.defs.enrich.gender import compatible as gender_compatible
from library_pipeline.defs.ingest.store import StepResult, ingested_document
from serving.db import Database
from serving.generation import GenerationError, TextGenerator
from serving.graph import max_edits
from serving.ontology import entity_type, relation_type

log = logging.getLogger(__name__)

OFFLINE_EXTRACTOR = "offline-v2"   # bump to re-extract every file after changing the offline rules


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
        canonical = relation_type(e.relation_raw)
        if e.extractor == "cooccurrence":
            a, b = min(a, b), max(a, b)   # undirected: one row per pair
        key = (a, b, canonical, e.relation_raw)
        if key in rel:
            rel[key][0] += 1
        else:
            rel[key] = [1, e.evidence, e.extractor]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO relations (source_id, target_id, relation, relation_raw, document_id, count, evidence, "
            "extractor) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (source_id, target_id, relation, relation_raw, document_id) "
            "DO UPDATE SET count = relations.count + EXCLUDED.count",
            [(a, b, canonical, raw, document_id, n, ev, ex) for (a, b, canonical, raw), (n, ev, ex) in rel.items()])
    return len(added), len(rel)


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
            limit = max_edits(key)
            match = None
            if limit and choices:
                for _, dist, entity_id in process.extract(key, {i: c[0] for i, c in choices.items()},
                                                           scorer=Levenshtein.distance, score_cutoff=limit,
                                                           limit=5):
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


# -- resolution within one file -------------------------------------------------------
#
# A novel names a person many ways: "Sherlock Holmes" (20 mentions in the Holmes
# stories), "Holmes" (436), "Mr. Holmes"; «Петр Андреевич Гринев», «Петр Андреич»,
# «Гринев». Forms of address are stripped at extraction; what is left is merged
# here, once the whole file is extracted: a shorter person name whose words are
# an ordered part of exactly one longer person name of the same file becomes an
# alias of it. A word shared by several full names («Гринев»: the narrator and his
# father) is ambiguous: its mentions in this file are dropped rather than given
# to either man, and a lookup of it answers with the candidates.

# a short name said this many times as often as all the full names it could extend
# together is not made ambiguous by them ("McCarthy" 30 beside James 6 and Charles 1
# is; «Гринёв» 19 beside the father's and the son's full names, 2 and 3, is)
RARE_FULL_NAMES = 20
_PATRONYMIC = re.compile(r"(?:ович|евич|ич|ыч)$")


def _word_key(word: str) -> str:
    """Colloquial and full Russian patronymics compare equal: «андреич» ~
    «андреевич», «иваныч» ~ «иванович», «кузмич» ~ «кузьмич»."""
    if len(word) > 5 and re.search(r"[а-я]", word):
        stem = _PATRONYMIC.sub("", word)
        if stem != word:
            return stem.rstrip("еоь").replace("ь", "") + "~"
    return word


def _ordered_part(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    if len(short) >= len(long):
        return False
    it = iter(long)
    return all(word in it for word in short)


def plan_file_merges(names: dict[str, int]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Person names of one file (normalised name -> mentions in the file) ->
    ({name: the name it merges into}, {ambiguous name: candidate full names}).
    Names with the same words (patronymic forms and forms of address aside) merge
    into the most mentioned one; a full name mentioned once does not compete with
    one mentioned five times or more (a tagger's one-off like "Holmes Watson").
    A name never merges into one of the other gender ("Miss Turner" is not "John
    Turner"; see gender.py for where gender comes from)."""
    gender = {n: name_gender(n) for n in names}
    # initials and gendered forms of address do not make a name longer:
    # «а и швабрин» is «швабрин», "mr sherlock holmes" is "sherlock holmes"
    keys = {n: tuple(_word_key(w) for w in n.split() if len(w) > 1 and w not in GENDERED_FORMS) or (n,)
            for n in names}
    # a lone Russian surname in an oblique case the lemmatiser did not know («Швабрина»,
    # 34 mentions beside «Швабрин», 68) is the name said at least as often without the
    # ending; only lone names: inside a full name («Марья Миронова») the ending is hers
    for n in names:
        if re.fullmatch(r"[а-я]{4,}", n):
            stem = next((n[:-len(e)] for e in ("ым", "ом", "а", "у", "е") if n.endswith(e)
                         and n[:-len(e)] in names and names[n[:-len(e)]] >= names[n]), None)
            if stem:
                keys[n] = keys[stem]
    merges: dict[str, str] = {}
    ambiguous: dict[str, list[str]] = {}
    # same words, same gender (or none told): one class, named by its most mentioned name
    canonical: dict[tuple, str] = {}
    for n in sorted(names, key=lambda n: (-names[n], n)):
        canonical.setdefault((keys[n], gender[n]), n)
    for n in names:
        if canonical[(keys[n], gender[n])] != n:
            merges[n] = canonical[(keys[n], gender[n])]
    heads = list(canonical.values())
    # a gendered name ("Mrs. Hudson", "Mr. Sherlock Holmes") joins the same words said
    # without a form when the file says those words with one gender only; where that
    # name then goes is checked by the guard below ("Miss Turner" stays out of "John
    # Turner" even though "Turner" is his)
    for n in heads:
        if gender[n] is None:
            continue
        plain = canonical.get((keys[n], None))
        told = {gender[m] for m in names if keys[m] == keys[n]} - {None}
        if plain is not None and len(told) == 1:
            merges[n] = plain
    heads = [n for n in heads if n not in merges]
    for n in heads:
        # a possessive phrase ("Alice's Right Foot", normalised "alice s right foot") is no name
        longer = [m for m in heads if _ordered_part(keys[n], keys[m]) and "s" not in m.split()
                  and gender_compatible(gender[n], gender[m])]
        if not longer:
            continue
        maximal = [m for m in longer if not any(_ordered_part(keys[m], keys[o]) for o in longer)]
        # a tagger's one-off beside a real full name does not make a name shared:
        # "Sometimes Holmes" (2) beside "Sherlock Holmes" (20) had "Holmes" (436)
        # dropped as ambiguous; "Mary Holder" (1) beside "Mary Sutherland" (6) still counts
        top = max(names[m] for m in maximal)
        maximal = [m for m in maximal if names[m] * 8 >= top]
        if len(maximal) > 1 and names[n] >= RARE_FULL_NAMES * sum(names[m] for m in maximal):
            # full names this rare beside the short one are variants said in passing, not
            # rivals: «Пугачёв» (156 mentions in «Капитанская дочка») beside «Емельян
            # Пугачёв» (2) and «Емелька Пугачёв» (1) was dropped as ambiguous. The short
            # name stays an entity of its own; the full names keep theirs.
            continue
        if len(maximal) > 1:
            ambiguous[n] = sorted(maximal, key=lambda m: (-names[m], m))
        # a full name said once never absorbs a name said five times or more: "Alice
        # Rucastle" (1 mention) took "Rucastle" (30), her father
        elif names[maximal[0]] > 1 or names[n] < 5:
            merges[n] = maximal[0]

    def final(n: str) -> str:
        seen = {n}
        while n in merges and merges[n] not in seen:
            n = merges[n]
            seen.add(n)
        return n

    for n in list(merges):
        merges[n] = final(n)
    for n in ambiguous:
        merges.pop(n, None)
    for n, target in list(merges.items()):
        # the plain name is ambiguous (its mentions are dropped): a gendered name that
        # joined it picks the one full name of its gender, or is ambiguous among them
        if target in ambiguous:
            merges.pop(n)
            fits = [m for m in ambiguous[target] if gender_compatible(gender[n], gender[m])]
            if len(fits) == 1:
                merges[n] = fits[0]
            elif fits:
                ambiguous[n] = fits
    # last guard: no entity ends with names of both genders; a target that tells none
    # takes the gender said most often of the names merged into it
    said: dict[str, Counter] = defaultdict(Counter)
    for n, target in merges.items():
        if gender[n] is not None:
            said[target][gender[n]] += names[n]
    for n, target in list(merges.items()):
        told = gender[target] or (max(sorted(said[target]), key=lambda g: said[target][g]) if said[target] else None)
        if not gender_compatible(gender[n], told):
            merges.pop(n)
    return merges, ambiguous


def resolve_within_file(conn, document_id: int) -> tuple[int, int]:
    """Apply plan_file_merges to this file's person entities. Returns (merged, ambiguous)."""
    rows = conn.execute(
        "SELECT e.id, e.name, e.name_norm, s.mentions FROM entity_sources s JOIN entities e ON e.id = s.entity_id "
        "WHERE s.document_id = %s AND e.type = 'person'", (document_id,)).fetchall()
    by_norm = {r[2]: (r[0], r[1], r[3]) for r in rows}
    merges, ambiguous = plan_file_merges({n: v[2] for n, v in by_norm.items()})
    conn.execute("DELETE FROM entity_alias_candidates WHERE document_id = %s", (document_id,))
    for short, full in merges.items():
        _move_contributions(conn, document_id, by_norm[short][0], by_norm[full][0], by_norm[short][1])
    for short, fulls in ambiguous.items():
        _move_contributions(conn, document_id, by_norm[short][0], None, by_norm[short][1])
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO entity_alias_candidates (alias_norm, entity_id, document_id) "
                            "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                            [(short, by_norm[f][0], document_id) for f in fulls])
    return len(merges), len(ambiguous)


def _move_contributions(conn, document_id: int, source: int, target: int | None, alias: str) -> None:
    """Give `source`'s mentions and edges in this file to `target` (None: drop them);
    `source` is deleted once no file mentions it, its name then an alias of `target`."""
    moved = conn.execute("DELETE FROM entity_sources WHERE entity_id = %s AND document_id = %s RETURNING mentions",
                         (source, document_id)).fetchone()
    count = moved[0] if moved else 0
    if target is not None:
        conn.execute(
            "INSERT INTO relations (source_id, target_id, relation, relation_raw, document_id, count, evidence, "
            "extractor) SELECT s, t, relation, relation_raw, document_id, count, evidence, extractor FROM ("
            "  SELECT CASE WHEN extractor = 'cooccurrence' THEN least(a, b) ELSE a END AS s,"
            "         CASE WHEN extractor = 'cooccurrence' THEN greatest(a, b) ELSE b END AS t, r.* FROM ("
            "    SELECT CASE WHEN source_id = %(src)s THEN %(dst)s ELSE source_id END AS a,"
            "           CASE WHEN target_id = %(src)s THEN %(dst)s ELSE target_id END AS b, relation, relation_raw,"
            "           document_id, count, evidence, extractor FROM relations"
            "    WHERE document_id = %(doc)s AND (source_id = %(src)s OR target_id = %(src)s)) r) m WHERE s <> t "
            "ON CONFLICT (source_id, target_id, relation, relation_raw, document_id) "
            "DO UPDATE SET count = relations.count + EXCLUDED.count",
            {"src": source, "dst": target, "doc": document_id})
        conn.execute("INSERT INTO entity_sources (entity_id, document_id, mentions) VALUES (%s, %s, %s) "
                     "ON CONFLICT (entity_id, document_id) DO UPDATE SET mentions = entity_sources.mentions + "
                     "EXCLUDED.mentions", (target, document_id, count))
        conn.execute("UPDATE entities SET mentions = mentions + %s, updated_at = now() WHERE id = %s",
                     (count, target))
    conn.execute("DELETE FROM relations WHERE document_id = %s AND (source_id = %s OR target_id = %s)",
                 (document_id, source, source))
    conn.execute("UPDATE entities SET mentions = greatest(0, mentions - %s) WHERE id = %s", (count, source))
    orphan = conn.execute("DELETE FROM entities e WHERE id = %s AND NOT EXISTS (SELECT 1 FROM entity_sources s "
                          "WHERE s.entity_id = e.id) RETURNING name_norm", (source,)).fetchone()
    if orphan and target is not None:
        conn.execute("INSERT INTO entity_aliases (alias_norm, entity_id, alias) VALUES (%s, %s, %s) "
                     "ON CONFLICT (alias_norm) DO NOTHING", (orphan[0], target, alias))


def forget_document(conn, document_id: int) -> None:
    """Remove one file's contributions (before re-extraction), keeping other files' intact."""
    conn.execute("DELETE FROM entity_alias_candidates WHERE document_id = %s", (document_id,))
    touched = [r[0] for r in conn.execute(
        "DELETE FROM entity_sources WHERE document_id = %s RETURNING entity_id", (document_id,)).fetchall()]
    conn.execute("DELETE FROM relations WHERE document_id = %s", (document_id,))
    if touched:
        # mentions and votes are recounted from what the other files still assert
        conn.execute("DELETE FROM entities e WHERE e.id = ANY(%s) AND NOT EXISTS "
                     "(SELECT 1 FROM entity_sources s WHERE s.entity_id = e.id)", (touched,))
        conn.execute("UPDATE entities e SET mentions = (SELECT coalesce(sum(mentions), 0) FROM entity_sources s "
                     "WHERE s.entity_id = e.id) WHERE e.id = ANY(%s)", (touched,))


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
        version, total = conn.execute(
            "SELECT version, (SELECT count(*) FROM passages WHERE document_id = d.id AND summary_level = 0 "
            "AND NOT removed AND kind NOT IN ('toc', 'boilerplate')) FROM documents d WHERE id = %s", (doc["id"],)).fetchone()
        progress = conn.execute("SELECT version, extractor, next_ordinal, completed_at FROM kg_progress "
                                "WHERE document_id = %s", (doc["id"],)).fetchone()
    if restart or progress is None or progress[0] != version or progress[1] != extractor:
        with db.transaction() as conn:
            conn.execute("SELECT 1 FROM documents WHERE id = %s FOR UPDATE", (doc["id"],))
            forget_document(conn, doc["id"])
            conn.execute(
                "INSERT INTO kg_progress (document_id, version, extractor, next_ordinal, passages_done, passages_total) "
                "VALUES (%s, %s, %s, 0, 0, %s) ON CONFLICT (document_id) DO UPDATE SET version = EXCLUDED.version, "
                "extractor = EXCLUDED.extractor, next_ordinal = 0, passages_done = 0, "
                "passages_total = EXCLUDED.passages_total, started_at = now(), updated_at = now(), completed_at = NULL",
                (doc["id"], version, extractor, total))
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
