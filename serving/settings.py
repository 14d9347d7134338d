"""One settings object, read from the environment.

Names follow the reference system where it had them (LIBRARY_DIR,
LIBRARY_DB_DSN); everything else is LIBRARY_*.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOME = Path("~/.library-pipeline")


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


@dataclass(frozen=True)
class Settings:
    library_dir: Path
    home: Path
    db_dsn: str | None = None
    dagster_dsn: str | None = None
    embed_backend: str = "minilm"
    embed_model: str | None = None
    embed_dims: int | None = None
    ollama_url: str = "http://127.0.0.1:11434"
    max_file_bytes: int = 512 * 1024 * 1024
    ocr_languages: str = "rus+eng"

    @classmethod
    def from_env(cls) -> Settings:
        home = Path(os.environ.get("LIBRARY_HOME") or DEFAULT_HOME).expanduser().resolve()
        library_dir = Path(os.environ.get("LIBRARY_DIR") or home / "library").expanduser().resolve()
        dims = os.environ.get("LIBRARY_EMBED_DIMS", "").strip()
        return cls(
            library_dir=library_dir,
            home=home,
            db_dsn=os.environ.get("LIBRARY_DB_DSN") or None,
            dagster_dsn=os.environ.get("LIBRARY_DAGSTER_DSN") or None,
            embed_backend=os.environ.get("LIBRARY_EMBED_BACKEND", "minilm").strip().lower(),
            embed_model=os.environ.get("LIBRARY_EMBED_MODEL") or None,
            embed_dims=int(dims) if dims else None,
            ollama_url=os.environ.get("LIBRARY_OLLAMA_URL", "http://127.0.0.1:11434"),
            max_file_bytes=_int("LIBRARY_MAX_FILE_MB", 512) * 1024 * 1024,
            ocr_languages=os.environ.get("LIBRARY_OCR_LANGUAGES", "rus+eng"),
        )
