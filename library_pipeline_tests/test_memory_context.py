"""Memories read with their context, through the real memory search (embedded
PostgreSQL, the real embedder): a record of a thread gains from its neighbours, a
neighbour the lanes missed joins the results, and the rule never crosses an agent's
visibility, another thread, or a filter; and `library eval memory` on a tiny
LoCoMo-shaped folder written here (the research data itself is never read by tests)."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics

import pytest
from typer.testing import CliRunner

from library_pipeline_tests.search_fixtures import create_database
from serving.memory import Viewer, index_memory, search_memory
from serving.memory.context import (ASKING, NEIGHBOUR_SHARE, OTHER_SPEAKER, TURN_LENGTH, WINDOW, named_speaker,
                                    turn_weight, with_thread_context)

ME = Viewer("Agent-Chat")
OTHER = Viewer("Agent-Other")

THREAD = [
    ("s1:1", "Caroline: I spent the whole week on research for the family I want to start."),
    ("s1:2", "Melanie: What did you research?"),
    ("s1:3", "Caroline: Adoption agencies, mostly the ones that welcome single parents."),
    ("s1:4", "Melanie: That sounds like a big step, I am proud of you."),
]
OTHERS = [
    ("n1", "Melanie: The kids and I painted a sunrise over the lake on Sunday."),
    ("n2", "Caroline: My guitar teacher says my chords are getting cleaner."),
    ("n3", "Melanie: We ran a charity race for the animal shelter last weekend."),
    ("n4", "Caroline: I bought a new pair of hiking boots for the camping trip."),
    # near the question's words, and about something else
    ("n5", "Caroline: I read some research about sleep and coffee."),
]


@pytest.fixture(scope="module")
def cdb(server_db):
    return create_database(server_db)


@pytest.fixture(scope="module")
def loaded(cdb, embedder):
    ids: dict[str, int] = {}
    with cdb.connect(autocommit=True) as conn:
        for aid, text in THREAD:
            ids[aid] = index_memory(conn, embedder, ME, artifact_id=aid, content=text,
                                    meta={"thread": "session-1", "speaker": text.split(":")[0]}).record["id"]
        for aid, text in OTHERS:  # no thread: each its own
            ids[aid] = index_memory(conn, embedder, ME, artifact_id=aid, content=text).record["id"]
        # another agent's record in a thread of the same name, written between them
        ids["other"] = index_memory(conn, embedder, OTHER, artifact_id="x",
                                    content="Adoption agencies research notes of someone else entirely.",
                                    meta={"thread": "session-1"}).record["id"]
    return ids


@pytest.fixture()
def conn(cdb, loaded):
    with cdb.connect(autocommit=True) as c:
        yield c


def _ranked(conn, embedder, query: str, share: float | None = None, **kw) -> list[int]:
    out = search_memory(conn, embedder, ME, query, top_k=10, thread_share=share, **kw)
    return [r["id"] for r in out["results"]]


def _context_scores(conn, embedder, query: str) -> tuple[dict[int, float], dict[int, float]]:
    alone = search_memory(conn, embedder, ME, query, top_k=20, thread_share=0.0)["results"]
    context = search_memory(conn, embedder, ME, query, top_k=20)["results"]
    assert [r["score"] for r in context] == sorted((r["score"] for r in context), reverse=True)
    return {r["id"]: r["score"] for r in alone}, {r["id"]: r["score"] for r in context}


def _length_factors(texts: list[str]) -> list[float]:
    """Each turn's length against the median turn: ((words + 1) / (median + 1)) ** TURN_LENGTH."""
    n = [len(re.findall(r"\w+", t)) for t in texts]
    typical = statistics.median(n)
    return [((k + 1) / (typical + 1)) ** TURN_LENGTH for k in n]


def _expected(before: dict[int, float], order: list[int], weights: list[float]) -> list[float]:
    """score + share x the best neighbour's fused score (halved per step beyond the first),
    then times the turn's weight and its length against the thread's median turn (every
    threaded record of the pool is one of THREAD's turns)."""
    out = []
    lengths = _length_factors([text for _, text in THREAD])
    for i, rid in enumerate(order):
        gains = [NEIGHBOUR_SHARE * before[order[j]] / 2 ** (abs(i - j) - 1)
                 for j in range(len(order)) if 0 < abs(i - j) <= WINDOW]
        out.append((before[rid] + max(gains)) * weights[i] * lengths[i])
    return out


def test_thread_records_gain_their_neighbours_share(conn, embedder, loaded):
    # the query names no speaker: only the turn that ends asking counts ASKING x its score
    before, after = _context_scores(conn, embedder, "What did she research?")
    order = [loaded[aid] for aid, _ in THREAD]
    for rid, want in zip(order, _expected(before, order, [1.0, ASKING, 1.0, 1.0])):
        assert after[rid] == pytest.approx(want, abs=1e-5), f"{before} {after} {order}"
    # the answer, which shares no word with the question, gains at least half the question
    # turn's score (before its length against the thread's typical turn counts)
    answer, question = loaded["s1:3"], loaded["s1:2"]
    length = _length_factors([text for _, text in THREAD])[2]
    assert after[answer] / length - before[answer] >= NEIGHBOUR_SHARE * before[question] - 1e-5
    # the other agent's record never appears: neighbours are read under the viewer's visibility
    assert loaded["other"] not in after


def test_a_question_naming_a_speaker_weighs_the_other_speakers_turns_less(conn, embedder, loaded):
    """"What did Caroline research?" is answered by Caroline's turns: Melanie's count
    OTHER_SPEAKER x their score (her asking turn ASKING x that again); the shares their
    neighbours gain are taken from the fused scores, before the weights."""
    before, after = _context_scores(conn, embedder, "What did Caroline research?")
    order = [loaded[aid] for aid, _ in THREAD]
    weights = [1.0, OTHER_SPEAKER * ASKING, 1.0, OTHER_SPEAKER]
    for rid, want in zip(order, _expected(before, order, weights)):
        assert after[rid] == pytest.approx(want, abs=1e-5), f"{before} {after} {order}"
    assert after[loaded["s1:3"]] > after[loaded["s1:2"]] and after[loaded["s1:1"]] > after[loaded["s1:4"]]
    # records without a thread keep their score whoever the query names
    for aid in ("n1", "n2", "n3", "n4", "n5"):
        rid = loaded[aid]
        if rid in before and rid in after:
            assert after[rid] == pytest.approx(before[rid])


def test_turn_weights_read_the_speaker_named_and_a_closing_question():
    assert named_speaker("What books has tim read?", {"Tim", "John"}) == "Tim"
    assert named_speaker("What did Tim and John plan?", {"Tim", "John"}) is None      # both: no rule
    assert named_speaker("Where did Timothy go? Annual plans?", {"Tim", "Ann"}) is None  # whole words only
    assert named_speaker("Melanie's kids", {"Melanie", "Caroline"}) == "Melanie"
    turn = {"thread": "s1", "speaker": "John"}
    assert turn_weight("John: I read a novel.", turn, "Tim") == OTHER_SPEAKER
    assert turn_weight("John: I read a novel. And you? ", turn, "John") == ASKING
    assert turn_weight("John: And you?", turn, "Tim") == OTHER_SPEAKER * ASKING
    assert turn_weight("John: And you?", turn, "Tim", whole=False) == OTHER_SPEAKER   # a passage of a long record
    assert turn_weight("And you?", {"speaker": "John"}, "Tim") == 1.0                 # no thread: as before
    # the turn's words against the pool's typical turn: 7 words (8 with the smoothing) against 3
    assert turn_weight("John: I read a novel last week.", turn, "John", typical=3) == pytest.approx(2 ** TURN_LENGTH)
    assert turn_weight("John: I read a novel.", turn, "John", typical=5) == pytest.approx(1.0)
    assert turn_weight("John: Yes!", turn, None, typical=5) == pytest.approx(0.5 ** TURN_LENGTH)
    assert turn_weight("John: Yes!", turn, None, typical=5, whole=False) == 1.0      # a passage: not its length
    assert turn_weight("Yes!", {"speaker": "John"}, None, typical=5) == 1.0            # no thread: as before


def test_a_turn_that_tells_outranks_a_short_one_repeating_the_question(cdb, embedder):
    """A short turn that repeats the query's words scores high in the lanes, while the turn
    that tells something is the longer one: after thread context each threaded turn counts
    ((words + 1) / (the pool's median + 1)) ** TURN_LENGTH x its score, and the long turn
    comes first. Records without a thread take no such factor."""
    viewer = Viewer("Agent-Lengths")
    short = "Ann: Pottery class!"
    long = ("Ann: On Tuesday evenings I go to the pottery class at the old mill; we throw bowls and mugs, "
            "and the teacher fires them in the kiln for us the week after.")
    with cdb.connect(autocommit=True) as conn:
        ids = [index_memory(conn, embedder, viewer, artifact_id=f"t{i}", content=text,
                            meta={"thread": f"day-{i}", "speaker": "Ann"}).record["id"]
               for i, text in enumerate((short, long))]
        note = index_memory(conn, embedder, viewer, artifact_id="note", content="Pottery class: bring an apron."
                            ).record["id"]
        alone = {r["id"]: r["score"] for r in search_memory(conn, embedder, viewer, "pottery class", top_k=10,
                                                            thread_share=0.0)["results"]}
        after = {r["id"]: r["score"] for r in search_memory(conn, embedder, viewer, "pottery class",
                                                            top_k=10)["results"]}
    assert alone[ids[0]] > alone[ids[1]]          # the lanes prefer the short turn
    for rid, factor in zip(ids, _length_factors([short, long])):   # one turn per thread: no neighbours
        assert after[rid] == pytest.approx(alone[rid] * factor, abs=1e-5)
    assert after[ids[1]] > after[ids[0]]
    assert after[note] == pytest.approx(alone[note])


def test_records_without_a_thread_rank_as_before(conn, embedder, loaded):
    query = "painting a sunrise with the kids"
    out = search_memory(conn, embedder, ME, query, top_k=10)
    alone = search_memory(conn, embedder, ME, query, top_k=10, thread_share=0.0)
    scores = {r["id"]: r["score"] for r in out["results"]}
    plain = {r["id"]: r["score"] for r in alone["results"]}
    for aid in ("n1", "n2", "n3", "n4", "n5"):
        rid = loaded[aid]
        if rid in plain:
            assert scores[rid] == pytest.approx(plain[rid])


def test_neighbours_stay_inside_the_agents_thread(conn, loaded):
    ranked = [(loaded["s1:2"], 1.0)]
    scored = {s.record_id: s for s in with_thread_context(conn, ME, ranked, share=0.5, window=1)}
    # the question's two neighbours join with half its score; nothing of the other agent,
    # nothing without a thread
    assert set(scored) == {loaded["s1:1"], loaded["s1:2"], loaded["s1:3"]}
    assert scored[loaded["s1:3"]].total == pytest.approx(0.5) and scored[loaded["s1:2"]].total == pytest.approx(1.0)
    # window 2: the record two steps away gains half as much again
    narrow = {s.record_id for s in with_thread_context(conn, ME, ranked, share=0.5, window=1)}
    assert loaded["s1:4"] not in narrow
    wide = {s.record_id: s.total for s in with_thread_context(conn, ME, ranked, share=0.5, window=2)}
    assert wide[loaded["s1:4"]] == pytest.approx(0.25)
    # only records already in the pool when the caller filtered
    pool = {s.record_id for s in with_thread_context(conn, ME, ranked, share=0.5, window=2, pool_only=True)}
    assert pool == {loaded["s1:2"]}


def test_a_filter_is_never_widened_by_neighbours(conn, embedder, loaded):
    out = search_memory(conn, embedder, ME, "What did Caroline research?", top_k=10,
                        filter={"agent": ME.agent, "type": "nothing-has-this-type"})
    assert out["results"] == []


# -- library eval memory on a synthetic LoCoMo-shaped folder ------------------------------

def _turn(conv: str, tid: str, speaker: str, date: str, text: str) -> dict:
    return {"conversation": conv, "id": tid, "speaker": speaker, "date": date, "text": text,
            "content": f"[{date}] {speaker}: {text}"}


def write_locomo(folder):
    d1, d2 = "1:56 pm on 8 May, 2023", "10:15 am on 2 June, 2023"
    turns = [
        _turn("c1", "D1:1", "Ann", d1, "I finally started the pottery class downtown."),
        _turn("c1", "D1:2", "Bob", d1, "Which one did you pick?"),
        _turn("c1", "D1:3", "Ann", d1, "The one at the old mill, on Tuesday evenings."),
        _turn("c1", "D2:1", "Bob", d2, "I adopted a grey cat from the shelter yesterday."),
        _turn("c1", "D2:2", "Ann", d2, "What is the cat called?"),
        _turn("c1", "D2:3", "Bob", d2, "Pepper, because of the spots on her nose."),
        _turn("c2", "D1:1", "Cy", d1, "My sister moved to Lisbon for a new job."),
        _turn("c2", "D1:2", "Di", d1, "What kind of work does she do there?"),
        _turn("c2", "D1:3", "Cy", d1, "She designs bridges for an engineering firm."),
    ]
    questions = [
        {"conversation": "c1", "qid": "c1-q0", "question": "Where does Ann take her pottery class?",
         "answer": "the old mill", "evidence": ["D1:3"], "category": 4},
        {"conversation": "c1", "qid": "c1-q1", "question": "When did Bob adopt a cat?",
         "answer": "1 June 2023", "evidence": ["D2:1"], "category": 2},
        {"conversation": "c1", "qid": "c1-q2", "question": "What is the name of Bob's cat and where is it from?",
         "answer": "Pepper, the shelter", "evidence": ["D2:1", "D2:3"], "category": 1},
        {"conversation": "c1", "qid": "c1-q3", "question": "adversarial", "answer": "",
         "evidence": ["D1:1"], "category": 5},
        {"conversation": "c2", "qid": "c2-q0", "question": "What does Cy's sister do in Lisbon?",
         "answer": "designs bridges", "evidence": ["D1:3"], "category": 4},
    ]
    folder.mkdir(parents=True)
    (folder / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    (folder / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    return folder


def test_a_long_records_passages_are_read_with_their_neighbours(conn, embedder):
    """A long memory is chunked like a document, and each of its passages is scored by BM25
    with the record's neighbouring passages (the calibrated fusion's context), never with
    another record's."""
    from serving.search.calibration import pool_bm25

    filler = " ".join(f"the survey crew logged tide gauge {i} at the harbour wall" for i in range(60))
    report = "Zeppelin hangar inspection notes. " + filler + " " + filler + " Final remark about the ferry."
    rid = index_memory(conn, embedder, ME, artifact_id="long-report", content=report).record["id"]
    other = index_memory(conn, embedder, ME, artifact_id="short", content="Zeppelin museum tickets, two adults."
                         ).record["id"]
    rows = conn.execute("SELECT id, memory_id, ordinal, content FROM passages WHERE memory_id = ANY(%s) "
                        "ORDER BY memory_id, ordinal", ([rid, other],)).fetchall()
    chunks = [(pid, text) for pid, mid, _, text in rows if mid == rid]
    assert len(chunks) >= 3
    assert "zeppelin" in chunks[0][1].lower() and "zeppelin" not in chunks[1][1].lower()
    avg = conn.execute("SELECT avg(length(tsv)) FROM passages WHERE memory_id = ANY(%s)", ([rid, other],)).fetchone()[0]
    ids = [pid for pid, _ in chunks] + [pid for pid, mid, _, _ in rows if mid == other]
    own, window = pool_bm25(conn, ids, [("english", "zeppelin", 2.0, float(avg))], 1.2, 0.75, 1)
    first, second, third = (pid for pid, _ in chunks[:3])
    assert own.get(first, 0) > 0 and own.get(second, 0) == 0
    assert window[second] > 0          # its neighbour before holds the word
    assert third not in window          # two passages away: outside a window of 1
    short = next(pid for pid, mid, _, _ in rows if mid == other)
    assert window[short] == pytest.approx(own[short])  # a one-passage record is its own window


def test_eval_memory_command_writes_both_units(tmp_path, make_db):
    from library_pipeline.eval.cli import eval_app

    target = make_db()
    folder = write_locomo(tmp_path / "tiny_locomo")
    out = tmp_path / "out" / "mem"
    result = CliRunner().invoke(eval_app, ["memory", str(folder), "--out", str(out), "--dsn", target.settings.db_dsn,
                                           "--no-anchors", "--no-progress"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.with_name("mem.json").read_text())
    assert data["questions"] == 4 and data["conversations"] == ["c1", "c2"]   # category 5 left out
    memory = data["systems"]["memory"]
    assert set(memory["categories"]) == {"single-hop", "temporal", "multi-hop"}
    assert memory["recall@10"] == pytest.approx(1.0)          # 3-turn agents: everything is in the top 10
    assert memory["all@10"] == pytest.approx(1.0) and 0 < memory["recall@5"] <= 1.0
    assert "bm25s" in data["systems"] and data["systems"]["bm25s"]["recall@10"] == pytest.approx(1.0)
    # the session unit: 3 sessions in one index, the evidence mapped to its sessions
    assert data["sessions"]["records"] == 3 and 0 < data["sessions"]["R@5"] <= 1.0
    assert data["sessions"]["MRR"] > 0.5
    assert data["timings"]["index"]["records"] == 9 and data["timings"]["search"]["p50_ms"] > 0
    table = out.with_name("mem.md").read_text()
    assert "| **ours: memory_search" in table and "Whole-session notes" in table
    assert out.with_name("mem.png").read_bytes()[:4] == b"\x89PNG"
    # the records went to the database given, each conversation its own agent, with its context
    with target.connect() as c:
        rows = c.execute("SELECT agent, artifact_id, meta FROM memories WHERE agent = 'c1' AND artifact_id = 'D2:3'"
                         ).fetchall()
    assert rows and rows[0][2]["thread"] == "D2" and rows[0][2]["speaker"] == "Bob"
    assert rows[0][2]["date"] == "2023-06-02"

    assert data["answer_key"] == "as published" and "the answer key as published" in table

    # a fixed small part: one conversation, its first question; reused without reloading; an
    # audit of the answer key moves that question's evidence to the turn before
    audit = tmp_path / "errors.json"
    audit.write_text(json.dumps([{"question_id": "locomo_1_qa0", "question": "What does Cy's sister do in Lisbon?",
                                  "error_type": "WRONG_CITATION", "correct_evidence": ["D1:1"]}]))
    small = CliRunner().invoke(eval_app, ["memory", str(folder), "--out", str(out), "--dsn",
                                          target.settings.db_dsn, "--no-anchors", "--no-progress",
                                          "--conversations", "c2", "--limit", "1", "--no-sessions",
                                          "--corrections", str(audit)])
    assert small.exit_code == 0, small.output
    data = json.loads(out.with_name("mem.json").read_text())
    assert data["questions"] == 1 and data["conversations"] == ["c2"] and data["sessions"] == {}
    assert data["answer_key"]["applied"] == 1 and data["answer_key"]["evidence_changed"] == 1
    assert "the answer key as audited (errors.json: 1 questions corrected" in out.with_name("mem.md").read_text()
    assert data["systems"]["memory"]["recall@10"] == pytest.approx(1.0)   # 3 turns: D1:1 is in the top 10
    bad = CliRunner().invoke(eval_app, ["memory", str(folder), "--conversations", "c9", "--dsn",
                                        target.settings.db_dsn])
    assert bad.exit_code != 0 and "c9" in bad.output


def test_the_session_unit_is_measured_in_its_own_database(tmp_path, make_db, embedder):
    """The units' records would change each other's figures (one background sample of
    the database's passages calibrates both): beside a library, the turns and the session
    notes each get an evaluation database of their own."""
    from library_pipeline.eval.beir import eval_database, release
    from library_pipeline.eval.locomo import SESSIONS_AGENT, run_locomo_eval
    from library_pipeline.eval.locomo_data import load_locomo

    base = make_db()
    lset = load_locomo(write_locomo(tmp_path / "tiny_locomo"))
    result = run_locomo_eval(base, embedder, lset, dense_models=[])
    assert result.sessions["records"] == 3 and result.systems["memory"]["recall@10"] == pytest.approx(1.0)
    for name, agents in (("locomo", {"c1", "c2"}), ("locomo_sessions", {SESSIONS_AGENT})):
        db = eval_database(name, base=base)
        try:
            with db.connect() as conn:
                assert {a for (a,) in conn.execute("SELECT DISTINCT agent FROM memories")} == agents, name
        finally:
            release(db)


def test_locomo_check_skips_without_data_and_runs_with_it(db, tmp_path, monkeypatch):
    import dagster as dg

    from library_pipeline.defs.eval.checks import memory_locomo_recall
    from library_pipeline.defs.memory.assets import MemoryClock, memory_retention
    from library_pipeline.resources import EmbedderResource, LibraryDatabase

    resources = {"library_db": LibraryDatabase.from_settings(db.settings),
                 "embedder": EmbedderResource.from_settings(db.settings), "memory_clock": MemoryClock()}
    monkeypatch.delenv("LIBRARY_EVAL_LOCOMO", raising=False)
    skipped = dg.materialize([memory_retention, memory_locomo_recall], resources=resources)
    evaluation = skipped.get_asset_check_evaluations()[0]
    assert evaluation.passed and "skipped" in evaluation.description and "LIBRARY_EVAL_LOCOMO" in evaluation.description

    # the check's fixed part is conv-26: a synthetic folder with a conversation of that name
    folder = tmp_path / "locomo"
    write_locomo(folder)
    for name in ("turns.jsonl", "questions.jsonl"):
        path = folder / name
        path.write_text(path.read_text(encoding="utf-8").replace('"c1"', '"conv-26"'), encoding="utf-8")
    settings = dataclasses.replace(db.settings, locomo_dir=str(folder))
    resources |= {"library_db": LibraryDatabase.from_settings(settings), "embedder": EmbedderResource.from_settings(settings)}
    ran = dg.materialize([memory_retention, memory_locomo_recall], resources=resources)
    evaluation = ran.get_asset_check_evaluations()[0]
    meta = {k: v.value for k, v in evaluation.metadata.items()}
    assert evaluation.passed and meta["questions"] == 3 and meta["recall@10"] == pytest.approx(1.0), meta
    # the live memory store was never touched
    with db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0


# -- a long note's lines: who speaks, and whether a line asks ---------------------------------

NOTES = {
    # the answer: Tim says what he read, among small talk
    "answer": ["Chat with John, 3 May 2023",
               "John: Morning! The rain finally stopped over here.",
               "Tim: I have read two fantasy books this spring, The Name of the Wind and Mistborn, the best books I read in years.",
               "John: Nice. My team won the league game on Saturday, I scored twice.",
               "Tim: I also started a history of the Roman roads, slow going so far.",
               "John: Coach wants extra practice before the final next month.",
               "Tim: Good luck with it. I am off to the Harry Potter studio tour in June.",
               "John: Send pictures of the castle model, my kids would love them.",
               "Tim: Will do. My sister is visiting from Dublin next weekend as well.",
               "John: Take her to the new bakery on the corner, their bread is great.",
               "Tim: Good idea, she loves sourdough. Talk soon!"],
    # the crowd: John asks Tim about books, and Tim answers about something else
    "crowd": ["Chat with John, 9 May 2023",
              "John: Tim, what books have you read lately? Which books would you say you have read and liked?",
              "Tim: Not much, the kitchen eats my evenings.",
              "John: The match on Sunday was rained off, so we train on Tuesday instead.",
              "Tim: The tiles arrived broken, so we are waiting on a new delivery.",
              "John: My cousin is getting married in Porto in the autumn.",
              "Tim: The plumber comes on Thursday, then the painter next week.",
              "John: We finally fixed the leaking tap in the bathroom.",
              "Tim: We may move the fridge to the other wall after all.",
              "John: Let me know if you need a hand carrying things.",
              "Tim: Too tired to think about it, to be honest. Talk soon!"],
}
# small talk after each note, so both are longer than the embedder's window (cut between lines)
SMALL_TALK = ["John: The garden is full of tomatoes this summer, far more than we can eat.",
              "Tim: We had the same with courgettes last year, the neighbours got most of them.",
              "John: The dog learned to open the back door, which is a problem at night.",
              "Tim: Ours just sleeps on the sofa all day and snores through the thunderstorms.",
              "John: The car needs new tyres before the drive to the coast in August.",
              "Tim: The ferry tickets went up again, so we will take the train this time.",
              "John: My brother is building a treehouse with his kids, it has a rope ladder.",
              "Tim: That sounds like a fun weekend project for the whole family.",
              "John: The heating bill was lower this winter with the new windows.",
              "Tim: We should get ours replaced too before it gets cold again."]


def test_a_long_notes_lines_are_weighed_by_speaker_and_asking(cdb, embedder, monkeypatch):
    """A conversation saved as one note is cut between its lines and scored by its passages;
    a question naming Tim ("What books has Tim read?") is answered by Tim's lines, not by
    John's questions to him that share its words: John's lines count OTHER_SPEAKER, lines
    ending "?" ASKING (context.lines_weight). Without the weights the note of John's
    questions ranks first."""
    from serving.memory import context
    from serving.memory.store import MEMORY_SEARCH_CONFIG, record_score
    from serving.search.engine import search
    from serving.search.types import MAX_TOP_K, SearchFilters

    viewer = Viewer("Agent-Notes")
    with cdb.connect(autocommit=True) as conn:
        ids = {}
        for key, lines in NOTES.items():
            res = index_memory(conn, embedder, viewer, artifact_id=key, content="\n".join(lines + SMALL_TALK),
                               meta={"type": "session"})
            assert res.chunks > 1        # cut between its lines
            ids[key] = res.record["id"]
        query = "What books has Tim read?"

        def ranked() -> list[int]:
            out = search_memory(conn, embedder, viewer, query, top_k=5)
            return [r["id"] for r in out["results"]]

        assert ranked()[0] == ids["answer"]
        with monkeypatch.context() as m:
            m.setattr(context, "OTHER_SPEAKER", 1.0)
            m.setattr(context, "ASKING", 1.0)
            assert ranked()[0] == ids["crowd"]
        # a note's score: record_score of its pooled passages' fused scores, each times its
        # lines' weight
        resp = search(conn, embedder, query, top_k=MAX_TOP_K, config=MEMORY_SEARCH_CONFIG,
                      filters=SearchFilters(viewer=viewer, sources=("memory",)))   # as search_memory asks
        named = context.named_speaker(resp.query, context.line_speakers([r.text for r in resp.results]))
        assert named == "Tim"
        out = {r["id"]: r["score"] for r in search_memory(conn, embedder, viewer, query, top_k=5)["results"]}
        rows = dict(conn.execute("SELECT id, memory_id FROM passages WHERE memory_id = ANY(%s)",
                                 (list(ids.values()),)).fetchall())
        for rid in ids.values():
            want = record_score([r.score * context.lines_weight(r.text, named) for r in resp.results
                                 if rows.get(r.passage_id) == rid])
            assert out[rid] == pytest.approx(want, abs=1e-5)
    assert context.lines_weight("John: Which books did you read?", "Tim") == OTHER_SPEAKER * ASKING
    assert context.lines_weight("Tim: I read Dune.", "Tim") == 1.0
    assert context.lines_weight("Tim: I read Dune.", None) == 1.0
    assert context.lines_weight("Chat with John, 3 May 2023", "Tim") == 1.0      # no label: never weighed
    two = "Tim: I read Dune.\nJohn: And you?"
    a, b = len("Tim: I read Dune."), len("John: And you?")
    assert context.lines_weight(two, "Tim") == pytest.approx((a + b * OTHER_SPEAKER * ASKING) / (a + b))
    assert context.line_speakers(["Tim: hi\nuser: hello\nno label here\n12: x"]) == {"Tim", "user"}
