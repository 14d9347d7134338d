"""The knowledge-graph MCP tools (library_entity, library_related, library_path,
library_subgraph): what agents read about each, and their registration on a server
(serving.mcp_server.build_server calls `register_tools`). The queries are serving/graph.py's.
"""

from __future__ import annotations

from typing import Any

from serving import graph
from serving.ontology import ENTITY_TYPES, RELATION_TYPES
from serving.tool_errors import tool_call

ENTITY_DESCRIPTION = """\
Look up a concept, person, place, work or tool in the library's knowledge graph.
Any name a person goes by finds them ("Holmes", "Mr. Holmes", "Sherlock Holmes").
Returns {found, name, aliases, type, type_raw, mentions, source_count, files, relations,
coverage}:
`type` is one of a closed vocabulary (""" + ", ".join(ENTITY_TYPES) + """);
`source_count` is how many files mention it; `relations` are its strongest edges,
each {direction: out | in | undirected, relation, entity, files, count, relation_raw,
evidence}, ranked by how many files assert them. Direction is as the text stated it
("used by" is stored as `uses` with relation_raw "used by"); "undirected" edges mean
the two names share sentences (co-occurrence), not a stated relation.
found = false with `candidates` means the name is ambiguous or only close: call again
with one candidate's exact name. found = false without candidates means the graph
has no such entity - the graph covers only the files extracted so far, so that is
NOT proof the library never mentions it (use library_search for that).
Every answer carries `coverage` {files_extracted, files_ingested, files_pending, note}:
extraction follows each ingest by itself, and while files are pending the answer is
built from the files done so far (the note says how many)."""

RELATED_DESCRIPTION = """\
One hop in the knowledge graph: entities related to `name`, optionally only one
relation (""" + ", ".join(RELATION_TYPES) + """) and one direction ("out": name -> other,
"in": other -> name, "both"). Ranked by the number of files asserting each edge,
then by how often. Returns {found, entity, related: [{direction, relation, entity,
files, count, relation_raw, evidence}]}; ambiguous names return candidates."""

PATH_DESCRIPTION = """\
How two entities are connected: the shortest paths (at most 3 hops, edges followed
in either direction) between `source` and `target`. Returns {found, hops, paths:
[[{from, relation, direction, to, files, count}, ...]]}. found = false with a note
means no connection within max_hops in the graph extracted so far; with candidates,
one of the names is ambiguous."""

SUBGRAPH_DESCRIPTION = """\
The neighbourhood of an entity: the entity, its strongest neighbours (depth 1, or 2
for neighbours of neighbours), up to `limit` nodes, and every edge among them, each
with the number of files asserting it. Use it to see the context of a concept at once."""


def register_tools(server: Any, lib: Any) -> None:
    """The graph tools on an MCPServer. The graph is built from library files only
    (never from agent memories), so every caller sees the same graph; the transport's
    authentication (bearer token over HTTP) applies as for every tool."""
    def call(tool: str, fn) -> dict[str, Any]:
        def run() -> dict[str, Any]:
            with lib.connection() as conn:
                return fn(conn)
        return tool_call(tool, run, agent_errors=(graph.GraphError,))

    @server.tool(name="library_entity", description=ENTITY_DESCRIPTION)
    def library_entity(name: str, limit: int = 10) -> dict[str, Any]:
        return call("library_entity", lambda conn: graph.entity(conn, name, limit=limit))

    @server.tool(name="library_related", description=RELATED_DESCRIPTION)
    def library_related(name: str, relation: str | None = None, direction: str = "both",
                        limit: int = 20) -> dict[str, Any]:
        return call("library_related", lambda conn: graph.related(conn, name, relation=relation,
                                                                  direction=direction, limit=limit))

    @server.tool(name="library_path", description=PATH_DESCRIPTION)
    def library_path(source: str, target: str, max_hops: int = graph.MAX_HOPS, limit: int = 5) -> dict[str, Any]:
        return call("library_path", lambda conn: graph.path(conn, source, target, max_hops=max_hops, limit=limit))

    @server.tool(name="library_subgraph", description=SUBGRAPH_DESCRIPTION)
    def library_subgraph(name: str, depth: int = 1, limit: int = 25) -> dict[str, Any]:
        return call("library_subgraph", lambda conn: graph.subgraph(conn, name, depth=depth, limit=limit))
