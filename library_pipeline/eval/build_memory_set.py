"""Builds queries/memory_set.json, the fixed memory eval set: an English half from
the Obsidian vaults (MIT-licensed Quartz docs and kepano vault notes) and a Russian
half from XQuAD's Russian paragraphs and questions (CC BY-SA 4.0), both in the test
material (library_pipeline_tests/data, provenance in its SOURCES.md).

    .venv/bin/python -m library_pipeline.eval.build_memory_set [DATA_DIR]

Deterministic: the test suite rebuilds the artifacts and compares them with the
shipped file, so the set stays what its description says. The queries below were
written by hand from each note's content (before any search was run on them) and
were not edited after scoring.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "queries" / "memory_set.json"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "library_pipeline_tests" / "data"
MAX_CHARS = 900
SELF = {"comments", "darkmode", "paths", "Brown butter nectarine tart"}
DEPARTMENT = {"explorer", "i18n", "upcoming features", "making plugins"}
# another department's private notes on the topics of three queries: never visible to the viewer
OUTSIDER_PLUGINS = ("Latex", "Citations", "SyntaxHighlighting")

QUERIES: list[tuple[str, list[str]]] = [
 ("render math equations with KaTeX", ["latex"]),
 ("bibliography and citation keys from a BibTeX file", ["citations"]),
 ("preview the site locally without installing Node", ["docker-support"]),
 ("flow charts and sequence diagrams in notes", ["mermaid-diagrams"]),
 ("publish an Obsidian vault as a website", ["obsidian-compatibility"]),
 ("convert org-mode files exported for Hugo", ["oxhugo-compatibility"]),
 ("subscribe to site updates with a feed reader", ["rss-feed"]),
 ("avoid flashes of unstyled content when navigating between pages", ["spa-routing"]),
 ("see which other notes link to this page", ["backlinks", "graph-view"]),
 ("navigation bar showing the parent folders of a page", ["breadcrumbs"]),
 ("admonition boxes such as warning and info blocks", ["callouts"]),
 ("let readers leave comments using Giscus", ["comments"]),
 ("dark theme that follows the user's system preference", ["darkmode"]),
 ("sidebar to browse all files and folders", ["explorer"]),
 ("automatic index pages for each tag and folder", ["folder-and-tag-listings"]),
 ("how fast is the search box and which shortcut opens it", ["full-text-search"]),
 ("visualise the connections between notes as a network", ["graph-view"]),
 ("translate the interface into another language", ["i18n"]),
 ("hover over a link to see a preview of the page", ["popover-previews"]),
 ("keep some notes from being published", ["private-pages"]),
 ("show a list of the latest notes", ["recent-notes"]),
 ("cover image and description when a link is shared on social media", ["social-images"]),
 ("code highlighting done at build time instead of in the browser", ["syntax-highlighting"]),
 ("planned features on the roadmap", ["upcoming-features"]),
 ("double bracket links between pages", ["wikilinks"]),
 ("run a local web server and open it on localhost", ["build"]),
 ("where do I change the site settings without coding", ["configuration"]),
 ("deploy the generated website to a hosting provider", ["hosting"]),
 ("move my old vault over from Quartz 3", ["migrating-from-quartz-3"]),
 ("pull the latest updates into an existing Quartz 4 install", ["upgrading"]),
 ("the digital garden versus the stream", ["philosophy"]),
 ("push the site to a new repository on GitHub", ["setting-up-your-github-repository"]),
 ("what happens step by step when the static site generator builds", ["architecture"]),
 ("write my own UI component in TypeScript", ["creating-components"]),
 ("write a transformer or filter plugin", ["making-plugins"]),
 ("difference between a file path and a slug", ["paths"]),
 ("summer dessert recipe with stone fruit", ["brown-butter-nectarine-tart"]),
 ("build up complex ideas from small composable notes", ["evergreen-notes-turn-ideas-into-objects-that-you-can-manipul"]),
 ("arrange the sections of a page such as header, sidebars and footer", ["layout"]),
]

# Russian half: XQuAD articles a00-a14 (5 paragraphs each). Each paragraph is one artifact and
# its first question the query; the last paragraph of the first three articles belongs to an
# outsider, so a query's own article holds a record the viewer must never see.
XQUAD_ARTICLES = tuple(f"a{n:02d}" for n in range(0, 16, 2))
XQUAD_OUTSIDER = {"a00p04", "a02p04", "a04p04"}

DESCRIPTION = (
  "Fixed memory-search eval set (the Agent Librarian's target: precision > 0.7). English half "
  "(queries with lang 'en'). Artifacts: the opening prose "
  "(front matter, code blocks and images stripped, links reduced to their text, <= 900 characters) of "
  "Quartz documentation notes and two kepano-vault notes from obsidian_vaults (MIT), one "
  "artifact per note, written by three agents in scopes self / department / global; three more, on the "
  "same topics as three queries, belong to an agent of another department (scope self) and must never be "
  "returned to the viewer. Queries: written by hand from each note's content, one per topic, mostly "
  "paraphrased rather than the note's title; relevant = the artifacts that answer the query (two queries have two). "
  "Biases: every artifact is English, short and on a distinct topic of one product's documentation, so "
  "topics barely overlap and the set is easier than a real memory store full of near-duplicates and "
  "task logs; the queries were written by someone who had read the artifacts, so some share their "
  "words (favouring the keyword lane); one relevant artifact per query makes precision@R the same as P@1 "
  "for most queries. Russian half (lang 'ru'): XQuAD's Russian paragraphs of articles a00-a14 "
  "(CC BY-SA 4.0), one artifact per paragraph, scopes assigned by paragraph index, the last paragraph of "
  "the first three articles an outsider's; the query is the paragraph's first XQuAD question, written "
  "by XQuAD's translators, not by us. Five paragraphs of one article share a topic, so this half is "
  "harder than the English one: a question's neighbours mention the same people and terms.")


def body(path: Path) -> str:
    """A note's opening prose: front matter, code blocks and images dropped, links
    reduced to their text, whole paragraphs up to MAX_CHARS."""
    t = path.read_text(encoding="utf-8")
    t = re.sub(r"\A---\n.*?\n---\n", "", t, flags=re.S)
    t = re.sub(r"```.*?```", "", t, flags=re.S)
    t = re.sub(r"!\[\[.*?\]\]|!\[.*?\]\(.*?\)", "", t)
    t = re.sub(r"\[\[([^\]|]*\|)?([^\]]*)\]\]", r"\2", t)
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", t)
    t = re.sub(r"^>\s*\[!\w+\][-+]?\s*", "", t, flags=re.M)
    t = re.sub(r"[ \t]+", " ", t)
    paras = [p.strip() for p in re.split(r"\n\s*\n", t)
             if len(p.strip()) > 40 and not p.strip().startswith(("|", "<"))]
    out = ""
    for para in paras:
        if len(out) + len(para) > MAX_CHARS:
            if not out:
                out = para[:MAX_CHARS]
            break
        out += ("\n\n" if out else "") + para
    return out


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60]


def build_artifacts(data: Path) -> list[dict[str, Any]]:
    root = data / "obsidian_vaults"
    files = (sorted((root / "quartz_docs/features").glob("*.md")) + sorted((root / "quartz_docs").glob("*.md"))
             + sorted((root / "quartz_docs/advanced").glob("*.md"))
             + sorted((root / "kepano_vault/References").glob("*.md")) + sorted((root / "kepano_vault/Notes").glob("*.md")))
    notes = {}
    for f in files:
        text = body(f)
        if len(text) < 120 or f.stem == "index":  # front matter only, or a table of links
            continue
        notes[f.stem] = (str(f.relative_to(data / "obsidian_vaults").as_posix()), text)
    artifacts = []
    for i, (title, (source, text)) in enumerate(notes.items()):
        scope = "self" if title in SELF else "department" if title in DEPARTMENT else "global"
        agent = ("eval-writer" if scope == "self" else "eval-colleague" if scope == "department"
                 else ("eval-writer" if i % 2 else "eval-colleague"))
        kind = "howto" if "/features/" in source else "reference" if "/advanced/" in source else "note"
        artifacts.append({"id": slug(title), "agent": agent, "department": "docs", "scope": scope, "type": kind,
                          "source": "obsidian_vaults/" + source, "content": text})
    for name in OUTSIDER_PLUGINS:
        p = root / "quartz_docs/plugins" / f"{name}.md"
        artifacts.append({"id": "plugin-" + slug(name), "agent": "eval-outsider", "department": "ops",
                          "scope": "self", "type": "reference",
                          "source": "obsidian_vaults/" + p.relative_to(root).as_posix(), "content": body(p)})
    return artifacts


def build_russian(data: Path) -> tuple[list[dict[str, Any]], list[tuple[str, list[str]]]]:
    root = data / "xquad_ru"
    paragraphs = [json.loads(line) for line in (root / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    questions = {}
    for line in (root / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        questions[q["_id"]] = q["text"]
    first_question: dict[str, str] = {}
    for line in (root / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, doc, _ = line.split("\t")
        first_question.setdefault(doc, questions[qid])
    artifacts, queries = [], []
    for i, p in enumerate(x for x in paragraphs if x["_id"][:3] in XQUAD_ARTICLES):
        pid, para = p["_id"], int(p["_id"][4:])
        if pid in XQUAD_OUTSIDER:
            agent, department, scope = "eval-outsider", "ops", "self"
        else:
            scope = "self" if para == 1 else "department" if para == 3 else "global"
            agent = ("eval-writer" if scope == "self" else "eval-colleague" if scope == "department"
                     else ("eval-writer" if i % 2 else "eval-colleague"))
            department = "docs"
            queries.append((first_question[pid], ["xquad-" + pid]))
        artifacts.append({"id": "xquad-" + pid, "agent": agent, "department": department, "scope": scope,
                          "type": "note", "source": f"xquad_ru/corpus.jsonl#{pid}", "content": p["text"]})
    return artifacts, queries


def build(data: Path) -> dict[str, Any]:
    ru_artifacts, ru_queries = build_russian(data)
    artifacts = build_artifacts(data) + ru_artifacts
    ids = {a["id"] for a in artifacts}
    halves = [("en", q, rel) for q, rel in QUERIES] + [("ru", q, rel) for q, rel in ru_queries]
    for _, q, rel in halves:
        missing = [r for r in rel if r not in ids]
        if missing:
            raise ValueError(f"query {q!r} names unknown artifacts {missing}")
    return {"version": 2, "description": DESCRIPTION, "viewer": {"agent": "eval-writer", "department": "docs"},
            "threshold": {"precision@R": 0.7}, "artifacts": artifacts,
            "queries": [{"id": f"m{i + 1:02d}", "lang": lang, "query": q, "relevant": rel}
                        for i, (lang, q, rel) in enumerate(halves)]}


if __name__ == "__main__":
    data_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DATA
    OUT.write_text(json.dumps(build(data_dir), ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"wrote {OUT}")
