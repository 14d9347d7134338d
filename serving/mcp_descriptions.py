"""The MCP tool descriptions and server instructions: part of the interface agents
read, so each says what the code does - `library_search`'s is written from the search
configuration it describes and checked by a test against it. The tool descriptions
carry what an agent needs to use the results honestly: what the scores mean, and that
only library_files' `matched = 0` proves a work is absent - agent-library's agents
otherwise softened real absences into "closest matches"."""

from __future__ import annotations

from serving.search.types import LANES, MAX_TOP_K, SearchConfig

INSTRUCTIONS = """\
A local library of books, papers and notes. Use library_files to check whether a
work is in the library at all (matched = 0 is the only proof it is absent), and
library_search to find passages about something. Cite results by path and location.
library_entity, library_related, library_path and library_subgraph query the knowledge
graph extracted from the files (what a name is, what it connects to, how two connect)."""

# What each lane is, in the words an agent reads; keyed by the names results carry
# in `lanes` (serving/search/types.py LANES, checked by a test).
LANE_TEXT = {
    "vector": '"vector" (meaning, by the English model)',
    "multilingual": '"multilingual" (meaning, by a multilingual model: a Russian question finds English '
                    'passages too)',
    "keyword": '"keyword" (BM25 over every query term, each passage stemmed in its own language)',
    "title": '"title" (the document\'s file name or title)',
    "structure": '"structure" (tables of contents)',
}


def search_description(config: SearchConfig | None = None) -> str:
    """library_search's description, written from the configuration it describes
    (lanes, fusion, weights), so the text cannot drift from what the code does."""
    cfg = config or SearchConfig()
    lanes = ", ".join(LANE_TEXT[lane] for lane in LANES if getattr(cfg, lane))
    if cfg.fusion == "calibrated":
        graded = cfg.vector_weight + cfg.keyword_weight
        fusion = ("fused as a probability of relevance: every candidate is scored by every lane that can "
                  "read it (each model's similarity against the library's background, BM25 as a share of what "
                  "the query's terms could score), so a passage in another language must beat same-language "
                  "ones on that one scale")
        scores = (f'under score_kind "calibrated" a score is {graded:g} x that probability, plus up to '
                  f"{cfg.title_weight:g} from a title match; 1 or more is a likely answer")
    elif cfg.fusion == "convex":
        fusion = ("fused by adding each lane's min-max normalised score times its weight"
                  + (", trusting lanes per query by language (a lane that cannot read the query's "
                     "language, or keyword hits in another script, count nothing)" if cfg.language_aware else ""))
        scores = (f'under score_kind "convex" each lane adds up to its weight (up to {cfg.vector_weight:g} from '
                  f"the meaning lanes and {cfg.keyword_weight:g} from the keyword lane's best hit, up to "
                  f"{cfg.title_weight:g} from a title match; about 1.5 or more is a strong hit two lanes rank high)")
    else:
        fusion = f"fused by weighted reciprocal-rank fusion (k = {cfg.rrf_k})"
        scores = 'under score_kind "rrf" they are weighted reciprocal ranks'
    return f"""\
Search the library's passages (books, papers, vault notes) for a topic, a quote, a
title or a chapter. Hybrid lanes: {lanes}; {fusion}; then reranked by a cross-encoder
when one is configured.

Arguments: query (words, a title, a question; any language); top_k 1-{MAX_TOP_K} (default 10);
filters (optional object): source ("library" | "vault" | "memory"), path (exact
document path from library_files), author (in either script: "Chekhov" or «Чехов»),
document_id, scope, kind ("text" | "toc" | ...;
"boilerplate" = licence / publisher text such as the Project Gutenberg licence, left
out unless named), include_removed / include_superseded / include_archived (default false).

Each result: source, path, title, author, location (page / section), kind ("toc" = a
table of contents), score, lanes, text. A title, an author, a chapter ("<title> chapter
IX") or a piece inside a collection may be asked for by name, in Cyrillic or Latin
letters; a "title" hit opens the section named. `lanes` says which lanes found it and at what rank,
e.g. {{"title": 1, "vector": 3}}: a "title" hit means the document's name matches
your query. Scores rank results within ONE response only: {scores};
with "cross-encoder" they are relevance probabilities. A score is
never evidence that the library contains something: search always returns its
closest guesses, even for works that are absent. To prove a work is NOT here, call
library_files and get matched = 0.

`summaries` holds document-level summaries ranked separately (use them for
overview questions). `stages` says what ran (e.g. rerank "skipped: ..."), `warnings`
and `health` report truncated queries and degraded components."""


SEARCH_DESCRIPTION = search_description()

FILES_DESCRIPTION = """\
Inventory: which files the library holds, matched by name or title - NOT by content.
pattern: a title, author, file name or part of one ("moby dick", "sicp", ".epub");
an empty pattern lists everything. A file matches if the pattern is a substring of
its path, title or author (case-insensitive, е for ё), if every word of it is in the
name in the other script or another spelling («Чехов» finds "Chekhov - Каштанка.txt"),
or if it shares at least 2 distinct (stemmed) words with them; a single shared word is
deliberately not enough.

Returns {total, matched, returned, truncated, files: [{path, title, author, source,
format, language, pages, status, match}]}. matched = 0 is a definitive answer: no file by
that name or title is in the library - say so plainly rather than offering
library_search's nearest passages as if they were the work (passages that merely
quote or mention a work are not the work). status "failed" means the file is present
but could not be read; "pending" means not yet searchable. Limitation: a work stored
under an unrecognisable file name and without a title reads as absent."""


MEMORY_INDEX_DESCRIPTION = """\
Store an artifact in agent memory (the Librarian's `index`). It is chunked, embedded
and searchable as soon as this returns. You are the author: your identity comes from
this connection, not from an argument.

Arguments: artifact_id (your id for the artifact; indexing the same id again stores a
new version and supersedes the old one, which is kept); content (text, up to 200,000
characters); scope: "self" (only you), "department" (your department's agents) or
"global" (every agent); meta (optional object: type, task_id, date "YYYY-MM-DD", thread,
any other JSON fields). thread (a conversation, session or task id): records of one thread
are read together - memory_search ranks a record with the ones you wrote just before and
after it in that thread, so index each turn or step as you go and give them the same thread.

Exact duplicates (same normalised text in the same scope) are not stored twice: the
existing record is returned (status "duplicate" or "unchanged") with your meta merged
in. Returns {status: created | new_version | duplicate | unchanged, id, artifact_id,
version, scope, chunks, meta}."""

MEMORY_SEARCH_DESCRIPTION = f"""\
Search agent memory (the Librarian's `search`): the same hybrid lanes as
library_search, over the memories you may see - your own `self` records, your
department's, and `global` ones.

Arguments: query; top_k 1-{MAX_TOP_K} (default 5); filter (optional object): scope (one
or a list of "self" | "department" | "global"), type, agent, min_relevance (0-1),
include_archived (decayed records, default false), include_cold (records retention
moved to cold storage, default false), include_superseded (old versions),
include_library (also search books and vault notes).

Returns {{results: [{{id, content, score, meta: {{agent, date, task_id, type, scope,
artifact_id, version, relevance, ...}}}}], total_found, returned}}. `content` is the
best-matching passage of the record (memory_get returns the whole text); one result
per record. Scores rank within one response only. total_found counts the records
among the candidates the search considered (at most 100 passages), not the store."""

MEMORY_GET_DESCRIPTION = """\
Fetch one memory record with its full content: id is the numeric id from
memory_search / memory_index, or an artifact id (your own artifact first, then
the newest visible one). Returns {id, content, meta, access_count, versions}.
A record you may not see reads exactly like one that does not exist."""
