"""The read side of the re-embed migration (library_pipeline/migrate/embedder.py writes):
which embedding model is active for this library, and how to load it.

`settings.embed_model` holds {name, dims} as the first writer left it; once a
migration has switched the library it also holds the spec ({backend, model,
spec_dims, ollama_url}) to load that model from. Serving and the pipeline must
embed queries and new passages with that model, whatever LIBRARY_EMBED_* say:
the environment only picks the first model of an empty library.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from serving.embedding import Embedder, load_embedder
from serving.settings import DEFAULT_OLLAMA_URL

log = logging.getLogger(__name__)

ACTIVE_KEY = "embed_model"


@dataclass(frozen=True)
class EmbedderSpec:
    backend: str
    model: str | None = None
    dims: int | None = None
    ollama_url: str = DEFAULT_OLLAMA_URL

    def load(self) -> Embedder:
        return load_embedder(self.backend, self.model, dims=self.dims, ollama_url=self.ollama_url)

    def to_dict(self) -> dict[str, Any]:
        # `spec_dims` is the requested truncation (None = native), kept apart from the
        # loaded model's `dims`: an Ollama model's name records an explicit truncation
        return {"backend": self.backend, "model": self.model, "spec_dims": self.dims,
                "ollama_url": self.ollama_url}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbedderSpec:
        return cls(backend=data["backend"], model=data.get("model"), dims=data.get("spec_dims"),
                   ollama_url=data.get("ollama_url") or DEFAULT_OLLAMA_URL)


def active_model(conn: psycopg.Connection) -> dict[str, Any] | None:
    row = conn.execute("SELECT value FROM settings WHERE key = %s", (ACTIVE_KEY,)).fetchone()
    return row[0] if row else None


def active_spec(conn: psycopg.Connection) -> EmbedderSpec | None:
    """The spec to load the active model from, when a migration recorded one."""
    value = active_model(conn)
    return EmbedderSpec.from_dict(value) if value and value.get("backend") else None


def load_active_embedder(conn: psycopg.Connection, fallback: Callable[[], Embedder]) -> Embedder:
    """The embedder to search and write with: the migrated-to spec if there is one,
    else `fallback` (the environment's LIBRARY_EMBED_*)."""
    spec = active_spec(conn)
    return spec.load() if spec is not None else fallback()
