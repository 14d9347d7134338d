"""How a tool call's failure reaches an agent: the one translation every MCP tool uses.

Errors an agent can act on (bad input: `SearchError` and its subclasses, a domain's own
input error such as `GraphError`; the database unreachable: `ConnectionError`) come back
as their one-line message. Anything else is logged here with its traceback and reported
as an internal error - never a stack trace in a tool result.

A write the database aborted for a deadlock or a serialization conflict rolled back as a
whole and is safe to run again: `retry_conflicts=True` retries it. Measured under
benchmarks/load.py: 5 of 258 memory_index calls hit "deadlock detected" against the
memory curation running beside them, and reached the agent as an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from serving.search.types import SearchError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_SQLSTATES = ("40P01", "40001")   # deadlock_detected, serialization_failure
RETRIES = 3


def internal_error(tool: str, exc: BaseException) -> ToolError:
    log.error("%s failed", tool, exc_info=exc)
    return ToolError(f"{tool} failed with an internal error ({type(exc).__name__}); the server log has "
                     f"details. Retry, or simplify the request.")


def tool_call(tool: str, fn: Callable[[], T], *, agent_errors: tuple[type[BaseException], ...] = (),
              retry_conflicts: bool = False) -> T:
    """Run one tool's work, translating its failure for the agent (see the module docstring)."""
    readable = (SearchError, ConnectionError, *agent_errors)
    attempts = RETRIES if retry_conflicts else 1
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except readable as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:  # never a stack trace to the agent
            if getattr(exc, "sqlstate", None) in RETRY_SQLSTATES and attempt < attempts:
                log.info("%s: %s; retrying (%d/%d)", tool, type(exc).__name__, attempt, attempts - 1)
                time.sleep(0.05 * attempt)
                continue
            raise internal_error(tool, exc) from None
    raise AssertionError("unreachable")
