"""`library graph ...`: build the enrich stage and query the knowledge graph.

    library graph build [--budget 5000] [--only raptor|graph] [--force]
    library graph entity "Irene Adler"            # type, mentions, files, strongest edges
    library graph related Holmes --relation related_to --direction both
    library graph path "Irene Adler" "Baker Street"
    library graph subgraph Holmes --depth 2
    library graph top [--type person] | connected | stats

Queries go through serving.graph, the same functions the MCP tools call;
`build` runs the Dagster assets in-process (recorded in the shared instance,
so the runs appear in the UI), like `library ingest`.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

from serving.cli import fail, with_library
from serving.graph import GraphError

graph_app = typer.Typer(name="graph", help="Knowledge graph and RAPTOR summaries: build, entity, related, "
                                           "path, subgraph, top, connected, stats.", no_args_is_help=True,
                        add_completion=False)


def _query(fn) -> None:
    def run(lib) -> Any:
        with lib.connection() as conn:
            return fn(conn)

    typer.echo(json.dumps(with_library(run, errors=(GraphError,)), ensure_ascii=False, indent=2, default=str))


@graph_app.command()
def entity(name: str, limit: int = typer.Option(10, help="Edges to show.")) -> None:
    """Look an entity up: type, mentions, files, strongest relations (or candidates)."""
    from serving import graph

    _query(lambda conn: graph.entity(conn, name, limit=limit))


@graph_app.command()
def related(name: str, relation: Optional[str] = typer.Option(None, help="One relation of the vocabulary."),
            direction: str = typer.Option("both", help="out | in | both"),
            limit: int = typer.Option(20)) -> None:
    """One hop, ranked by the number of files asserting each edge."""
    from serving import graph

    _query(lambda conn: graph.related(conn, name, relation=relation, direction=direction, limit=limit))


@graph_app.command()
def path(source: str, target: str, max_hops: int = typer.Option(3, help="1-3"),
         limit: int = typer.Option(5)) -> None:
    """Shortest paths between two entities (<= 3 hops)."""
    from serving import graph

    _query(lambda conn: graph.path(conn, source, target, max_hops=max_hops, limit=limit))


@graph_app.command()
def subgraph(name: str, depth: int = typer.Option(1, help="1 or 2"), limit: int = typer.Option(25)) -> None:
    """An entity's neighbourhood and the edges among it."""
    from serving import graph

    _query(lambda conn: graph.subgraph(conn, name, depth=depth, limit=limit))


@graph_app.command()
def top(type: Optional[str] = typer.Option(None, "--type", help="Only this entity type."),
        limit: int = typer.Option(20)) -> None:
    """Entities mentioned by the most files."""
    from serving import graph

    _query(lambda conn: graph.top_entities(conn, type=type, limit=limit))


@graph_app.command()
def connected(limit: int = typer.Option(20)) -> None:
    """Entities with the most distinct neighbours."""
    from serving import graph

    _query(lambda conn: graph.most_connected(conn, limit=limit))


@graph_app.command()
def stats() -> None:
    """Counts by type and relation, and coverage (files extracted / ingested)."""
    from serving import graph

    _query(graph.stats)


@graph_app.command()
def build(budget: int = typer.Option(5000, min=0, help="Passages of graph extraction in this run."),
          only: Optional[str] = typer.Option(None, help="raptor | graph (default: both)"),
          force: bool = typer.Option(False, help="Rebuild summary trees even when current."),
          restart: bool = typer.Option(False, help="Forget graph progress and extract again.")) -> None:
    """Build RAPTOR trees and extract the graph for every ingested file (one range run)."""
    import dagster as dg

    from library_pipeline.definitions import definitions_for
    from library_pipeline.launch import plans as launch
    from serving.db import Database
    from serving.settings import get_settings

    if only not in (None, "raptor", "graph"):
        fail("--only must be raptor or graph")
    db = Database(get_settings())
    try:
        instance = launch.open_instance(db)
        keys = launch.enrich_keys(instance, db)
        if not keys:
            fail("no ingested files: run `library ingest` first")
        assets = [name for name, part in (("raptor_tree", "raptor"), ("knowledge_graph", "graph"))
                  if only in (None, part)]
        ops = {"raptor_tree": {"config": {"force": force}},
               "knowledge_graph": {"config": {"budget": budget, "restart": restart}}}
        plan = launch.enrich_plan(keys, "cli", run_config={"ops": {k: v for k, v in ops.items() if k in assets}},
                                  assets=assets)
        launched = launch.execute(plan, instance, definitions_for())
        run_id = launched.run_ids[0]
        for name in assets:
            event = instance.get_latest_materialization_event(dg.AssetKey(name))
            if event is not None and event.run_id == run_id:
                meta = {k: getattr(v, "value", v) for k, v in event.asset_materialization.metadata.items()
                        if k not in ("per_file", "failures")}
                typer.echo(f"{name}: {json.dumps(meta, default=str)}")
        if run_id in launched.failed_runs:
            fail(f"run {run_id} failed; see the Dagster UI or `library status`")
    finally:
        db.stop()

