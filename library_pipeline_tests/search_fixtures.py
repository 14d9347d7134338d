"""The search tests' fixtures over the sample library
(library_pipeline/testing/sample_library.py, which benchmarks/search.py builds too)."""

from __future__ import annotations

import pytest

from library_pipeline.testing import sample_library
from library_pipeline.testing.sample_library import Corpus, build_corpus, create_database, small_library

__all__ = ["Corpus", "conn", "corpus", "create_database", "small_library"]


@pytest.fixture(scope="session")
def corpus(server_db, embedder, test_data, request) -> Corpus:
    """The sample library, built once per session. Tests must not modify it."""
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    sample_library.EMBED_CACHE = cache.mkdir("search_embeddings") if cache is not None else None
    return build_corpus(create_database(server_db), embedder, test_data)


@pytest.fixture()
def conn(corpus):
    with corpus.db.connect() as connection:
        yield connection
