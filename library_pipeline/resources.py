"""Dagster resources, configured in one direction: `Settings` -> one resource whose
config is the settings' shape (`LibrarySettings`) -> the same `Settings` back.

`LibrarySettings` is generated from the `serving.settings.Settings` dataclass, so a
setting added there is a field of the resource (and of the Dagster UI's resource
config) with no second list to keep in step; its `settings` property rebuilds the exact
`Settings` it was made from, never the process's environment. The other resources
(`LibraryDatabase`, `EmbedderResource`, and the vault and text-generation ones in their
domains) hold that resource and no config of their own: they turn the settings into the
object an asset needs (a `Database`, an `Embedder`, a `GitRepo`, a `TextGenerator`).

Two ways to build `LibrarySettings`: `from_settings` gives plain values, for the
in-process launches and tests; the code location's Definitions use `for_definitions`,
which binds every secret the environment holds (`SECRET_ENV`) as `dg.EnvVar`, so the
Dagster UI's resource config shows the variable's name, not a password. Dagster
resolves it in each run's process, from the same variable the settings read.

The resources wrap plain classes from `serving` (which must deploy without Dagster), so the
pipeline and the search side share one connection factory and one definition of how
text is embedded.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Optional, Self

import dagster as dg
import pydantic

from serving.db import Database
from serving.embedding import Embedder, load_embedder
from serving.migration import load_active_embedder
from serving.settings import Settings

# settings that are secrets, with the variable each is read from (serving.settings)
SECRET_ENV = {"db_dsn": "LIBRARY_DB_DSN", "dagster_dsn": "LIBRARY_DAGSTER_DSN", "eval_dsn": "LIBRARY_EVAL_DSN",
              "mcp_token": "LIBRARY_MCP_TOKEN"}

_DATABASES: dict[tuple, Database] = {}


def _config_type(hint: Any) -> tuple[Any, bool]:
    """A settings field's type as Dagster config takes it (paths as strings), and whether
    it is a Path."""
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next(a for a in args if a is not type(None)) if args else hint
    is_path = base is Path
    base = str if is_path else base
    return (Optional[base] if optional else base), is_path


_HINTS = typing.get_type_hints(Settings)
_PATHS = frozenset(f.name for f in dataclasses.fields(Settings) if _config_type(_HINTS[f.name])[1])


class _SettingsShape(dg.ConfigurableResource):
    """Methods of `LibrarySettings`; its fields are made from `Settings` below."""

    @classmethod
    def from_settings(cls, settings: Settings) -> LibrarySettings:
        """Plain values: for use outside a code location (in-process launches, tests)."""
        values = {k: (str(v) if k in _PATHS and v is not None else v)
                  for k, v in dataclasses.asdict(settings).items()}
        return typing.cast(LibrarySettings, cls(**values))

    @classmethod
    def for_definitions(cls, settings: Settings) -> LibrarySettings:
        """For a code location's Definitions: each secret the settings carry bound as
        `dg.EnvVar` of its variable. Only for settings read from this process's
        environment, where the variable holds the value the settings carry."""
        values = cls.from_settings(settings)._as_dict()
        for name, env in SECRET_ENV.items():
            if values.get(name):
                values[name] = dg.EnvVar(env)
        return typing.cast(LibrarySettings, cls(**values))

    def _as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Settings)}

    @property
    def settings(self) -> Settings:
        """The `Settings` these values are."""
        return Settings(**{k: (Path(v) if k in _PATHS and v is not None else v) for k, v in self._as_dict().items()})


def _settings_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        annotation, _ = _config_type(_HINTS[f.name])
        default = f.default if f.default is not dataclasses.MISSING else ...
        fields[f.name] = (annotation, pydantic.Field(default=str(default) if isinstance(default, Path) else default))
    return fields


LibrarySettings = pydantic.create_model(  # type: ignore[call-overload]
    "LibrarySettings", __base__=_SettingsShape, __module__=__name__,
    __doc__="Every setting of the library (serving.settings.Settings; LIBRARY_* variables).",
    **_settings_fields())
if typing.TYPE_CHECKING:
    LibrarySettings = _SettingsShape  # noqa: F811


class SettingsResource(dg.ConfigurableResource):
    """A resource with no config of its own: it holds the settings resource."""

    config: LibrarySettings

    @classmethod
    def from_settings(cls, settings: Settings) -> Self:
        return cls(config=LibrarySettings.from_settings(settings))

    @property
    def settings(self) -> Settings:
        return self.config.settings


class LibraryDatabase(SettingsResource):
    """PostgreSQL + pgvector: the embedded server under the settings' home, or their DSN."""

    def get(self) -> Database:
        """One Database (and one claim on the embedded server) per process."""
        settings = self.settings
        key = (str(settings.library_dir), str(settings.home), settings.db_dsn or "")
        if key not in _DATABASES:
            _DATABASES[key] = Database(settings)
        return _DATABASES[key]


def release_databases(home: Path) -> None:
    """Give up this process's resource handles on the library under `home` (a
    benchmark that moves on to a fresh database would otherwise keep each old
    embedded server running until it exits)."""
    for key in [k for k in _DATABASES if Path(k[1]) == Path(home)]:
        _DATABASES.pop(key).stop()


class EmbedderResource(SettingsResource):
    """Passage/query embedder: bundled MiniLM, any sentence-transformers model, or Ollama
    (the settings' embed_backend, embed_model, embed_dims, ollama_url)."""

    def get(self, db: Database | None = None) -> Embedder:
        """The configured embedder - or, given the library's database, the model a
        re-embed migration switched that library to (serving.migration): the
        environment only chooses the first model of an empty library, and writing
        new passages with any other model would leave them unsearchable."""
        settings = self.settings

        def configured() -> Embedder:
            return load_embedder(settings.embed_backend, settings.embed_model, dims=settings.embed_dims,
                                 ollama_url=settings.ollama_url)

        if db is None:
            return configured()
        with db.connect() as conn:
            return load_active_embedder(conn, configured)
