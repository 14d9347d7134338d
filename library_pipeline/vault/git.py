"""The vault's git repository, through the git CLI (plumbing commands only).

Why the CLI and not dulwich/pygit2: git is on every machine that pushes a
vault, its rename detection (`diff-tree -M`) is the one users see in
`git log`, and plumbing output with `-z` is stable and unambiguous for names
with spaces, quotes and non-Latin letters. Works on a bare repository (the
push target, where the post-receive hook runs) and on one with a work tree;
content is always read from commits, never from the work tree, so an
uncommitted edit is never indexed.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 120


class GitError(RuntimeError):
    """A git command failed; the message carries git's own stderr."""


@dataclass(frozen=True)
class Change:
    status: str               # A | M | D | R (rename) | C (copy) | T (type change)
    path: str
    old_path: str | None = None


@dataclass(frozen=True)
class Entry:
    mode: str
    kind: str                 # blob | tree | commit (submodule)
    blob: str
    size: int | None
    path: str


class GitRepo:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise GitError(f"vault repository {self.path} does not exist (LIBRARY_VAULT_REPO)")
        # the hook runs as the git server's user, the daemon maybe as another:
        # git refuses repositories owned by someone else unless told otherwise
        self._base = ["git", "-c", f"safe.directory={self.path.resolve()}", "-C", str(self.path)]
        try:
            self.git_dir = Path(self._run("rev-parse", "--absolute-git-dir").strip())
        except GitError as exc:
            raise GitError(f"{self.path} is not a git repository: {exc}") from None

    def _proc(self, *args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
        # a hook inherits GIT_DIR etc. pointing at the pushed repo; our -C must win
        for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_QUARANTINE_PATH",
                    "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"):
            env.pop(var, None)
        return subprocess.run([*self._base, *args], capture_output=True, env=env, timeout=GIT_TIMEOUT_S)

    def _run(self, *args: str, check: bool = True, binary: bool = False) -> str | bytes:
        proc = self._proc(*args)
        if check and proc.returncode != 0:
            raise GitError(f"git {' '.join(args[:3])}: {proc.stderr.decode('utf-8', 'replace').strip()[:500]}")
        if binary:
            return proc.stdout
        return proc.stdout.decode("utf-8", "surrogateescape") if proc.returncode == 0 else ""

    # -- refs and commits -------------------------------------------------------

    def default_branch(self) -> str:
        ref = str(self._run("symbolic-ref", "--quiet", "HEAD", check=False)).strip()
        return ref.removeprefix("refs/heads/") or "main"

    def head(self, branch: str | None = None) -> str | None:
        """The branch's commit, or None for an empty repository / unknown branch."""
        branch = branch or self.default_branch()
        return self.resolve(f"refs/heads/{branch}")

    def resolve(self, rev: str) -> str | None:
        out = str(self._run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)).strip()
        return out or None

    def has_commit(self, sha: str | None) -> bool:
        return bool(sha) and self.resolve(sha) is not None

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self._proc("merge-base", "--is-ancestor", older, newer).returncode == 0

    def commit_time(self, sha: str) -> int:
        return int(str(self._run("show", "-s", "--format=%ct", sha)).strip())

    def unsynced_commit_times(self, head: str, synced: str | None) -> list[int]:
        """Committer times of commits on `head` not reachable from `synced`."""
        args = ["log", "--format=%ct", head]
        if synced and self.has_commit(synced):
            args += ["--not", synced]
        elif synced:
            # the synced commit is gone (gc after a force-push): only the head is known to be new
            return [self.commit_time(head)]
        return [int(t) for t in str(self._run(*args)).split()]

    # -- trees and blobs ----------------------------------------------------------

    def tree(self, commit: str) -> dict[str, Entry]:
        out = str(self._run("ls-tree", "-r", "-l", "-z", "--full-tree", commit))
        entries: dict[str, Entry] = {}
        for record in out.split("\0"):
            if not record:
                continue
            meta, path = record.split("\t", 1)
            mode, kind, blob, size = meta.split()
            entries[path] = Entry(mode, kind, blob, None if size == "-" else int(size), path)
        return entries

    def entry(self, commit: str, path: str) -> Entry | None:
        out = str(self._run("ls-tree", "-l", "-z", "--full-tree", commit, "--", path))
        for record in out.split("\0"):
            if record:
                meta, found = record.split("\t", 1)
                if found == path:
                    mode, kind, blob, size = meta.split()
                    return Entry(mode, kind, blob, None if size == "-" else int(size), found)
        return None

    def read_blob(self, blob: str) -> bytes:
        return bytes(self._run("cat-file", "blob", blob, binary=True))

    def diff(self, old: str, new: str) -> list[Change]:
        """Changed paths between two commits, renames detected (default 50% similarity),
        so a note renamed and edited in one commit is still one note."""
        out = str(self._run("diff-tree", "-r", "-z", "-M", "--no-commit-id", "--name-status", old, new))
        fields = out.split("\0")
        changes: list[Change] = []
        i = 0
        while i < len(fields):
            status = fields[i]
            if not status:
                i += 1
                continue
            letter = status[0]
            if letter in "RC":
                changes.append(Change(letter, fields[i + 2], fields[i + 1]))
                i += 3
            else:
                changes.append(Change(letter, fields[i + 1]))
                i += 2
        return changes
