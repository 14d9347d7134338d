"""The MCP layer's retry of a memory call that lost to a concurrent one (the
load test, library_pipeline_tests/test_load.py, drives the same path with 20
clients against a real database)."""

from __future__ import annotations


def test_memory_tools_retry_a_deadlock_victim():
    """A deadlock (40P01) or serialization failure rolls the whole call back: the
    MCP layer runs it again instead of reporting an error to the agent."""
    import psycopg
    import pytest
    from mcp.server.mcpserver.exceptions import ToolError

    from serving.mcp_server import _memory_call

    calls = []

    def flaky(fails: int, error: type[Exception]):
        def fn():
            calls.append(1)
            if len(calls) <= fails:
                raise error("deadlock detected")
            return {"ok": True}
        return fn

    assert psycopg.errors.DeadlockDetected.sqlstate == "40P01"
    assert _memory_call("memory_index", flaky(2, psycopg.errors.DeadlockDetected)) == {"ok": True}
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ToolError, match="internal error"):
        _memory_call("memory_index", flaky(5, psycopg.errors.SerializationFailure))
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(ToolError, match="internal error"):  # anything else: no retry
        _memory_call("memory_index", flaky(5, psycopg.errors.UniqueViolation))
    assert len(calls) == 1
