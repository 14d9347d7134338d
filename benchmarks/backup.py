"""Backup and restore of the example library plus 3,000 memories, through the `library`
command line as a user runs it, and backups killed at random moments.

    .venv/bin/python benchmarks/backup.py                  # ingest + 3,000 memories in --home, then measure
    .venv/bin/python benchmarks/backup.py --reuse          # the home of an earlier run
    .venv/bin/python benchmarks/backup.py --kills 20       # the kill rounds (default 20)

Prints, for a full and a memories-only backup: the `library backup` wall time and file
size, and the `library restore` wall time into a new empty home (its own embedded
server started by the command, as after a lost home). Then the kill rounds: each
starts `library backup` over the existing file and SIGKILLs it after a random share
of a whole backup's time; after each, the file at that name must pass the whole-file
check and restore into a scratch database with every table's rows and every memory
version as saved (library_pipeline.backup.verify, what the nightly asset check runs).

The memories are SciFact abstracts (library_pipeline_tests/data/beir_scifact, CC BY 4.0;
two under a numbered header of its own each, so none is an exact duplicate) written
through serving.memory.index_memory, the function the MCP tool calls: three scopes, 30
agents in 5 departments, one in ten written again as a second version.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from library_pipeline.backup.archive import BackupError  # noqa: E402
from library_pipeline.backup.verify import verify  # noqa: E402
from serving.db import Database  # noqa: E402
from serving.settings import Settings  # noqa: E402

LIBRARY = str(REPO / ".venv" / "bin" / "library")


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LIBRARY_DB_DSN", "LIBRARY_DIR")}
    env.update(LIBRARY_HOME=str(home), HF_HUB_OFFLINE="1")
    return env


def _run(home: Path, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run([LIBRARY, *args], env=_env(home), check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _populate(home: Path, memories: int) -> None:
    library = home / "library"
    if not library.exists():
        shutil.copytree(REPO / "examples" / "library", library)
    print(f"ingest of the example library: {_run(home, 'ingest'):.1f} s", flush=True)
    from serving.embedding import load_embedder
    from serving.memory import Viewer, index_memory

    embedder = load_embedder("minilm")
    corpus = REPO / "library_pipeline_tests" / "data" / "beir_scifact" / "corpus.jsonl"
    texts = [json.loads(line)["text"][:1200] for line in corpus.open(encoding="utf-8")]
    db = Database(Settings(library_dir=library, home=home))
    started = time.perf_counter()
    with db.connect(autocommit=True) as conn:
        for i in range(memories):
            viewer = Viewer(f"agent-{i % 30}", f"dept-{i % 5}")
            scope = ("global", "department", "self")[i % 3]
            # 120 abstracts: two of them under a header of its own make each memory unique
            # (an exact duplicate in one scope is merged into the first record, not stored)
            text = (f"Note {i} for task t-{i % 97}: {texts[i % len(texts)][:700]} "
                    f"{texts[(7 * i + 3) % len(texts)][:400]}")
            aid = f"note-{i}"
            if i % 10 == 9:  # a second version of an earlier artifact of the same agent
                aid, text = f"note-{i - 30}", text + f" (revised {i})"
            index_memory(conn, embedder, viewer, artifact_id=aid, scope=scope, content=text,
                         meta={"type": "note", "task_id": f"t-{i % 97}"})
    db.stop()
    print(f"{memories} memories written in {time.perf_counter() - started:.1f} s", flush=True)


def _measure(home: Path, work: Path, memories_only: bool) -> Path:
    kind = "memories-only" if memories_only else "full"
    file = work / f"{kind}.backup"
    seconds = _run(home, "backup", str(file), *(["--memories-only"] if memories_only else []))
    target = work / f"restored-{kind}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(mode=0o755)
    if memories_only:  # beside a library ingested again: the same books, no memories
        shutil.copytree(home / "library", target / "library")
        _run(target, "ingest")
    restore_s = _run(target, "restore", str(file))
    print(f"{kind:>13}: backup {seconds:5.1f} s, {file.stat().st_size / 2**20:7.1f} MB; "
          f"restore into {'a re-ingested' if memories_only else 'an empty'} home {restore_s:5.1f} s", flush=True)
    shutil.rmtree(target, ignore_errors=True)
    return file


def _kills(home: Path, file: Path, rounds: int) -> None:
    started = time.perf_counter()
    _run(home, "backup", str(file))
    whole = time.perf_counter() - started
    rng = random.Random(11)
    db = Database(Settings(library_dir=home / "library", home=home))
    ok = replaced = 0
    try:
        for i in range(rounds):
            proc = subprocess.Popen([LIBRARY, "backup", str(file)], env=_env(home),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            at = rng.uniform(0.0, 1.0) * whole
            time.sleep(at)
            before = file.stat().st_mtime_ns
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            replaced += file.stat().st_mtime_ns != before
            try:
                v = verify(db, file)
                ok += v.ok
                state = "restores as saved" if v.ok else f"DIFFERS: {v.mismatched}"
            except BackupError as exc:
                state = f"REFUSED: {exc}"
            print(f"  kill {i + 1:2d} at {at:5.2f} s of {whole:.2f} s: {state}", flush=True)
    finally:
        db.stop()
    left = sorted(p.name for p in file.parent.glob(f"{file.name}.partial-*"))
    print(f"kills: {ok}/{rounds} left a backup that restores as saved ({replaced} finished before the kill); "
          f"left beside it: {left or 'nothing'} (removed by the next backup)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=Path("/var/tmp/library-backup-bench"))
    parser.add_argument("--memories", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--reuse", action="store_true", help="Keep the home of an earlier run.")
    args = parser.parse_args()
    home = args.home / "home"
    if not args.reuse:
        shutil.rmtree(args.home, ignore_errors=True)
    args.home.mkdir(parents=True, exist_ok=True, mode=0o755)
    args.home.chmod(0o755)  # the embedded server runs as its own user when we are root
    if not args.reuse or not (home / "pgdata").exists():
        _populate(home, args.memories)
    work = args.home / "work"
    work.mkdir(exist_ok=True, mode=0o755)
    with Database(Settings(library_dir=home / "library", home=home)).connect() as conn:
        row = conn.execute("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM passages), "
                           "(SELECT count(*) FROM memories)").fetchone()
    print(f"library: {row[0]} files, {row[1]} passages, {row[2]} memory versions; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    full = _measure(home, work, memories_only=False)
    _measure(home, work, memories_only=True)
    _kills(home, full, args.kills)


if __name__ == "__main__":
    main()
