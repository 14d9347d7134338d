"""One list of the file types the library reads: the folder scan and the
extractor share it."""

from __future__ import annotations

import pytest

from library_pipeline.defs.ingest import partitions
from library_pipeline.ingest.extract import SUPPORTED_SUFFIXES


@pytest.mark.parametrize("name", ["book.pdf", "Book.EPUB", "notes.md", "a.txt"])
def test_one_list_of_file_types(tmp_path, name):
    assert partitions.SUPPORTED_SUFFIXES is SUPPORTED_SUFFIXES
    path = tmp_path / name
    path.write_text("x")
    assert partitions.is_candidate(path)
    assert not partitions.is_candidate(tmp_path / "image.png")
