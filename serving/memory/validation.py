"""What memory tools accept: the caller's identity, artifact ids, content, scope,
meta and the search filter, each refused with a message worded for the agent that sent it."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from serving.search.types import SCOPES, SearchError, SearchFilters, Viewer

MAX_CONTENT_CHARS = 200_000      # ~50k tokens, ~200 passages: a report, not a book (10 MB is refused)
MAX_ARTIFACT_ID = 200
MAX_META_BYTES = 16_384


class MemoryInputError(SearchError):
    """Bad input or a refused request, worded for the agent that sent it."""


class MemoryNotFound(MemoryInputError):
    pass


def require_identity(viewer: Viewer | None, *, scope: str | None = None) -> Viewer:
    if viewer is None or not viewer.agent:
        raise MemoryInputError("no agent identity for this connection: memory tools need the caller's identity "
                          "(HTTP: a bearer token listed in LIBRARY_IDENTITIES; stdio: LIBRARY_AGENT)")
    if scope == "department" and not viewer.department:
        raise MemoryInputError(f"agent {viewer.agent!r} has no department configured, so it cannot write "
                          "scope 'department'; use 'self' or 'global'")
    return viewer


def _check_text(value: Any, what: str) -> str:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise MemoryInputError(f"{what} is not valid UTF-8 text") from None
    if not isinstance(value, str):
        raise MemoryInputError(f"{what} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MemoryInputError(f"{what} is not valid UTF-8 text (lone surrogate characters)") from None
    if "\x00" in value:
        raise MemoryInputError(f"{what} contains NUL characters; send text, not binary data")
    return value


def validate_artifact_id(artifact_id: Any) -> str:
    if isinstance(artifact_id, int) and not isinstance(artifact_id, bool):
        artifact_id = str(artifact_id)
    aid = _check_text(artifact_id, "artifact_id").strip()
    if not aid:
        raise MemoryInputError("artifact_id is empty")
    if len(aid) > MAX_ARTIFACT_ID or any(ord(ch) < 32 for ch in aid):
        raise MemoryInputError(f"artifact_id must be at most {MAX_ARTIFACT_ID} printable characters")
    return aid


def validate_content(content: Any) -> str:
    text = _check_text(content, "content")
    if not text.strip():
        raise MemoryInputError("content is empty")
    if len(text) > MAX_CONTENT_CHARS:
        raise MemoryInputError(f"content is {len(text):,} characters; the limit is {MAX_CONTENT_CHARS:,} per "
                          "artifact - split it into several artifacts, or put the document in the library")
    return text


def validate_scope(scope: Any) -> str:
    if not isinstance(scope, str) or scope.strip().lower() not in SCOPES:
        raise MemoryInputError(f"unknown scope {scope!r}; scope is one of {', '.join(SCOPES)}")
    return scope.strip().lower()


def validate_meta(meta: Any) -> dict[str, Any]:
    if meta is None:
        return {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            raise MemoryInputError("meta must be a JSON object, e.g. {\"type\": \"report\", \"task_id\": \"...\"}") from None
    if not isinstance(meta, dict):
        raise MemoryInputError(f"meta must be an object, got {type(meta).__name__}")
    for key in meta:
        if not isinstance(key, str) or not key.strip():
            raise MemoryInputError("meta keys must be non-empty strings")
    try:
        encoded = json.dumps(meta, ensure_ascii=False, allow_nan=False)
        encoded.encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError):
        raise MemoryInputError("meta must hold JSON values only (strings, numbers, booleans, lists, objects)") from None
    if "\\u0000" in encoded:
        raise MemoryInputError("meta contains NUL characters")
    if len(encoded.encode("utf-8")) > MAX_META_BYTES:
        raise MemoryInputError(f"meta is larger than {MAX_META_BYTES:,} bytes")
    for key in ("type", "task_id", "agent_note"):
        if key in meta and meta[key] is not None and (not isinstance(meta[key], str) or len(meta[key]) > 200):
            raise MemoryInputError(f"meta.{key} must be a string of at most 200 characters")
    if meta.get("date") is not None:
        ok = isinstance(meta["date"], str)
        if ok:
            try:
                date.fromisoformat(meta["date"][:10])
            except ValueError:
                ok = False
        if not ok:
            raise MemoryInputError(f"meta.date must be an ISO date string (YYYY-MM-DD), got {str(meta['date'])[:40]!r}")
    if "agent" in meta or "scope" in meta:
        raise MemoryInputError("meta may not set 'agent' or 'scope': the agent is the caller's identity, "
                          "the scope is its own argument")
    return meta


_FILTER_NAMES = {"scope", "scopes", "type", "types", "agent", "agents", "min_relevance", "include_archived",
                 "include_cold", "include_superseded", "include_library"}


def parse_memory_filter(raw: Any) -> tuple[SearchFilters, bool]:
    """The spec's filter object -> SearchFilters (viewer added by the caller), include_library."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise MemoryInputError(f"filter must be an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _FILTER_NAMES)
    if unknown:
        raise MemoryInputError(f"unknown filter {unknown[0]!r}; accepted: {', '.join(sorted(_FILTER_NAMES))}")

    def strings(key: str, plural: str) -> tuple[str, ...] | None:
        value = raw.get(key, raw.get(plural))
        if value is None:
            return None
        items = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(v, str) and v.strip() for v in items):
            raise MemoryInputError(f"filter {key!r} takes a string or a list of strings")
        return tuple(v.strip() for v in items) or None

    scopes = strings("scope", "scopes")
    if scopes:
        for s in scopes:
            validate_scope(s)
        scopes = tuple(s.lower() for s in scopes)
    flags = {}
    for name in ("include_archived", "include_cold", "include_superseded", "include_library"):
        value = raw.get(name, False)
        if not isinstance(value, bool):
            raise MemoryInputError(f"filter {name!r} must be true or false")
        flags[name] = value
    mr = raw.get("min_relevance")
    if mr is not None:
        if isinstance(mr, bool) or not isinstance(mr, (int, float)) or not 0 <= float(mr) <= 1:
            raise MemoryInputError("filter 'min_relevance' must be a number between 0 and 1")
        mr = float(mr)
    library = flags.pop("include_library")
    filters = SearchFilters(sources=("memory", "library", "vault") if library else ("memory",), scopes=scopes,
                            agents=strings("agent", "agents"), memory_types=strings("type", "types"),
                            min_relevance=mr, **flags)
    return filters, library
