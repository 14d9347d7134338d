"""`pip install .[serve]` is enough for the MCP server and brings nothing of the
pipeline: every third-party module the `serving` package imports belongs to a
distribution in the closure of the base dependencies (pyproject.toml, walked
through the installed distributions' own requirements), and that closure holds
no Dagster, spaCy, natasha or celery. A fresh virtualenv with `.[serve]` was
checked the same way by hand (README, "Installing only the MCP server"); this keeps the split
from drifting when serving gains an import or a dependency moves."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PROJECT = "library-pipeline"
# what an MCP server must not install: the pipeline's heavy parts
PIPELINE_ONLY = ("dagster", "spacy", "natasha", "celery")


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _requirements(extras: set[str]) -> list[Requirement]:
    """The project's own requirements with `extras` (self-references expanded)."""
    project = _pyproject()
    reqs = [Requirement(r) for r in project["dependencies"]]
    seen: set[str] = set()
    todo = list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in project["optional-dependencies"][extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == PROJECT:
                todo += sorted(req.extras)
            else:
                reqs.append(req)
    return reqs


def _applies(req: Requirement, extra: str = "") -> bool:
    return req.marker is None or req.marker.evaluate({**default_environment(), "extra": extra})


def closure(extras: set[str]) -> set[str]:
    """Canonical names of every distribution the project with `extras` installs,
    read from the installed distributions' metadata."""
    found: set[str] = set()
    todo = [(req, "") for req in _requirements(extras)]
    while todo:
        req, via_extra = todo.pop()
        if not _applies(req, via_extra):
            continue
        name = canonicalize_name(req.name)
        wanted = {(name, e) for e in ("", *sorted(req.extras))}
        if all(w in found for w in wanted):
            continue
        found |= wanted
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: the subtree cannot be walked (the import check below names it)
        for text in requires:
            sub = Requirement(text)
            for extra in ("", *sorted(req.extras)):
                if _applies(sub, extra):
                    todo.append((sub, extra))
                    break
    return {name for name, _ in found}


def serving_imports() -> set[str]:
    """Top-level names of the third-party modules package `serving` imports."""
    names: set[str] = set()
    for path in (REPO / "serving").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("serving", "__future__")}


def test_serve_closure_has_nothing_of_the_pipeline():
    serve = closure({"serve"})
    heavy = sorted(n for n in serve if n.startswith(PIPELINE_ONLY))
    assert heavy == [], f"`.[serve]` would install {heavy}"
    # and the split means something: the pipeline extra brings them
    pipeline = closure({"pipeline"})
    for name in PIPELINE_ONLY:
        assert any(n.startswith(name) for n in pipeline), name
    assert closure({"all"}) >= serve | pipeline


def test_every_module_serving_imports_is_in_the_serve_closure():
    serve = closure({"serve"})
    owners = metadata.packages_distributions()
    missing = {}
    for module in sorted(serving_imports()):
        dists = {canonicalize_name(d) for d in owners.get(module, [])}
        if not dists & serve:
            missing[module] = sorted(dists) or "not installed"
    assert missing == {}, f"serving imports modules outside `.[serve]`: {missing}"


def test_the_check_sees_a_pipeline_import(tmp_path):
    """The mapping the test relies on: dagster's module belongs to a distribution
    outside the serve closure (if it is installed at all)."""
    owners = metadata.packages_distributions()
    if "dagster" in owners:
        assert not {canonicalize_name(d) for d in owners["dagster"]} & closure({"serve"})
