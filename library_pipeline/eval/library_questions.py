"""Evaluation on the user's own library: questions that each name the file(s) answering
them, asked through `serving.search.search` (the function agents call) against the live
library, scored at the level a reader judges: did the right file come back first.

A question file is what a user can write in a minute, TSV or YAML:

    # question <TAB> file(s) that answer it, separated by " | "
    Who is Irene Adler?	Doyle - The Adventures of Sherlock Holmes.epub
    Кто такой Пугачёв?	Пушкин - Капитанская дочка.txt

    - question: Who is Irene Adler?
      files: [Doyle - The Adventures of Sherlock Holmes.epub]
      kind: content            # optional: results are also reported per kind

A TSV line may carry the kind as a third column.

A file is named by its path relative to the library folder, or by its file name alone
when that is unique in the library.

Questions are asked as an agent without an identity asks them (shared rows only: no
agent's private memory stands between a question and its file).

Measures, per question and overall:
- right file at rank 1: the first passage returned belongs to an answering file;
- MRR over files: the files of the returned passages in order, each counted at its first
  passage, and the reciprocal rank of the first answering one (0 if none in the top k);
- other-script passages in the top 5, counted only for questions whose answer is in their
  own script (an English question answered by an English book): a Russian passage there
  is noise an agent has to read past. Cross-language questions (a Russian question about
  an English book) are reported apart: for them the other script is the answer.
"""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from serving.embedding import Embedder
from serving.search import SearchConfig, SearchFilters, search
from serving.search.language import language_script, script
from serving.search.types import Viewer

log = logging.getLogger(__name__)

OTHER_SCRIPT_DEPTH = 5
EXAMPLE_QUESTIONS = Path(__file__).resolve().parents[2] / "examples" / "library_questions.tsv"


class QuestionFileError(ValueError):
    """A question file that cannot be read, with the line at fault."""


@dataclass(frozen=True)
class Question:
    text: str
    files: tuple[str, ...]
    line: int = 0
    kind: str | None = None


def load_questions(path: Path | str) -> list[Question]:
    """Questions of a TSV (`question<TAB>file | file`; lines starting with # and blank lines
    skipped; a first such line `question<TAB>files` is a header) or YAML file (a list of
    {question, files}; `files` a list or one string)."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise QuestionFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    out = _load_yaml(path, raw) if path.suffix.lower() in (".yaml", ".yml") else _load_tsv(path, raw)
    if not out:
        raise QuestionFileError(f"{path}: no questions")
    return out


def _load_tsv(path: Path, raw: str) -> list[Question]:
    out: list[Question] = []
    header_possible = True
    for n, row in enumerate(csv.reader(io.StringIO(raw), delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        if header_possible and [c.strip().lower() for c in row[:2]] == ["question", "files"]:
            header_possible = False
            continue
        header_possible = False
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise QuestionFileError(f"{path}:{n}: expected `question<TAB>file(s)`, got {row!r}")
        kind = row[2].strip() if len(row) > 2 and row[2].strip() else None
        out.append(Question(row[0].strip(), _split_files(row[1]), n, kind))
    return out


def _load_yaml(path: Path, raw: str) -> list[Question]:
    import yaml

    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise QuestionFileError(f"{path}: not YAML ({exc})") from exc
    if isinstance(data, dict):
        data = data.get("questions")
    if not isinstance(data, list):
        raise QuestionFileError(f"{path}: expected a list of {{question, files}}")
    out = []
    for n, item in enumerate(data, start=1):
        files = item.get("files") if isinstance(item, dict) else None
        files = _split_files(files) if isinstance(files, str) else tuple(str(f).strip() for f in files or ())
        if not isinstance(item, dict) or not str(item.get("question") or "").strip() or not files:
            raise QuestionFileError(f"{path}: item {n}: needs `question` and `files`")
        out.append(Question(str(item["question"]).strip(), files, n, str(item["kind"]) if item.get("kind") else None))
    return out


def _split_files(cell: str) -> tuple[str, ...]:
    return tuple(f.strip() for f in cell.split("|") if f.strip())


@dataclass
class QuestionResult:
    question: str
    files: list[str]                 # the answering files, as stored paths
    answer_script: str | None        # the answering files' script (None: mixed or unknown)
    question_script: str
    ranked_files: list[str]          # distinct files of the returned passages, in order
    right_at_1: bool
    reciprocal_rank: float
    other_script_top5: int           # passages in another script than the question's, top 5
    top: list[dict[str, Any]] = field(default_factory=list)
    kind: str | None = None

    @property
    def same_language(self) -> bool:
        return self.answer_script == self.question_script

    def to_dict(self) -> dict[str, Any]:
        return {"question": self.question, "kind": self.kind, "files": self.files, "same_language": self.same_language,
                "right_at_1": self.right_at_1, "reciprocal_rank": round(self.reciprocal_rank, 4),
                "other_script_top5": self.other_script_top5, "ranked_files": self.ranked_files[:5],
                "top": self.top}


@dataclass
class LibraryEvaluation:
    results: list[QuestionResult]
    missing: list[tuple[str, str]]   # (question, file) named but not in the library

    def _mean(self, rows: list[QuestionResult], attr: str) -> float | None:
        return sum(float(getattr(r, attr)) for r in rows) / len(rows) if rows else None

    def summary(self) -> dict[str, Any]:
        rows = self.results
        same = [r for r in rows if r.same_language]
        cross = [r for r in rows if r.answer_script and not r.same_language]
        return {
            "questions": len(rows),
            "right_at_1": self._mean(rows, "right_at_1"),
            "mrr_files": self._mean(rows, "reciprocal_rank"),
            "same_language_questions": len(same),
            "other_script_in_top5": sum(r.other_script_top5 for r in same),
            "questions_with_other_script_in_top5": sum(1 for r in same if r.other_script_top5),
            "cross_language_questions": len(cross),
            "cross_language_right_at_1": self._mean(cross, "right_at_1"),
            "cross_language_mrr_files": self._mean(cross, "reciprocal_rank"),
            "missing_files": [f"{q} -> {f}" for q, f in self.missing],
            "by_kind": self.by_kind(),
        }

    def by_kind(self) -> dict[str, dict[str, Any]]:
        """Per question kind (questions without one: "other"): right file at 1, MRR and the misses."""
        kinds: dict[str, list[QuestionResult]] = {}
        for r in self.results:
            kinds.setdefault(r.kind or "other", []).append(r)
        return {kind: {"questions": len(rows), "right_at_1": self._mean(rows, "right_at_1"),
                       "mrr_files": self._mean(rows, "reciprocal_rank"),
                       "misses": [f"{r.question} -> {r.ranked_files[0] if r.ranked_files else '(nothing)'}"
                                  for r in rows if not r.right_at_1]}
                for kind, rows in kinds.items()}


def library_languages(conn: psycopg.Connection) -> dict[str, str | None]:
    """Path -> language of every ingested library file."""
    return dict(conn.execute("SELECT path, language FROM documents WHERE source = 'library' AND status = 'ingested'"
                             ).fetchall())


def resolve_files(by_path: dict[str, str | None], names: tuple[str, ...]
                  ) -> tuple[dict[str, str | None], list[str]]:
    """Named files -> (stored path -> its language, the names not found), against
    `library_languages`. A name matches a path, or its file name when exactly one file has it."""
    by_name: dict[str, list[str]] = {}
    for p in by_path:
        by_name.setdefault(p.rsplit("/", 1)[-1], []).append(p)
    found: dict[str, str | None] = {}
    missing = []
    for name in names:
        if name in by_path:
            found[name] = by_path[name]
        elif len(by_name.get(name, ())) == 1:
            found[by_name[name][0]] = by_path[by_name[name][0]]
        else:
            missing.append(name)
    return found, missing


# Questions are asked as an agent with no identity asks them: `global` rows only. With no
# viewer, search is the operator's and sees every agent's private memories: on the example
# library one agent's own note about the White Rabbit took rank 1 from the book.
AS_AN_AGENT = SearchFilters(viewer=Viewer())


def evaluate_library(conn: psycopg.Connection, embedder: Embedder, questions: list[Question], *,
                     config: SearchConfig | None = None, top_k: int = 10) -> LibraryEvaluation:
    """Ask every question through `serving.search.search` and score the files it returns."""
    cfg = config or SearchConfig(rerank=False, summaries=False, log_queries=False, label="library-questions")
    results, missing = [], []
    library = library_languages(conn)
    for q in questions:
        files, absent = resolve_files(library, q.files)
        missing += [(q.text, name) for name in absent]
        if not files:
            continue
        scripts = {language_script(lang) for lang in files.values()}
        resp = search(conn, embedder, q.text, top_k=top_k, filters=AS_AN_AGENT, config=cfg)
        ranked: list[str] = []
        for r in resp.results:
            if r.path not in ranked:
                ranked.append(r.path)
        first = next((i for i, p in enumerate(ranked, start=1) if p in files), None)
        qscript = script(q.text)
        results.append(QuestionResult(
            question=q.text, files=sorted(files), answer_script=scripts.pop() if len(scripts) == 1 else None,
            question_script=qscript, ranked_files=ranked,
            right_at_1=bool(resp.results) and resp.results[0].path in files,
            reciprocal_rank=1.0 / first if first else 0.0,
            other_script_top5=sum(1 for r in resp.results[:OTHER_SCRIPT_DEPTH]
                                  if script(r.text) not in (qscript, "none")),
            top=[{"path": r.path, "location": r.location, "lanes": r.lanes, "score": round(r.score, 4)}
                 for r in resp.results[:3]], kind=q.kind))
    return LibraryEvaluation(results, missing)


def markdown(evaluation: LibraryEvaluation) -> str:
    s = evaluation.summary()

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{v:.1%}"

    def num(v: float | None) -> str:
        return "–" if v is None else f"{v:.4f}"

    lines = ["| questions | right file at rank 1 | MRR over files | other-script passages in the top 5 "
             "(same-language questions) | cross-language: right at 1 / MRR |",
             "|---|---|---|---|---|",
             f"| {s['questions']} | {pct(s['right_at_1'])} | {num(s['mrr_files'])} | "
             f"{s['other_script_in_top5']} in {s['questions_with_other_script_in_top5']} of "
             f"{s['same_language_questions']} | {s['cross_language_questions']} questions: "
             f"{pct(s['cross_language_right_at_1'])} / {num(s['cross_language_mrr_files'])} |", "",
             ]
    kinds = s["by_kind"]
    if set(kinds) != {"other"}:
        lines += ["| kind | questions | right file at rank 1 | MRR over files |", "|---|---|---|---|"]
        lines += [f"| {kind} | {v['questions']} | {pct(v['right_at_1'])} | {num(v['mrr_files'])} |"
                  for kind, v in kinds.items()]
        lines.append("")
    lines += ["| question | right at 1 | RR | other script top 5 | first file returned |", "|---|---|---|---|---|"]
    for r in evaluation.results:
        first = r.ranked_files[0] if r.ranked_files else "(nothing)"
        lines.append(f"| {r.question} | {'yes' if r.right_at_1 else '**no**'} | {r.reciprocal_rank:.2f} | "
                     f"{r.other_script_top5 if r.same_language else '(cross)'} | {first} |")
    if s["missing_files"]:
        lines += ["", "Named but not in the library: " + "; ".join(s["missing_files"])]
    return "\n".join(lines)
