"""A LoCoMo-shaped folder read for `library eval memory`, and an audit of its answer key.

The folder holds `turns.jsonl` ({conversation, id "D3:5", speaker, date, text, content
"[date] speaker: text"}) and `questions.jsonl` ({conversation, qid "<conversation>-q<n>",
question, answer, evidence [turn ids], category 1-4; 5, adversarial, is left out}). The
data is research-use only: nothing of it is ever copied into this repository.

The published answer key cites wrong turns for some questions, or gives an answer the
conversation does not hold. Penfield Labs audited it (github.com/dial481/locomo-audit,
`errors.json`, CC BY-NC 4.0 like LoCoMo: 156 of the ten conversations' questions, 96 of
them citing other turns). Given that file (`corrections`), a corrected question's evidence
and answer become the audit's; one the audit leaves without evidence is then dropped, as a
question without evidence always is. basic-memory's LoCoMo benchmark scores against the
audited key; `library eval memory --corrections` does the same and reports which key each
figure used. The audit is read from where the user keeps it, never copied here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass
class LocomoSet:
    name: str
    turns: dict[str, list[dict[str, Any]]]     # conversation -> its turns in order
    questions: list[dict[str, Any]]            # in file order
    answer_key: dict[str, Any] = field(default_factory=dict)   # the audit applied (apply_corrections)

    @property
    def conversations(self) -> list[str]:
        return list(self.turns)


def load_locomo(directory: Path | str, *, conversations: list[str] | None = None, limit: int = 0,
                corrections: Path | str | None = None) -> LocomoSet:
    """The folder's turns and questions; only `conversations` when given (unknown names
    are refused), and only the first `limit` questions of each conversation when > 0 -
    a fixed part, so a small run is the same run every time. `corrections`: an audit of
    the answer key (apply_corrections), applied before anything is left out."""
    directory = Path(directory)
    turns: dict[str, list[dict[str, Any]]] = {}
    for t in _jsonl(directory / "turns.jsonl"):
        turns.setdefault(t["conversation"], []).append(t)
    if conversations:
        unknown = [c for c in conversations if c not in turns]
        if unknown:
            raise ValueError(f"{directory}: no conversation {unknown[0]!r} (it has {', '.join(turns)})")
        turns = {c: turns[c] for c in conversations}
    per_conv: dict[str, int] = {}
    questions: list[dict[str, Any]] = []
    every = _jsonl(directory / "questions.jsonl")
    key = apply_corrections(every, corrections) if corrections else {}
    for q in every:
        conv = q["conversation"]
        if conv not in turns or int(q["category"]) not in CATEGORIES or not q["evidence"]:
            continue
        if limit and per_conv.get(conv, 0) >= limit:
            continue
        per_conv[conv] = per_conv.get(conv, 0) + 1
        questions.append(q)
    if not questions:
        raise ValueError(f"{directory}: no questions of categories 1-4 for {', '.join(turns) or 'any conversation'}")
    return LocomoSet(name=directory.name, turns=turns, questions=questions, answer_key=key)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def session_of(turn_id: str) -> str:
    """"D3:5" -> "D3"."""
    return turn_id.split(":", 1)[0]


def iso_date(when: str) -> str | None:
    """LoCoMo's "1:56 pm on 8 May, 2023" as "2023-05-08" (None when it does not parse)."""
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y-%m-%d"):
        try:
            return datetime.strptime(when.strip(), fmt).date().isoformat()
        except ValueError:
            continue
    return None


def turn_meta(turn: dict[str, Any]) -> dict[str, Any]:
    """What a chat agent's client knows beside a turn's text: the session it belongs
    to (`thread`), who spoke, when."""
    meta: dict[str, Any] = {"type": "conversation", "thread": session_of(turn["id"]), "speaker": turn["speaker"]}
    day = iso_date(turn.get("date") or "")
    if day:
        meta["date"] = day
    return meta


def session_notes(lset: LocomoSet) -> dict[str, str]:
    """"conv-26:D3" -> the session as one note: a header line, then "speaker: text" per turn."""
    notes: dict[str, list[str]] = {}
    for conv, turns in lset.turns.items():
        for t in turns:
            key = f"{conv}:{session_of(t['id'])}"
            if key not in notes:
                notes[key] = [f"{conv}, session {session_of(t['id'])[1:]}, {t['date']}"]
            notes[key].append(f"{t['speaker']}: {t['text']}")
    return {k: "\n".join(v) for k, v in notes.items()}


_AUDIT_ID = re.compile(r"locomo_(\d+)_qa(\d+)")
_TURN_ID = re.compile(r"D\d+:\d+")


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def apply_corrections(questions: list[dict[str, Any]], path: Path | str) -> dict[str, Any]:
    """Replace the evidence (and answer) of the questions an audit corrects, in place.

    The audit's file is a list of {question_id "locomo_<conversation>_qa<n>", question,
    correct_evidence [turn ids], correct_answer, error_type}; n is the question's place
    in its conversation, which a qid "<conversation>-q<n>" carries, and the question's
    text must be the same: the audit numbers conversations by their place in the
    original file, which a folder holding some of them does not keep. A correction that
    matches no question here belongs to a conversation not in the folder; one that
    matches two is refused. Returns what was applied."""
    path = Path(path)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON audit of the answer key ({exc})") from None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of corrections, got {type(entries).__name__}")
    by_place: dict[str, list[dict[str, Any]]] = {}
    for q in questions:
        place = str(q.get("qid", "")).rsplit("-q", 1)
        if len(place) == 2 and place[1].isdigit():
            by_place.setdefault(place[1], []).append(q)
    applied = changed = emptied = 0
    kinds: dict[str, int] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not {"question_id", "question", "correct_evidence"} <= set(e):
            raise ValueError(f"{path}: correction {i} lacks question_id, question or correct_evidence")
        m = _AUDIT_ID.fullmatch(str(e["question_id"]))
        evidence = e["correct_evidence"]
        if not m or not isinstance(evidence, list) or not all(_TURN_ID.fullmatch(str(x)) for x in evidence):
            raise ValueError(f"{path}: correction {e['question_id']!r}: expected locomo_<c>_qa<n> "
                             f"and turn ids like D3:5, got {evidence!r}")
        hits = [q for q in by_place.get(str(int(m.group(2))), []) if _same_text(q["question"], str(e["question"]))]
        if len(hits) > 1:
            raise ValueError(f"{path}: correction {e['question_id']!r} matches "
                             f"{', '.join(q['qid'] for q in hits)}")
        if not hits:
            continue
        q = hits[0]
        applied += 1
        changed += sorted(q["evidence"]) != sorted(evidence)
        emptied += not evidence
        kind = str(e.get("error_type") or "corrected")
        kinds[kind] = kinds.get(kind, 0) + 1
        q["evidence"] = list(evidence)
        if e.get("correct_answer") is not None:
            q["answer"] = e["correct_answer"]
        q["audit"] = kind
    return {"file": path.name, "corrections": len(entries), "applied": applied, "evidence_changed": changed,
            "left_without_evidence": emptied, "kinds": dict(sorted(kinds.items()))}
