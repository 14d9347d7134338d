"""Dagster resources: the database and the embedder.

Both wrap plain classes from `serving` (which must deploy without Dagster),
so the pipeline and the search side share one connection factory and one
definition of how text is embedded.

Two ways to build them from `Settings`: `from_settings` gives plain values, for the
CLI runners that call `dg.materialize` in-process with resources they built; the code
location's Definitions use `for_definitions`, which binds an external DSN as
`dg.EnvVar`, so the Dagster UI's resource config shows the variable's name, not a
password. Dagster resolves it in each run's process, from the same variable the
settings read.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import dagster as dg
from pydantic import Field

from serving.db import Database
from serving.embedding import Embedder, load_embedder
from serving.migration import load_active_embedder
from serving.settings import DEFAULT_OLLAMA_URL, Settings, get_settings

_DATABASES: dict[tuple, Database] = {}


class LibraryDatabase(dg.ConfigurableResource):
    """PostgreSQL + pgvector: the embedded server under `home`, or `dsn` when set."""

    library_dir: str = Field(description="The library folder (LIBRARY_DIR).")
    home: str = Field(description="Where the embedded database and state live (LIBRARY_HOME).")
    dsn: str = Field(default="", description="External Postgres DSN (LIBRARY_DB_DSN); empty = embedded.")
    max_file_bytes: int = Field(default=512 * 1024 * 1024, description="Files above this size fail with a reason.")
    ocr_languages: str = Field(default="rus+eng", description="Tesseract languages for image-only pages.")

    @classmethod
    def from_settings(cls, settings: Settings) -> LibraryDatabase:
        """Plain values: for use outside a code location (the CLI runners)."""
        return cls(library_dir=str(settings.library_dir), home=str(settings.home), dsn=settings.db_dsn or "",
                   max_file_bytes=settings.max_file_bytes, ocr_languages=settings.ocr_languages)

    @classmethod
    def for_definitions(cls, settings: Settings) -> LibraryDatabase:
        """For a code location's Definitions: an external DSN as `dg.EnvVar("LIBRARY_DB_DSN")`.
        Only for settings read from this process's environment (`get_settings()`), where
        the variable holds the DSN the settings carry."""
        resource = cls.from_settings(settings)
        if not settings.db_dsn:
            return resource
        return cls(library_dir=resource.library_dir, home=resource.home, dsn=dg.EnvVar("LIBRARY_DB_DSN"),
                   max_file_bytes=resource.max_file_bytes, ocr_languages=resource.ocr_languages)

    @property
    def settings(self) -> Settings:
        return dataclasses.replace(
            get_settings(), library_dir=Path(self.library_dir), home=Path(self.home),
            db_dsn=self.dsn or None, max_file_bytes=self.max_file_bytes,
            ocr_languages=self.ocr_languages)

    def get(self) -> Database:
        """One Database (and one claim on the embedded server) per process."""
        key = (self.library_dir, self.home, self.dsn)
        if key not in _DATABASES:
            _DATABASES[key] = Database(self.settings)
        return _DATABASES[key]


def release_databases(home: Path) -> None:
    """Give up this process's resource handles on the library under `home` (a
    benchmark that moves on to a fresh database would otherwise keep each old
    embedded server running until it exits)."""
    for key in [k for k in _DATABASES if Path(k[1]) == Path(home)]:
        _DATABASES.pop(key).stop()


class EmbedderResource(dg.ConfigurableResource):
    """Passage/query embedder: bundled MiniLM, any sentence-transformers model, or Ollama."""

    backend: str = Field(default="minilm", description="minilm | sentence-transformers | ollama")
    model: str = Field(default="", description="Model dir / hub name / Ollama model (not for minilm).")
    dims: int = Field(default=0, description="Matryoshka truncation for Ollama models; 0 = native.")
    ollama_url: str = Field(default=DEFAULT_OLLAMA_URL)

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbedderResource:
        return cls(backend=settings.embed_backend, model=settings.embed_model or "",
                   dims=settings.embed_dims or 0, ollama_url=settings.ollama_url)

    def get(self, db: Database | None = None) -> Embedder:
        """The configured embedder - or, given the library's database, the model a
        re-embed migration switched that library to (serving.migration): the
        environment only chooses the first model of an empty library, and writing
        new passages with any other model would leave them unsearchable."""
        def configured() -> Embedder:
            return load_embedder(self.backend, self.model or None, dims=self.dims or None,
                                 ollama_url=self.ollama_url)

        if db is None:
            return configured()
        with db.connect() as conn:
            return load_active_embedder(conn, configured)
