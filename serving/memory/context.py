"""Memories read with their context: a record is scored with its thread neighbours.

A conversation turn, a log line or a step of a task is rarely whole alone: "Adoption
agencies" answers the turn before it ("What did you research?"); the turn that names
the event is next to the one that says when. A record that an agent indexed with
`meta.thread` (a session, a conversation, a task) has neighbours: the records of the
same agent and thread written just before and after it. Memory search reads them
together - after the lanes and fusion have ranked the pool, each record gains a share
of its best neighbour's fused score, and a neighbour the lanes did not reach joins the
pool with that share alone (so the answer next to a matching question is found).

Read in its conversation, a turn also says who spoke and whether it asks (turn_weight):
a question about one of the speakers is answered by that speaker's own turns, and a turn
that ends asking is answered by the turn after it - each of the others counts half. A
long note cut between its lines (a session saved as one memory) is read the same way, line
by line: a line labelled with another speaker than the one the query names, or ending with
"?", counts half (lines_weight).

Records without a thread rank exactly as before. Neighbours are read under the
viewer's visibility clause, live ones only (not superseded, archived, cold or merged into
a duplicate); when the caller narrows the search with a filter, only records already in
the fused pool take part, so a filter is never widened.
"""

from __future__ import annotations

import logging
import re
import statistics
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from serving.search.filters import visibility
from serving.search.types import Viewer

log = logging.getLogger(__name__)

# Share of a neighbour's fused score a record gains; neighbours within WINDOW records, the
# share halved per step beyond the first. Chosen on LoCoMo's first dev conversation (conv-26,
# 150 questions, evidence recall@10 through search_memory; records alone 0.685): share 0.3 /
# 0.5 / 0.8 / 1.0 at window 1 gave 0.745 / 0.756 / 0.734 / 0.727, and multi-hop fell
# (0.43 -> 0.37 at 0.5); window 2 at 0.5 gave 0.767 with multi-hop 0.41. Taking the sum of
# the neighbours' shares instead of the best one (0.734), or only lifting a record to the
# share (max, not add: 0.736), did worse; a boost for records whose meta.speaker the question
# names added nothing (0.767 -> 0.768). The dev-half figures are in docs/evaluation.md.
NEIGHBOUR_SHARE = 0.5
WINDOW = 2

_NEIGHBOURS_SQL = """
WITH hit AS (SELECT m.id, m.agent, m.meta->>'thread' AS thread
               FROM memories m WHERE m.id = ANY(%(ids)s) AND m.meta ? 'thread')
SELECT hit.id, n.id
  FROM hit
  CROSS JOIN LATERAL (
    (SELECT x.id FROM memories x
      WHERE x.agent = hit.agent AND x.meta->>'thread' = hit.thread AND x.id < hit.id AND {live}
      ORDER BY x.id DESC LIMIT %(window)s)
    UNION ALL
    (SELECT x.id FROM memories x
      WHERE x.agent = hit.agent AND x.meta->>'thread' = hit.thread AND x.id > hit.id AND {live}
      ORDER BY x.id LIMIT %(window)s)
  ) n
"""
_LIVE = ("NOT x.superseded AND x.archived_at IS NULL AND x.duplicate_of IS NULL AND x.tier = 'active' "
         "AND x.meta ? 'thread' AND {vis}")


@dataclass
class Scored:
    record_id: int
    score: float            # the fused score from search (0 for a neighbour the lanes did not reach)
    context: float = 0.0    # the share gained from neighbours

    @property
    def total(self) -> float:
        return self.score + self.context


def thread_neighbours(conn: psycopg.Connection, viewer: Viewer, ids: list[int], window: int = WINDOW
                      ) -> dict[int, list[tuple[int, int]]]:
    """record id -> [(neighbour id, distance)] within `window` records of the same agent and
    thread, visible to `viewer` and live."""
    if not ids:
        return {}
    vis = visibility(viewer, "x")
    q = sql.SQL(_NEIGHBOURS_SQL).format(live=sql.SQL(_LIVE).format(vis=vis.clause))
    found: dict[int, list[int]] = {}
    for rid, nid in conn.execute(q, {**vis.params, "ids": ids, "window": window}).fetchall():
        found.setdefault(rid, []).append(nid)
    out: dict[int, list[tuple[int, int]]] = {}
    for rid, nids in found.items():
        before = sorted((n for n in nids if n < rid), reverse=True)
        after = sorted(n for n in nids if n > rid)
        out[rid] = [(n, i) for side in (before, after) for i, n in enumerate(side, start=1)]
    return out


def with_thread_context(conn: psycopg.Connection, viewer: Viewer, ranked: list[tuple[int, float]], *,
                        pool_only: bool = False, share: float = NEIGHBOUR_SHARE, window: int = WINDOW
                        ) -> list[Scored]:
    """`ranked` (record id, fused score), best first -> the same records and any neighbours
    that joined, best first by score + share x the best neighbour's score (halved per step
    of distance beyond the first)."""
    scored = {rid: Scored(rid, score) for rid, score in ranked}
    if share <= 0 or not ranked:
        return list(scored.values())
    base = dict(ranked)
    links = thread_neighbours(conn, viewer, [rid for rid, _ in ranked], window)
    gains: dict[int, float] = {}
    for rid, neighbours in links.items():
        for nid, dist in neighbours:
            if pool_only and nid not in base:
                continue
            gain = share * base[rid] / (2 ** (dist - 1))
            if gain > gains.get(nid, 0.0):
                gains[nid] = gain
    for nid, gain in gains.items():
        scored.setdefault(nid, Scored(nid, 0.0)).context = gain
    return sorted(scored.values(), key=lambda s: (-s.total, s.record_id))


# -- who speaks, and whether a turn asks ---------------------------------------------------
#
# A question that names one of a thread's speakers ("What books has Tim read?") is answered
# by that speaker's own turns: on LoCoMo's dev half (786 questions, 5 conversations), of the
# questions naming exactly one of the two speakers, 1,007 of 1,057 evidence turns (95%) are
# that speaker's, though each speaker says half of everything. And a turn that ends asking
# ("What did you research?", "... Anything fun over the weekend?") matches a question's
# words best while its answer is the turn after it (thread context lifts that one): 24% of
# the turns end with "?", 11% of the evidence does. So after thread context, a threaded
# record spoken by another speaker than the one the query names, and a threaded turn ending
# with "?", each count OTHER_SPEAKER / ASKING x their score (both: the product); the
# neighbours' shares are taken before, from the fused scores, so the answer beside a
# matching question still gains its full share. Half, as a neighbour counts half
# (NEIGHBOUR_SHARE): the turn the lanes matched and the turn that holds the answer weigh
# alike.
#
# Evidence recall@10 through search_memory on the dev half (replayed over the captured fused
# pools, then end to end): 0.7588 -> 0.8031; multi-hop 0.432 -> 0.533, open-domain 0.428 ->
# 0.479, single-hop 0.887 -> 0.928, temporal 0.856 -> 0.852; better on each conversation
# (conv-26 0.764 -> 0.798, conv-41 0.807 -> 0.843, conv-43 0.791 -> 0.840, conv-47 0.768 ->
# 0.825, conv-49 0.661 -> 0.707). Each rule alone: speaker 0.7900, asking 0.7750. Weights
# swept (speaker 0.3-0.6 x asking 0.4-0.7): 0.7974-0.8083, a flat top, so the reasoned
# half stays; 0 for the other speaker (a filter) 0.7886; either weight alone applied before
# the neighbours' shares instead of after 0.7572 / 0.7604 (after: 0.7900 / 0.7750): a
# matching question then lifts its answer less.
OTHER_SPEAKER = 0.5
ASKING = 0.5


def named_speaker(query: str, speakers: set[str]) -> str | None:
    """The one speaker of `speakers` that `query` names as a word (any case); None when it
    names none or several."""
    named = [s for s in speakers if s and re.search(r"(?<!\w)" + re.escape(s) + r"(?!\w)", query, re.IGNORECASE)]
    return named[0] if len(named) == 1 else None


def turn_weight(content: str, meta: dict[str, Any] | None, named: str | None, *, whole: bool = True,
                typical: float | None = None, size: int | None = None) -> float:
    """The factor a record's score takes in its thread (see OTHER_SPEAKER / ASKING, and
    TURN_LENGTH against `typical`, the pool's typical_length): 1 for a record without a
    thread. `whole`: `content` is the whole record (one passage), so its last character is
    the record's and its words are all the record says; `size`: words(content) when the
    caller has counted them already."""
    meta = meta or {}
    if "thread" not in meta:
        return 1.0
    weight = 1.0
    speaker = meta.get("speaker")
    if named is not None and isinstance(speaker, str) and speaker and speaker.lower() != named.lower():
        weight *= OTHER_SPEAKER
    if whole and content.rstrip().endswith("?"):
        weight *= ASKING
    if whole and typical is not None:
        weight *= (((words(content) if size is None else size) + 1) / (typical + 1)) ** TURN_LENGTH
    return weight


# -- how much a turn says -------------------------------------------------------------------
#
# A conversation is mostly short turns that react ("Wow, that's great!", "Cool! What did it
# look like?") between the longer ones that tell something, and the facts a question asks about
# are in the latter: of the 2,960 turn records of LoCoMo's dev half (5 conversations; words of
# the whole record, its "[date] Name:" prefix included, median 32), one of under 20 words is
# evidence for some question at a quarter of the average turn's rate, one of 60 and more at 2.4
# times it, the rate rising steadily between. The lanes do not see it (a short turn that
# repeats the question's words scores high), so after thread context a threaded turn's score is
# multiplied by its length against the typical turn of the pool: ((words + 1) / (median + 1))
# ** TURN_LENGTH, words of the whole record, the median over the pool's threaded whole records
# - a turn of the pool's typical length counts as before, and threaded records stay comparable
# with records without a thread, which take no factor. A whole record is one passage (at most
# the embedder's window, serving/memory/chunk.py), so against LoCoMo's median of 32 words the
# factor stays between about 0.4 and 1.9.
#
# Evidence recall@10 through search_memory on the dev half, replayed over the captured fused
# pools (benchmarks/memory_replay.py), then end to end: 0.8031 -> 0.8150 at 0.35; multi-hop 0.533 -> 0.545,
# temporal 0.852 -> 0.854, open-domain 0.479 -> 0.552, single-hop 0.928 -> 0.935 (recall@5
# 0.7126 -> 0.7101). Exponents 0.1 / 0.15 / 0.2 / 0.25 / 0.3 / 0.4 / 0.5 / 0.75 / 1.0: 0.8047 /
# 0.8071 / 0.8087 / 0.8105 / 0.8119 / 0.8116 / 0.8118 / 0.8091 / 0.8064. Chosen
# leave-one-conversation-out: on each fold's other 4 conversations the best exponent (of those;
# and again with the length capped at 20 / 30 / 40 / 60 words as further variants) was 0.35
# uncapped in all 5 folds, so the held-out figure is the row above. Only penalising turns
# shorter than the median (the factor capped at 1) did worse (0.8015-0.8078, single-hop
# falling); the same factor on a long note's lines (lines_weight) left the session notes where
# they were (R@5 0.8904 -> 0.8904 held out).
TURN_LENGTH = 0.35
_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> int:
    """How many words `text` has (runs of letters, digits and underscores)."""
    return len(_WORD.findall(text))


def typical_length(contents: list[str] | list[int]) -> float | None:
    """The median of `contents`' word counts (or of the counts given; None for none): what a
    turn's length is read against (TURN_LENGTH)."""
    return statistics.median(c if isinstance(c, int) else words(c) for c in contents) if contents else None


# -- the lines of a long note ----------------------------------------------------------------
#
# A session saved as one note (a chat transcript, a meeting's minutes) carries no thread and
# no meta.speaker, but its lines say the same two things a threaded turn does: who spoke
# ("Tim: I finished the novel", a line's "Name:" label) and whether the line asks. A note cut
# between its lines (serving/memory/chunk.py) is scored from its passages in the pool, so each
# passage counts by its lines, as a turn counts in its thread (turn_weight, the same
# OTHER_SPEAKER / ASKING): a line labelled with another speaker than the one the query names
# (exactly one of the labels read in the pool's line-cut passages, as a word, any case), and a
# line ending with "?", each count half; a passage of several lines takes its lines' weights
# averaged by their length ("mostly a question", "mostly the other speaker"). Lines without a
# label (a note's heading, prose, a log) and notes cut into windows are never weighed.
#
# On LoCoMo's dev half as the session unit (136 session notes of 5 conversations in one index,
# 786 questions; replayed over the captured fused pools by benchmarks/memory_session_replay.py,
# then end to end): R@5 0.8788 -> 0.8904, MRR 0.8144 -> 0.8246. Each rule alone: speaker
# 0.8826, asking 0.8815. The speaker named among the labels of the whole pool, not of each note
# alone: a note in which the named person does not speak then counts half too (per note alone:
# 0.8866). Swept (other speaker 0 / 0.3 / 0.5 / 0.7 x asking 0 / 0.3 / 0.5 / 0.7, one at a
# time): 0.8809-0.8929, a top chosen on the questions it is scored on, so the turns' half
# stays; a passage weighed by its best-weighed line instead of the mean 0.8840; a passage
# gaining a share of its neighbouring passages' scores, as a threaded turn does, 0.8883 /
# 0.8873 at 0.25 / 0.5 (dropped).
_LABEL = re.compile(r"^\s*([^\W\d_][\w.'-]*(?: [^\W\d_][\w.'-]*)?):\s", re.UNICODE)


def line_speaker(line: str) -> str | None:
    """The "Name:" label a line starts with (one or two words, the first a letter), if any."""
    m = _LABEL.match(line)
    return m.group(1) if m else None


def line_speakers(texts: list[str]) -> set[str]:
    """Every label the lines of `texts` start with."""
    return {s for t in texts for ln in t.splitlines() if (s := line_speaker(ln))}


def lines_weight(text: str, named: str | None) -> float:
    """A passage of a note cut between its lines: its lines' weights (another speaker than
    `named`: OTHER_SPEAKER; ending with "?": ASKING; both: the product) averaged by length."""
    total = weighed = 0.0
    for ln in text.splitlines():
        ln = ln.strip()
        if not ln:
            continue
        w = 1.0
        speaker = line_speaker(ln)
        if named is not None and speaker is not None and speaker.lower() != named.lower():
            w *= OTHER_SPEAKER
        if ln.endswith("?"):
            w *= ASKING
        total += len(ln)
        weighed += w * len(ln)
    return weighed / total if total else 1.0
