"""Who is calling: identities come from the transport, never from a tool argument.

- HTTP: a config file (path in LIBRARY_IDENTITIES, TOML or JSON) maps bearer
  tokens to {agent, department}; the HTTP middleware accepts only tokens listed
  there (or LIBRARY_MCP_TOKEN, which carries the stdio-style env identity).
- stdio (one process per agent, spawned by its host): LIBRARY_AGENT and
  LIBRARY_DEPARTMENT in the server's environment.

File format (TOML; the JSON equivalent is the same mapping):

    [tokens."c0ffee-scout-token"]
    agent = "Agent-CompetitorScout"
    department = "marketing"

    [tokens."beef-ops-token"]
    agent = "Agent-Ops"
    department = "operations"
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from serving.search.types import Viewer
from serving.settings import get_settings

IDENTITIES_ENV = "LIBRARY_IDENTITIES"
AGENT_ENV = "LIBRARY_AGENT"
DEPARTMENT_ENV = "LIBRARY_DEPARTMENT"
NAME_MAX = 200


class IdentityError(ValueError):
    """The identity configuration is unusable (unreadable file, missing agent...)."""


def _name(value: object, what: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise IdentityError(f"{where}: {what} must be a non-empty string")
    value = value.strip()
    if len(value) > NAME_MAX or any(ord(ch) < 32 for ch in value):
        raise IdentityError(f"{where}: {what} must be at most {NAME_MAX} printable characters")
    return value


@dataclass(frozen=True)
class IdentityMap:
    """bearer token -> Viewer(agent, department)."""

    tokens: dict[str, Viewer]
    source: str = ""

    def lookup(self, token: str | bytes | None) -> Viewer | None:
        """Constant-time per entry; every entry is compared (no early exit on a match)."""
        if token is None:
            return None
        given = token.encode("utf-8", "surrogatepass") if isinstance(token, str) else bytes(token)
        found = None
        for known, viewer in self.tokens.items():
            if hmac.compare_digest(given, known.encode("utf-8")):
                found = viewer
        return found

    def __len__(self) -> int:
        return len(self.tokens)


def parse_identities(raw: dict, where: str = "identities") -> IdentityMap:
    if not isinstance(raw, dict) or not isinstance(raw.get("tokens"), dict) or not raw["tokens"]:
        raise IdentityError(f"{where}: expected a non-empty 'tokens' table mapping each token to "
                            "{agent, department}")
    tokens: dict[str, Viewer] = {}
    for i, (token, entry) in enumerate(raw["tokens"].items(), start=1):
        if not isinstance(token, str) or len(token) < 8:
            raise IdentityError(f"{where}: token #{i} is shorter than 8 characters")
        if not isinstance(entry, dict):
            raise IdentityError(f"{where}: token #{i} must map to {{agent, department}}")
        agent = _name(entry.get("agent"), "agent", f"{where} token #{i}")
        dept = entry.get("department")
        department = _name(dept, "department", f"{where} token #{i}") if dept is not None else None
        tokens[token] = Viewer(agent=agent, department=department)
    return IdentityMap(tokens, where)


def load_identities(path: str | Path | None = None) -> IdentityMap | None:
    """The token map from `path` or $LIBRARY_IDENTITIES; None when neither is set."""
    path = path or get_settings().identities
    if not path:
        return None
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise IdentityError(f"cannot read {IDENTITIES_ENV} file {p}: {type(exc).__name__}") from None
    try:
        if p.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            import tomllib

            raw = tomllib.loads(text)
    except ValueError as exc:
        raise IdentityError(f"{p}: not valid {'JSON' if p.suffix.lower() == '.json' else 'TOML'}: "
                            f"{str(exc).splitlines()[0]}") from None
    return parse_identities(raw, str(p))


def env_identity() -> Viewer | None:
    """The stdio identity: LIBRARY_AGENT (+ LIBRARY_DEPARTMENT); None when unset."""
    settings = get_settings()
    agent = settings.agent
    if not agent:
        return None
    dept = settings.department
    return Viewer(agent=_name(agent, "agent", AGENT_ENV),
                  department=_name(dept, "department", DEPARTMENT_ENV) if dept else None)
