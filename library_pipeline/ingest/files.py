"""Which files of the library folder count, and how a stored relative path maps back
to the file (names that are not valid UTF-8 included)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from library_pipeline.ingest.extract.common import SUPPORTED_SUFFIXES


def is_candidate(path: Path) -> bool:
    name = path.name
    return path.suffix.lower() in SUPPORTED_SUFFIXES and not name.startswith(".")


def scan_library(root: Path) -> dict[str, Path]:
    """Every candidate file under the library root, keyed by relative path.

    Symlinks are listed (so a link pointing outside the root can be refused
    with a reason rather than silently skipped); symlinked directories are not
    followed, which also makes link loops harmless.
    """
    found: dict[str, Path] = {}
    if not root.is_dir():
        return found
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir() and not entry.is_symlink():
                stack.append(entry)
            elif is_candidate(entry):
                found[display_path(entry.relative_to(root).as_posix())] = entry
    return dict(sorted(found.items()))


def display_path(relpath: str) -> str:
    """A file name that is not valid UTF-8 arrives with surrogate escapes, which
    Postgres text cannot hold: the first such name made the whole registration
    transaction fail (benchmarks/hostile_corpus.py). Its bytes >= 0x80 are stored as
    `\\xNN` instead; `fs_path` maps the stored form back."""
    return relpath.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


_ESCAPED_BYTE = re.compile(r"\\x([89a-f][0-9a-f])")


def fs_path(root: Path, relpath: str) -> Path:
    """The file a stored relative path names: itself, or, for a name stored by
    `display_path`, the name with its escaped bytes restored."""
    path = root / relpath
    if "\\x" in relpath and not os.path.lexists(path):
        raw = _ESCAPED_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), relpath)
        if os.path.lexists(root / raw):
            return root / raw
    return path
