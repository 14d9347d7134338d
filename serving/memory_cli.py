"""`library memory ...`: the Librarian's actions from a shell (`library_pipeline.cli.main` registers
`memory_app` as `library memory`).

The CLI runs on the machine that holds the database, so its user is the operator:
it acts AS an agent, named by --agent / --department or LIBRARY_AGENT /
LIBRARY_DEPARTMENT, and sees exactly what that agent would see over MCP.

    library memory index  ART-1 report.txt --scope department --meta '{"type": "report"}'
    library memory search "tiktok seeding pricing" --scope department --scope global
    library memory get ART-1
    library memory forget ART-1            # prints what would go; --yes removes it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from serving.cli import fail, with_library

memory_app = typer.Typer(name="memory", help="Agent memory: index, search, get, forget.", no_args_is_help=True,
                         add_completion=False)

AgentOpt = Annotated[Optional[str], typer.Option("--agent", envvar="LIBRARY_AGENT",
                                                 help="Act as this agent (default: $LIBRARY_AGENT).")]
DeptOpt = Annotated[Optional[str], typer.Option("--department", envvar="LIBRARY_DEPARTMENT",
                                                help="The agent's department (default: $LIBRARY_DEPARTMENT).")]


def _viewer(agent: str | None, department: str | None):
    from serving.search.types import Viewer

    if not agent or not agent.strip():
        fail("no agent: pass --agent NAME or set LIBRARY_AGENT")
    return Viewer(agent=agent.strip(), department=(department or "").strip() or None)


def _print(value: Any) -> None:
    typer.echo(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def _run(fn):
    from serving.memory import MemoryInputError

    return with_library(fn, errors=(MemoryInputError,))


@memory_app.command("index")
def index_cmd(
    artifact_id: Annotated[str, typer.Argument(help="Your id for the artifact (same id again = new version).")],
    source: Annotated[str, typer.Argument(help="A UTF-8 text file, or - for stdin.")],
    scope: Annotated[str, typer.Option(help="self | department | global")] = "self",
    meta: Annotated[Optional[str], typer.Option(help='JSON object, e.g. {"type": "report", "task_id": "t1"}')] = None,
    agent: AgentOpt = None, department: DeptOpt = None,
) -> None:
    """Store an artifact: chunked, embedded, searchable at once."""
    from serving.memory import service

    viewer = _viewer(agent, department)
    try:
        raw = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror or type(exc).__name__}")
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{source} is not UTF-8 text (byte {exc.start}); convert it first")
    try:
        parsed = json.loads(meta) if meta else None
    except ValueError:
        fail("--meta is not valid JSON")
    _print(_run(lambda lib: service.memory_index(lib, viewer, artifact_id=artifact_id, content=content,
                                                 scope=scope, meta=parsed)))


@memory_app.command("search")
def search_cmd(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    top_k: Annotated[int, typer.Option("--top-k", "-k")] = 5,
    scope: Annotated[Optional[list[str]], typer.Option(help="Repeatable: self, department, global.")] = None,
    type_: Annotated[Optional[str], typer.Option("--type", help="Only this meta type.")] = None,
    min_relevance: Annotated[Optional[float], typer.Option(help="0-1")] = None,
    include_archived: Annotated[bool, typer.Option("--include-archived")] = False,
    include_cold: Annotated[bool, typer.Option("--include-cold")] = False,
    include_library: Annotated[bool, typer.Option("--include-library")] = False,
    agent: AgentOpt = None, department: DeptOpt = None,
) -> None:
    """Search the memories this agent may see (JSON: results, total_found, returned)."""
    from serving.memory import service

    viewer = _viewer(agent, department)
    flt: dict[str, Any] = {"include_archived": include_archived, "include_cold": include_cold,
                           "include_library": include_library}
    if scope:
        flt["scope"] = scope
    if type_:
        flt["type"] = type_
    if min_relevance is not None:
        flt["min_relevance"] = min_relevance
    _print(_run(lambda lib: service.memory_search(lib, viewer, query, top_k=top_k, filter=flt)))


@memory_app.command("get")
def get_cmd(ref: Annotated[str, typer.Argument(help="Memory id or artifact id.")],
            agent: AgentOpt = None, department: DeptOpt = None) -> None:
    """One record with its full content and versions."""
    from serving.memory import service

    viewer = _viewer(agent, department)
    _print(_run(lambda lib: service.memory_get(lib, viewer, ref)))


@memory_app.command("forget")
def forget_cmd(ref: Annotated[str, typer.Argument(help="Memory id or artifact id (all its versions go).")],
               yes: Annotated[bool, typer.Option("--yes", help="Really delete; without it, only show.")] = False,
               agent: AgentOpt = None, department: DeptOpt = None) -> None:
    """Delete an artifact you wrote - every version, its passages and access log. The only
    deletion there is (decay archives, retention moves to cold); without --yes it only
    prints what would be removed."""
    from serving.memory import service

    viewer = _viewer(agent, department)
    report = _run(lambda lib: service.memory_forget(lib, viewer, ref, dry_run=not yes))
    _print(report)
    if not yes:
        typer.echo(f"nothing removed: run again with --yes to delete {report['memories']} version(s), "
                   f"{report['passages']} passage(s), {report['access_log_rows']} access-log row(s)", err=True)
