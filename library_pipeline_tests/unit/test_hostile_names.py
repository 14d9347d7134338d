"""File names Postgres cannot store as they are (the hostile corpus's names,
library_pipeline/testing/hostile_corpus.py; the whole corpus is ingested by
library_pipeline_tests/test_hostile_corpus.py)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("name", ["bad-\udcff\udcfe.txt", "new\nline.txt", "tab\tand\x1bescape.md"])
def test_hostile_names_round_trip(name, tmp_path):
    """Names Postgres cannot store as they are map to a stored form and back."""
    from library_pipeline.defs.ingest.partitions import fs_path, partition_key_for, scan_library

    (tmp_path / name).write_text("words")
    listed = scan_library(tmp_path)
    (stored, path), = listed.items()
    stored.encode("utf-8")  # storable
    assert fs_path(tmp_path, stored) == tmp_path / name == path
    assert "\n" not in partition_key_for(stored) and "\x1b" not in partition_key_for(stored)
