"""The BM25 keyword lane on a small corpus written here: every term counts by its
IDF (a common term is not dropped), per-language stemming, filters that still
return their full k, and the `postings` index kept in step with `passages` by the
database's own triggers through every kind of write."""

from __future__ import annotations

import pytest

from serving.lexemes import refresh_lexeme_df
from serving.search import SearchConfig, search
from serving.search.types import SearchFilters, Viewer

KEYWORD = SearchConfig.only("keyword", summaries=False, log_queries=False)


def add_document(conn, path: str, title: str, language: str = "en") -> int:
    return conn.execute(
        "INSERT INTO documents (source, path, partition_key, title, format, language, ts_config, status) "
        "VALUES ('library', %s, %s, %s, 'txt', %s, ts_config_for_language(%s), 'ingested') RETURNING id",
        (path, path.replace("/", "_"), title, language, language)).fetchone()[0]


def add_passage(conn, doc: int | None, text: str, *, config: str = "english", ordinal: int = 0,
                source: str = "library", heading: str | None = None) -> int:
    return conn.execute(
        "INSERT INTO passages (document_id, source, ordinal, content, content_hash, ts_config, heading, kind) "
        "VALUES (%s, %s, %s, %s, md5(%s), %s::regconfig, %s, %s) RETURNING id",
        (doc, source, ordinal, text, text, config, heading, "memory" if source == "memory" else "text")
    ).fetchone()[0]


# the segment a passage's postings belong to, spelt out here (schema.sql postings_segment
# is what is under test): source x 8 + scope x 2 + hidden from a default search
SEGMENT = ("(CASE p.source WHEN 'library' THEN 0 WHEN 'vault' THEN 1 ELSE 2 END) * 8 "
           "+ (CASE p.scope WHEN 'global' THEN 0 WHEN 'department' THEN 1 ELSE 2 END) * 2 "
           "+ (p.removed OR p.superseded OR p.archived OR p.cold OR p.kind = 'boilerplate')::int")


def postings_match_tsvectors(conn) -> bool:
    """The postings hold exactly (config, lexeme, passage, tf, length, segment, document) of
    every verbatim passage."""
    diff = conn.execute(
        "WITH want AS (SELECT p.ts_config, u.lexeme, p.id AS passage_id, "
        "                     coalesce(array_length(u.positions, 1), 1) AS tf, length(p.tsv) AS dl, "
        f"                     ({SEGMENT})::smallint AS segment, p.document_id "
        "              FROM passages p, unnest(p.tsv) u WHERE p.summary_level = 0), "
        "     have AS (SELECT ts_config, lexeme, passage_id, tf, dl, segment, document_id FROM postings) "
        "SELECT (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM have) a) "
        "     + (SELECT count(*) FROM (SELECT * FROM have EXCEPT ALL SELECT * FROM want) b)").fetchone()[0]
    return diff == 0


PUMP_MANUAL = [
    # every passage says "pump": the core vocabulary of a one-subject library
    "The pump impeller spins inside the volute casing.",
    "Prime the pump before the first start.",
    "A worn pump bearing makes a grinding noise.",
    "The pump motor draws more current when the filter clogs.",
    "Check the pump discharge pressure every week.",
    "Pump cavitation erodes the impeller blades.",
    "The mechanical seal of the pump leaks when the shaft is bent.",
    "Align the pump shaft with the motor coupling.",
    "Vibration of the pump foundation loosens the anchor bolts.",
    "The pump curve shows head against flow.",
    "Replace the gland packing when the seal drips.",
    "The seal faces must stay clean and flat.",
]


@pytest.fixture()
def manual(db, embedder):
    with db.connect() as conn:
        doc = add_document(conn, "manual.txt", "Service manual")
        ids = [add_passage(conn, doc, text, ordinal=i) for i, text in enumerate(PUMP_MANUAL)]
        conn.commit()
        refresh_lexeme_df(conn)
        yield conn, doc, ids


def ranked(conn, embedder, query: str, config: SearchConfig = KEYWORD, **kw):
    return search(conn, embedder, query, config=config, **kw)


def test_a_term_in_every_passage_still_counts(manual, embedder):
    conn, _, ids = manual
    # "pump" is in 10 of 12 passages (far above the old 10% noise rule): alone it still
    # finds passages, and beside "seal" it lifts the seal passage that also says pump
    alone = ranked(conn, embedder, "pump", top_k=20)
    assert len(alone.results) == 10
    both = ranked(conn, embedder, "pump seal", top_k=5)
    assert both.results[0].passage_id == ids[6]      # pump + seal
    assert {r.passage_id for r in both.results[1:3]} == {ids[10], ids[11]}  # seal alone next
    terms = {t["lexeme"]: t for t in both.keyword_trace[0]["terms"]}
    assert set(terms) == {"pump", "seal"} and terms["pump"]["idf"] < terms["seal"]["idf"]


def test_rare_term_outweighs_common_term(manual, embedder):
    conn, doc, ids = manual
    rare = add_passage(conn, doc, "The volute gasket.", ordinal=50)
    common = add_passage(conn, doc, "The pump gasket.", ordinal=51)
    conn.commit()
    refresh_lexeme_df(conn)
    response = ranked(conn, embedder, "volute pump", top_k=5)
    order = [r.passage_id for r in response.results]
    # same length, one matching term each: the rarer term (volute: 2 passages) wins
    assert order.index(rare) < order.index(common)
    scores = {r.passage_id: r.score for r in response.results}
    assert scores[rare] > scores[common] > 0


def test_russian_passage_found_by_an_inflected_russian_query(manual, embedder):
    conn, _, _ = manual
    doc = add_document(conn, "ru/dochka.txt", "Капитанская дочка", "ru")
    target = add_passage(conn, doc, "Капитан Миронов защищал Белогорскую крепость от Пугачёва.",
                         config="russian")
    add_passage(conn, doc, "Маша жила в доме коменданта.", config="russian", ordinal=1)
    conn.commit()
    refresh_lexeme_df(conn)
    response = ranked(conn, embedder, "крепости капитана", top_k=5)
    assert response.results and response.results[0].passage_id == target
    russian = [t for t in response.keyword_trace if t["config"] == "russian"][0]
    assert {"крепост", "капита"} <= {t["lexeme"] for t in russian["terms"]} or \
        {"крепост"} <= {t["lexeme"] for t in russian["terms"]}
    # the English configuration cannot stem these words: they match no English posting
    english = [t for t in response.keyword_trace if t["config"] == "english"]
    assert not english or not english[0]["terms"]


def test_filters_still_return_their_full_k(manual, embedder):
    conn, doc, _ = manual
    # 15 memory passages about pumps, each long (low impact): with one posting per term
    # they are never among the library's best rows, yet a memory-only search gets k
    memories = [add_passage(conn, None, "pump " + "notes about maintenance schedules and spare parts " * 4
                            + f"entry {i}", source="memory") for i in range(15)]
    other = add_document(conn, "other.txt", "Other manual")
    others = [add_passage(conn, other, f"pump inspection record {i}", ordinal=i) for i in range(8)]
    conn.commit()
    refresh_lexeme_df(conn)
    tight = SearchConfig.only("keyword", summaries=False, log_queries=False, keyword_postings=1,
                              keyword_depth=5)
    response = ranked(conn, embedder, "pump", config=tight, top_k=5, filters={"source": "memory"})
    assert len(response.results) == 5 and {r.passage_id for r in response.results} <= set(memories)
    # a document filter: scored in place, full k from that document only
    one = ranked(conn, embedder, "pump record", config=tight, top_k=5, filters={"path": "other.txt"})
    assert len(one.results) == 5 and {r.passage_id for r in one.results} <= set(others)
    assert "document filter" in one.stages["keyword"]
    # removed passages stay in the postings but never come back
    conn.execute("UPDATE passages SET removed = true WHERE document_id = %s", (other,))
    conn.commit()
    gone = ranked(conn, embedder, "pump record", top_k=50)
    assert not {r.passage_id for r in gone.results} & set(others)


def test_postings_follow_every_write(manual, embedder):
    conn, doc, ids = manual
    assert postings_match_tsvectors(conn)
    n0 = conn.execute("SELECT count(*) FROM postings").fetchone()[0]
    assert n0 > 0
    # delete one passage
    conn.execute("DELETE FROM passages WHERE id = %s", (ids[0],))
    assert not conn.execute("SELECT 1 FROM postings WHERE passage_id = %s", (ids[0],)).fetchone()
    assert postings_match_tsvectors(conn)
    # re-ingest: the document's passages replaced by new text (ingest's swap)
    conn.execute("DELETE FROM passages WHERE document_id = %s", (doc,))
    new = add_passage(conn, doc, "The centrifugal compressor surges at low flow.")
    conn.commit()
    assert postings_match_tsvectors(conn)
    assert ranked(conn, embedder, "compressor surges", top_k=3).results[0].passage_id == new
    assert ranked(conn, embedder, "impeller", top_k=3).results == []
    # supersede: postings stay, moved to the hidden segment; search skips it
    conn.execute("UPDATE passages SET superseded = true WHERE id = %s", (new,))
    conn.commit()
    assert postings_match_tsvectors(conn)
    assert ranked(conn, embedder, "compressor surges", top_k=3).results == []
    # an edit of the text (a memory updated in place) re-indexes that row only
    conn.execute("UPDATE passages SET superseded = false, content = 'A diaphragm valve throttles slurry.' "
                 "WHERE id = %s", (new,))
    conn.commit()
    assert postings_match_tsvectors(conn)
    assert ranked(conn, embedder, "diaphragm", top_k=3).results[0].passage_id == new
    # summaries are not keyword-searchable: no postings
    summary = conn.execute(
        "INSERT INTO passages (document_id, summary_level, content, content_hash, ts_config, kind) "
        "VALUES (%s, 1, 'summary of the diaphragm valve', 'x', 'english', 'summary') RETURNING id",
        (doc,)).fetchone()[0]
    assert not conn.execute("SELECT 1 FROM postings WHERE passage_id = %s", (summary,)).fetchone()
    # the rebuild (backfill of an older database) gives the same rows the triggers kept
    before = conn.execute("SELECT count(*) FROM postings").fetchone()[0]
    assert conn.execute("SELECT postings_rebuild()").fetchone()[0] == before
    assert postings_match_tsvectors(conn)
    # something that bypassed the triggers: the lexeme_df refresh notices and rebuilds
    conn.execute("DELETE FROM postings WHERE lexeme = 'diaphragm'")
    conn.commit()
    figures = refresh_lexeme_df(conn)
    assert figures["postings_rebuilt"] and postings_match_tsvectors(conn)
    assert not refresh_lexeme_df(conn)["postings_rebuilt"]
    conn.execute("TRUNCATE passages CASCADE")
    assert conn.execute("SELECT count(*) FROM postings").fetchone()[0] == 0
    conn.commit()


def test_fresh_terms_count_before_the_refresh(manual, embedder):
    conn, doc, _ = manual
    new = add_passage(conn, doc, "The zyzzogeton pump hums.", ordinal=99)
    conn.commit()   # no refresh: zyzzogeton is in no lexeme_df row
    response = ranked(conn, embedder, "zyzzogeton", top_k=3)
    assert response.results[0].passage_id == new
    term = response.keyword_trace[0]["terms"][0]
    assert term["lexeme"] == "zyzzogeton" and term["df"] == 1 and term.get("estimated")


def test_segments_follow_flags_and_serve_every_filter(manual, embedder):
    """The postings walk reads only the segments a search's filters allow and takes a row
    unchecked only where its segment proves the filters: the results equal those of a
    predicate-checked walk for every filter, and rows move segments as their flags change."""
    conn, doc, ids = manual
    vault = add_passage(conn, None, "pump seal notes from the vault", source="vault")
    mine = add_passage(conn, None, "pump seal replaced by the night shift", source="memory")
    theirs = add_passage(conn, None, "pump seal leak noted by the day shift", source="memory")
    dept = add_passage(conn, doc, "pump seal torque for the department", ordinal=20)
    conn.execute("UPDATE passages SET scope = 'self', agent = 'ann' WHERE id = %s", (mine,))
    conn.execute("UPDATE passages SET scope = 'self', agent = 'bob' WHERE id = %s", (theirs,))
    conn.execute("UPDATE passages SET scope = 'department', department = 'ops' WHERE id = %s", (dept,))
    conn.execute("UPDATE passages SET removed = true WHERE id = %s", (ids[1],))
    conn.commit()
    assert postings_match_tsvectors(conn)
    refresh_lexeme_df(conn)

    def found(filters=None) -> set[int]:
        return {r.passage_id for r in ranked(conn, embedder, "pump seal", top_k=50, filters=filters).results}

    def allowed(where: str) -> set[int]:
        # every passage holding either word that the filter lets through, straight from passages
        return {r[0] for r in conn.execute(
            "SELECT id FROM passages p WHERE summary_level = 0 AND tsv @@ to_tsquery('english', 'pump | seal') "
            f"AND {where}")}

    visible = "NOT removed AND NOT superseded AND NOT archived AND NOT cold AND kind <> 'boilerplate'"
    assert found() == allowed(visible)
    assert found({"source": "memory"}) == allowed(f"{visible} AND source = 'memory'") == {mine, theirs}
    assert found({"scope": "department"}) == {dept}
    assert found({"source": "vault"}) == {vault}
    assert ids[1] in found({"include_removed": True}) and ids[1] not in found()
    assert found({"kind": "memory"}) == {mine, theirs}
    # a viewer: global rows as they are, self / department rows only its own
    viewer = Viewer(agent="ann", department="ops")
    assert found(SearchFilters(viewer=viewer)) == allowed(f"{visible} AND (scope = 'global' OR agent = 'ann' "
                                                            "OR department = 'ops')")
    assert theirs not in found(SearchFilters(viewer=viewer))
    # promotion and retention move rows between segments; a search follows at once
    conn.execute("UPDATE passages SET scope = 'global' WHERE id = %s", (theirs,))
    conn.execute("UPDATE passages SET cold = true WHERE id = %s", (mine,))
    conn.commit()
    assert postings_match_tsvectors(conn)
    assert found({"source": "memory"}) == {theirs}
    assert found(SearchFilters(sources=("memory",), include_cold=True)) == {mine, theirs}


def test_a_library_from_before_segments_is_migrated(manual, db, embedder):
    """A database whose postings were one list per term (the index postings_impact_idx,
    no segment or document on a row) gets every row written again with both when the
    schema is applied, and its searches find what they found."""
    conn, doc, ids = manual
    before = [r.passage_id for r in ranked(conn, embedder, "pump seal", top_k=5).results]
    conn.execute("UPDATE passages SET removed = true WHERE id = %s", (ids[6],))
    conn.execute("DROP INDEX postings_segment_idx")
    conn.execute("CREATE INDEX postings_impact_idx ON postings (ts_config, lexeme, impact DESC) "
                 "INCLUDE (passage_id, tf, dl)")
    conn.execute("UPDATE postings SET segment = 0, document_id = NULL")
    conn.commit()
    assert not postings_match_tsvectors(conn)
    conn.commit()   # the schema waits for tables no transaction holds
    db._schema_ready = False
    db.ensure_schema()
    assert postings_match_tsvectors(conn)
    indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'postings'")}
    assert indexes == {"postings_segment_idx", "postings_passage_idx"}
    after = [r.passage_id for r in ranked(conn, embedder, "pump seal", top_k=5).results]
    assert ids[6] in before and after[:4] == [pid for pid in before if pid != ids[6]]
