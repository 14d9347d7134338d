"""The scale-out deployment, validated without a cluster or a Docker engine
(neither exists on the development machines; docs/deployment.md):

- the Dagster instance that Dagster's Helm chart renders from
  deploy/k8s/values.yaml (storage, K8sRunLauncher, QueuedRunCoordinator)
  passes Dagster's own instance-config validation, and the run launcher's
  and run coordinator's config pass their classes' config schemas;
- the chart's run lanes equal the ones `library up` writes (no fork);
- every path the Dockerfile copies exists and is not excluded by
  .dockerignore, and its code-server target is the workspace's.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VALUES = REPO / "deploy" / "k8s" / "values.yaml"
DOCKERFILE = REPO / "Dockerfile"
RELEASE, NAMESPACE = "library", "library"


def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def render_instance(values: dict) -> dict:
    """dagster.yaml as the chart's `<release>-dagster-instance` ConfigMap renders
    it for the parts these values use (templates/helpers/instance/*.tpl)."""
    pg = values["postgresql"]
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    queue = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    run_launcher_config = {
        "load_incluster_config": launcher["loadInclusterConfig"],
        "job_namespace": NAMESPACE,
        "image_pull_policy": launcher["imagePullPolicy"],
        "service_account_name": f"{RELEASE}-dagster",
        "instance_config_map": f"{RELEASE}-dagster-instance",
        "postgres_password_secret": values["global"]["postgresqlSecretName"],
        "dagster_home": "/opt/dagster/dagster_home",
        "env_config_maps": launcher["envConfigMaps"],
        "env_secrets": launcher["envSecrets"],
        "env_vars": launcher["envVars"],
        "volumes": launcher["volumes"],
        "volume_mounts": launcher["volumeMounts"],
        "labels": launcher["labels"],
        "run_k8s_config": {_camel_to_snake(k): v for k, v in launcher["runK8sConfig"].items()},
    }
    return {
        "storage": {"postgres": {"postgres_db": {
            "username": pg["postgresqlUsername"],
            "password": {"env": "DAGSTER_PG_PASSWORD"},
            "hostname": pg["postgresqlHost"],
            "db_name": pg["postgresqlDatabase"],
            "port": pg["service"]["port"],
            "params": pg["postgresqlParams"],
        }}},
        "run_launcher": {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": run_launcher_config},
        "run_coordinator": {
            "module": "dagster.core.run_coordinator",
            "class": "QueuedRunCoordinator",
            "config": {
                "max_concurrent_runs": queue["maxConcurrentRuns"],
                "tag_concurrency_limits": queue["tagConcurrencyLimits"],
            },
        },
        "run_monitoring": {
            "enabled": values["dagsterDaemon"]["runMonitoring"]["enabled"],
            "start_timeout_seconds": values["dagsterDaemon"]["runMonitoring"]["startTimeoutSeconds"],
        },
        "telemetry": {"enabled": values["telemetry"]["enabled"]},
    }


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def test_helm_instance_config_passes_dagster_validation(values, tmp_path, monkeypatch):
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster._core.run_coordinator import QueuedRunCoordinator

    instance = render_instance(values)
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance))
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "not-a-real-password")
    # Dagster's own loader: schema validation of the whole file, class lookups included
    config, custom_class = dagster_instance_config(str(tmp_path))
    assert custom_class is None
    assert config["run_launcher"]["class"] == "K8sRunLauncher"

    k8s = pytest.importorskip("dagster_k8s", reason="dagster-k8s is in the test extras")
    result = process_config(k8s.K8sRunLauncher.config_type(), instance["run_launcher"]["config"])
    assert result.success, [e.message for e in result.errors]
    result = process_config(QueuedRunCoordinator.config_type(), instance["run_coordinator"]["config"])
    assert result.success, [e.message for e in result.errors]
    # a typo in a key is caught, not ignored (the check above has teeth)
    bad = dict(instance["run_launcher"]["config"], job_namspace="x")
    assert not process_config(k8s.K8sRunLauncher.config_type(), bad).success


def test_helm_run_lanes_match_library_up(values):
    from library_pipeline.instance.home import LANE_TAG, RUN_QUEUE

    queue = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert queue["maxConcurrentRuns"] == RUN_QUEUE["max_concurrent_runs"]
    assert queue["tagConcurrencyLimits"] == RUN_QUEUE["tag_concurrency_limits"]
    assert {limit["key"] for limit in queue["tagConcurrencyLimits"]} == {LANE_TAG}


def test_helm_user_deployment_uses_the_workspace_target_and_settings(values):
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"][0]["python_module"]
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    args = deployment["codeServerArgs"]
    assert args == ["-m", workspace["module_name"], "-a", workspace["attribute"]]
    assert deployment["includeConfigInLaunchedRuns"]["enabled"]
    env = {e["name"] for e in deployment["env"]}
    # every LIBRARY_* key set here is one the settings object reads
    settings_src = (REPO / "serving" / "settings.py").read_text()
    assert all(f'"{name}"' in settings_src for name in env if name.startswith("LIBRARY_")), env
    mount = {m["mountPath"] for m in deployment["volumeMounts"]}
    assert next(e["value"] for e in deployment["env"] if e["name"] == "LIBRARY_DIR") in mount


def _dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    parts = Path(path).parts
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if fnmatch.fnmatch(path, pattern) or any(fnmatch.fnmatch(p, bare) for p in parts[:1]):
            return True
    return False


def test_dockerfile_copies_existing_paths_and_serves_the_workspace():
    text = DOCKERFILE.read_text()
    instructions = re.sub(r"\\\n", " ", text)
    patterns = _dockerignore_patterns()
    copied = []
    for line in instructions.splitlines():
        if line.startswith("COPY "):
            *sources, _dest = shlex.split(line)[1:]
            copied += [s for s in sources if not s.startswith("--")]
    assert copied, "no COPY in the Dockerfile"
    for source in copied:
        assert (REPO / source).exists(), f"Dockerfile copies {source}, which does not exist"
        assert not _ignored(source, patterns), f"{source} is copied but excluded by .dockerignore"
    # what the image needs at run time is copied
    for needed in ("pyproject.toml", "schema.sql", "library_pipeline", "serving"):
        assert needed in copied, needed
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    assert "torch==2.13.0" in text and text.index("torch==2.13.0") < text.index("pip install -e ")
    # the code location runs the Dagster definitions: the base dependencies are only
    # the MCP server's (pyproject.toml), the pipeline is an extra
    assert "pip install -e '.[pipeline]'" in text
    assert "tesseract-ocr-rus" in text
    workspace = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"][0]["python_module"]
    cmd = re.search(r"^CMD (\[.*\])", instructions, re.M).group(1)
    assert f'"-m", "{workspace["module_name"]}", "-a", "{workspace["attribute"]}"' in cmd
