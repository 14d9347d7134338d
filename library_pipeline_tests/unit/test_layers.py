"""The import rules of docs/architecture.md, checked on the source: a module that
imports up a layer fails here, not in a deployment that lacks the upper layer (an MCP
server installed without the pipeline, a benchmark that loads the BEIR harness)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from library_pipeline import defs` imports the module library_pipeline.defs
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _files(package: str) -> list[Path]:
    path = ROOT / package
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in _files(package):
        for name in sorted(_imports(path)):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


def _outside(package: str, allowed: tuple[str, ...]) -> list[str]:
    """Imports of `library_pipeline` modules that are not in `allowed` (nor under one)."""
    found = []
    for path in _files(package):
        for name in sorted(_imports(path)):
            if name == "library_pipeline" or not name.startswith("library_pipeline."):
                continue
            if not any(name == a or name.startswith(a + ".") for a in allowed):
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


# The domain packages and the kernel: plain Python the definitions, the runners and the
# benchmarks call. What each may import of library_pipeline besides itself; everything
# else there (the rooms in ABOVE, the definitions and resources) is a layer above. No
# domain takes anything from how runs are planned: a file's partition key is the
# kernel's (`documents.partition_key_for`), the key its `documents` row carries.
KERNEL = "library_pipeline.documents"
DOMAIN = {
    "library_pipeline/documents.py": (),
    "library_pipeline/ingest": (KERNEL,),
    "library_pipeline/vault": (KERNEL, "library_pipeline.ingest"),
    "library_pipeline/eval": (KERNEL, "library_pipeline.ingest"),
    "library_pipeline/enrich": (KERNEL, "library_pipeline.ingest.passage_text"),
    "library_pipeline/memory": (),
    "library_pipeline/migrate": (),
    "library_pipeline/backup": ("library_pipeline.memory",),
}
# The rooms above the domains: Dagster definitions per domain, how runs start, the Dagster
# instance, the command lines, the scenarios tests and benchmarks share.
ABOVE = {"defs", "launch", "instance", "cli", "testing"}
# The modules the root keeps: the package, the code location, its resources, the kernel.
ROOT_MODULES = {"__init__.py", "definitions.py", "resources.py", "documents.py"}


def _own(package: str) -> str:
    return package.removesuffix(".py").replace("/", ".")


def test_serving_imports_neither_the_pipeline_nor_dagster():
    assert _violations("serving", ("library_pipeline", "dagster")) == []


def test_domain_packages_do_not_import_dagster():
    for package in DOMAIN:
        assert _violations(package, ("dagster",)) == [], package


def test_domain_packages_import_only_the_kernel_and_the_domains_they_build_on():
    for package, allowed in DOMAIN.items():
        assert _outside(package, (_own(package), *allowed)) == [], package


def test_every_domain_package_is_checked():
    """A new package under library_pipeline is either a domain package (listed above)
    or one of the layers above it, named here; nothing is left out by default."""
    packages = {p.name for p in (ROOT / "library_pipeline").iterdir()
                if p.is_dir() and (p / "__init__.py").exists()}
    listed = {Path(p).name for p in DOMAIN if not p.endswith(".py")}
    assert packages - ABOVE == listed


def test_the_root_holds_the_location_and_the_kernel_only():
    """Every other module lives in a room (a package named in DOMAIN or ABOVE, each
    described in docs/architecture.md): a new entry point or launcher at the root would
    start the pile of loose modules again."""
    assert {p.name for p in (ROOT / "library_pipeline").glob("*.py")} == ROOT_MODULES


def test_how_runs_are_planned_never_imports_the_definitions():
    """The definitions import the sensors, which plan through `launch.plans`: a plan that
    reached back to the definitions would close a circle through the whole location.
    In-process callers pass the location in."""
    for module in ("library_pipeline/launch/plans.py", "library_pipeline/launch/run_plan.py",
                   "library_pipeline/instance"):
        assert _violations(module, ("library_pipeline.definitions", "library_pipeline.defs")) == [], module


def test_the_check_sees_an_import_up_a_layer(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from library_pipeline.defs.ingest.assets import embeddings\nimport dagster as dg\n"
                   "from library_pipeline.launch import ingest_runner\n")
    assert {"library_pipeline.defs.ingest.assets", "dagster", "library_pipeline.launch.ingest_runner"} <= _imports(bad)
