"""An audit of LoCoMo's answer key applied by `library eval memory --corrections`: a
corrected question takes the audit's evidence and answer, one left without evidence is
dropped, a correction for a conversation the folder does not hold is skipped, and a file
that is not an audit is refused with its reason. The folder and the audit are made here
(LoCoMo itself is research-use data and never enters the repository)."""

from __future__ import annotations

import json

import pytest

from library_pipeline.eval.locomo import session_qrels, turn_qrels
from library_pipeline.eval.locomo_data import load_locomo


def _folder(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    turns = [{"conversation": c, "id": t, "speaker": "Ann", "date": "1:56 pm on 8 May, 2023", "text": t,
              "content": t} for c in ("c1", "c2") for t in ("D1:1", "D1:2", "D2:1")]
    questions = [
        {"conversation": "c1", "qid": "c1-q0", "question": "When did Ann paint a sunrise?", "answer": "2022",
         "evidence": ["D1:1"], "category": 2},
        {"conversation": "c1", "qid": "c1-q1", "question": "How was Ann feeling on April 10?", "answer": "calm",
         "evidence": ["D1:2"], "category": 4},
        {"conversation": "c1", "qid": "c1-q2", "question": "What did Ann study?", "answer": "art",
         "evidence": ["D2:1"], "category": 4},
        {"conversation": "c2", "qid": "c2-q0", "question": "Where did Ann move from?", "answer": "Sweden",
         "evidence": ["D1:1"], "category": 4},
    ]
    (folder / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns), encoding="utf-8")
    (folder / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    return folder


def _audit(tmp_path, entries):
    path = tmp_path / "errors.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def _fix(qid, question, evidence, answer="fixed", kind="WRONG_CITATION"):
    return {"question_id": qid, "question": question, "category": 2, "error_type": kind,
            "cited_evidence": ["D1:1"], "correct_evidence": evidence, "correct_answer": answer}


def test_the_audit_replaces_evidence_and_answer_of_the_questions_it_corrects(tmp_path):
    folder = _folder(tmp_path)
    audit = _audit(tmp_path, [
        _fix("locomo_0_qa0", "When did Ann paint a  sunrise?", ["D2:1", "D1:2"], answer="last year"),
        _fix("locomo_0_qa1", "How was Ann feeling on April 10?", [], kind="TEMPORAL_ERROR"),
        _fix("locomo_0_qa2", "What did Ann study?", ["D2:1"], answer="painting", kind="HALLUCINATION"),
        _fix("locomo_7_qa0", "Where did Bob move from?", ["D2:1"]),      # same place, another text: not ours
        _fix("locomo_9_qa5", "A question of a conversation not here?", ["D1:1"]),
    ])
    published = load_locomo(folder)
    audited = load_locomo(folder, corrections=audit)
    assert published.answer_key == {} and len(published.questions) == 4
    by_qid = {q["qid"]: q for q in audited.questions}
    # the question the audit leaves without evidence is dropped, as one without evidence always is
    assert sorted(by_qid) == ["c1-q0", "c1-q2", "c2-q0"]
    assert by_qid["c1-q0"]["evidence"] == ["D2:1", "D1:2"] and by_qid["c1-q0"]["answer"] == "last year"
    assert by_qid["c1-q2"]["evidence"] == ["D2:1"] and by_qid["c1-q2"]["answer"] == "painting"
    assert by_qid["c2-q0"]["evidence"] == ["D1:1"] and "audit" not in by_qid["c2-q0"]
    assert by_qid["c1-q0"]["audit"] == "WRONG_CITATION"
    assert audited.answer_key == {"file": "errors.json", "corrections": 5, "applied": 3, "evidence_changed": 2,
                                  "left_without_evidence": 1,
                                  "kinds": {"HALLUCINATION": 1, "TEMPORAL_ERROR": 1, "WRONG_CITATION": 1}}
    # both units read the corrected evidence: turns as cited, sessions as the turns' sessions
    assert turn_qrels(audited)["c1-q0"] == {"c1/D2:1": 1, "c1/D1:2": 1}
    assert session_qrels(audited)["c1-q0"] == {"c1:D2": 1, "c1:D1": 1}
    # a part of the folder takes the same corrections
    part = load_locomo(folder, conversations=["c1"], limit=1, corrections=audit)
    assert [q["qid"] for q in part.questions] == ["c1-q0"] and part.questions[0]["evidence"] == ["D2:1", "D1:2"]


def test_a_correction_matching_two_questions_is_refused(tmp_path):
    folder = _folder(tmp_path)
    rows = (folder / "questions.jsonl").read_text().splitlines()
    twin = json.loads(rows[3]) | {"question": "When did Ann paint a sunrise?"}
    (folder / "questions.jsonl").write_text("\n".join(rows[:3] + [json.dumps(twin)]) + "\n")
    audit = _audit(tmp_path, [_fix("locomo_0_qa0", "When did Ann paint a sunrise?", ["D1:2"])])
    with pytest.raises(ValueError, match="matches c1-q0, c2-q0"):
        load_locomo(folder, corrections=audit)


@pytest.mark.parametrize("content,message", [
    ("{not json", "not a readable JSON audit"),
    ('{"question_id": "locomo_0_qa0"}', "expected a JSON list"),
    ('[{"question_id": "locomo_0_qa0"}]', "lacks question_id, question or correct_evidence"),
    ('[{"question_id": "q0", "question": "x", "correct_evidence": []}]', "expected locomo_<c>_qa<n>"),
    ('[{"question_id": "locomo_0_qa0", "question": "x", "correct_evidence": ["turn 3"]}]', "turn ids like D3:5"),
])
def test_a_file_that_is_not_an_audit_is_refused_with_its_reason(tmp_path, content, message):
    path = tmp_path / "errors.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_locomo(_folder(tmp_path), corrections=path)
