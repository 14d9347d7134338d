"""The Dagster UI in a real browser, against the real stack.

`library up` (embedded Postgres, ingest, `dagster dev` = webserver + daemon,
MCP HTTP server) runs as a subprocess on free ports over a two-file library
in a temporary LIBRARY_HOME; headless Debian Chromium, driven by Playwright
with `executable_path` set (Playwright downloads no browser), opens the UI:

- the global lineage lists the pipeline's assets;
- a partitioned asset's Partitions tab shows one partition per file, all
  materialized by the ingest;
- an asset check is executed from its page: the run goes through the
  QueuedRunCoordinator and the daemon, and the page shows the result;
- a backfill of all partitions launched from the UI becomes one range run
  (BackfillPolicy.single_run), not one run per file;
- the instance configuration page shows the run lanes (tag concurrency
  limits) the daemon runs with, and the daemons page shows them running;
- the automation page lists the sensors.

Screenshots go to a temporary folder; with LIBRARY_UPDATE_SCREENSHOTS=1 they
replace the tracked ones in docs/screenshots/ (referenced from docs/operations.md).
Teardown stops the stack as a user's Ctrl-C does (SIGINT to its process
group) and asserts that it, and the embedded Postgres, stopped.

Skips only when Chromium or Playwright is missing (`make system-deps`
installs Debian's chromium + chromium-driver; `pip install -e '.[test]'`
installs playwright). Set LIBRARY_UI_TEST_URL to aim the browser at a stack
that is already running instead of starting one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from library_pipeline.defs.ingest.partitions import partition_key_for
from library_pipeline_tests.http_helpers import free_port

REPO = Path(__file__).resolve().parent.parent
# the tracked screenshots change only when asked: every run of the suite rewrote
# them (new bytes each time) and left the work tree dirty
SCREENSHOTS_ENV = "LIBRARY_UPDATE_SCREENSHOTS"
DOC_SCREENSHOTS = REPO / "docs" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LIBRARY_FILES = [
    "Federal Register 2020-17221 - Airworthiness Directives; The Boeing Company.pdf",
    "Carroll - Alice's Adventures in Wonderland.epub",
]
PIPELINE_ASSETS = ["extracted_text", "chunks", "embeddings", "lexeme_df"]
# the probe's flags: without the background-networking ones Chromium's
# connections are refused by this machine's closed network at every start
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
START_TIMEOUT = 240.0

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(),
                       reason="Chromium is not installed (Debian: `make system-deps` installs chromium "
                              "chromium-driver); the UI browser test needs /usr/bin/chromium"),
    pytest.mark.skipif(sync_playwright is None,
                       reason="playwright is not installed (pip install -e '.[test]')"),
]


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _stop_group(proc: subprocess.Popen) -> int | None:
    """SIGINT to the group (Ctrl-C), then SIGTERM, then SIGKILL — as up.py stops its children."""
    for sig, wait in ((signal.SIGINT, 90.0), (signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.returncode


@pytest.fixture(scope="module")
def ui_url():
    if os.environ.get("LIBRARY_UI_TEST_URL"):
        yield os.environ["LIBRARY_UI_TEST_URL"].rstrip("/")
        return
    # outside pytest's basetemp (see conftest.pg_home): Postgres runs as another user
    home = Path(tempfile.mkdtemp(prefix="library-ui-test-"))
    home.chmod(0o755)
    library = home / "library"
    library.mkdir()
    for name in LIBRARY_FILES:
        shutil.copy2(REPO / "examples" / "library" / name, library / name)
    port, mcp_port = free_port(), free_port()
    env = dict(os.environ, LIBRARY_HOME=str(home), LIBRARY_DIR=str(library), HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    for key in ("DAGSTER_HOME", "LIBRARY_DB_DSN", "LIBRARY_DAGSTER_DSN"):
        env.pop(key, None)
    out = (home / "up.out").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "library_pipeline.cli.main", "up", "--port", str(port),
                             "--mcp-port", str(mcp_port)], cwd=REPO, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _http_ok(f"{url}/server_info"):
            if proc.poll() is not None:
                pytest.fail(f"`library up` exited with {proc.returncode}:\n"
                            + (home / "up.out").read_text(errors="replace")[-4000:])
            if time.monotonic() > deadline:
                pytest.fail(f"Dagster webserver not up after {START_TIMEOUT:.0f} s:\n"
                            + (home / "up.out").read_text(errors="replace")[-4000:])
            time.sleep(1.0)
        yield url
    finally:
        code = _stop_group(proc)
        out.close()
        log = (home / "up.out").read_text(errors="replace")
        postmaster_left = (home / "pgdata" / "postmaster.pid").exists()
        shutil.rmtree(home, ignore_errors=True)
    # clean shutdown, as a user's Ctrl-C: exit code 0 and the embedded Postgres stopped
    assert code == 0, f"`library up` exited with {code} on SIGINT:\n{log[-3000:]}"
    assert not postmaster_left, "the embedded Postgres outlived `library up`"


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    if os.environ.get(SCREENSHOTS_ENV):
        DOC_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return DOC_SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def page(ui_url, screenshots):
    profile = tempfile.mkdtemp(prefix="library-ui-chromium-")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 900})
        context.set_default_timeout(60_000)
        expect.set_options(timeout=60_000)
        # The webserver's first-visit "Join the Dagster community" dialog opens one second
        # after load (CommunityNux.tsx in dagster-webserver) and covers the page; on a slow
        # machine that second fell after the page settled, and the dialog swallowed a click
        # 60 s long. The dialog stays closed when the browser remembers a dismissal, and a
        # locator handler dismisses it should it open anyway.
        context.add_init_script("window.localStorage.setItem('communityNux', '\"1\"')")
        page = context.new_page()
        page.add_locator_handler(page.get_by_role("button", name="Skip"),
                                 lambda skip: skip.click())
        page.base_url = ui_url
        page.screenshots = screenshots
        try:
            yield page
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def _open(page, path: str) -> None:
    page.goto(page.base_url + path)
    page.wait_for_load_state("networkidle")


def _shot(page, name: str) -> None:
    page.wait_for_timeout(800)  # let the graph layout / charts settle
    page.screenshot(path=str(page.screenshots / name))


def test_asset_graph_lists_the_pipeline(page):
    # with several groups the global lineage draws each group as a box
    _open(page, "/asset-groups")
    expect(page.get_by_text("Global asset lineage")).to_be_visible()
    for group in ("ingest", "enrich", "memory", "vault", "ops"):
        expect(page.get_by_text(group, exact=True).first).to_be_visible()
    _shot(page, "asset-graph-groups.png")
    # expanding a group's box (its unfold icon) draws its assets; the boxes are laid out
    # in an order of the UI's choosing (ops came first once enrich and vault existed), so
    # expand one, then point the URL's `expanded` group at ingest
    page.get_by_role("img", name="unfold_more").first.click()
    page.wait_for_url(re.compile(r"expanded="))
    page.goto(re.sub(r"(expanded=[^&]*%3A)[^&]*", r"\1ingest", page.url))
    for name in PIPELINE_ASSETS:
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    _shot(page, "asset-graph.png")


def test_catalog_shows_groups(page):
    _open(page, "/assets")
    for name in PIPELINE_ASSETS:
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    # each asset row links to its group
    expect(page.locator('a[href*="ingest"]', has_text="ingest").first).to_be_visible()
    _shot(page, "asset-catalog.png")


def test_partitioned_asset_shows_one_partition_per_file(page):
    _open(page, "/assets/extracted_text?view=partitions")
    # both files were ingested by `library up` before the UI started
    expect(page.get_by_text(f"Materialized ({len(LIBRARY_FILES)})")).to_be_visible()
    expect(page.get_by_text("Failed (0)")).to_be_visible()
    for name in LIBRARY_FILES:
        expect(page.get_by_text(partition_key_for(name), exact=True).first).to_be_attached()
    # select one partition (what a click on its row does; the row's visible text is truncated)
    _open(page, "/assets/extracted_text?view=partitions&partition="
          + urllib.parse.quote(partition_key_for(LIBRARY_FILES[0])))
    expect(page.get_by_text("Latest materialization").first).to_be_visible()
    # the selected partition's latest materialization carries the asset's metadata
    expect(page.get_by_text("per_file", exact=True).first).to_be_visible()
    _shot(page, "asset-partitions.png")


def test_asset_check_runs_through_the_daemon(page):
    _open(page, "/assets/embeddings?view=checks&checkDetail=no_failed_files")
    expect(page.get_by_text("Files that could not be ingested, with their reasons.").first).to_be_visible()
    # Execute launches a run: queued by the QueuedRunCoordinator, dequeued by
    # the daemon, run in a subprocess; the page then shows the evaluation
    page.locator("button", has_text=re.compile(r"^\s*Execute\s*$")).first.click()
    expect(page.get_by_text("Passed").first).to_be_visible(timeout=150_000)
    _open(page, "/assets/embeddings?view=checks&checkDetail=no_failed_files")
    expect(page.get_by_text("Passed").first).to_be_visible()
    expect(page.get_by_text("failed_files").first).to_be_visible()
    _shot(page, "asset-check.png")


def _graphql(url: str, query: str) -> dict:
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"]


def test_backfill_of_all_partitions_is_one_run(page):
    """What an operator does after adding many files: Materialize… → All →
    Launch backfill. BackfillPolicy.single_run turns it into ONE range run."""
    _open(page, "/assets/extracted_text?view=partitions")
    page.get_by_role("button", name="Materialize…").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="All", exact=True).click()
    expect(dialog.get_by_text(f"{len(LIBRARY_FILES)} partitions").first).to_be_visible()
    expect(dialog.get_by_text("Backfills all partitions in a single run.")).to_be_visible()
    _shot(page, "backfill-launch.png")
    dialog.get_by_role("button", name="Launch backfill").click()
    toast = page.get_by_text(re.compile(r"Created backfill \w+"))
    expect(toast.first).to_be_visible()
    backfill_id = re.search(r"Created backfill (\w+)", toast.first.inner_text()).group(1)
    query = ('query { runsOrError(filter: {tags: [{key: "dagster/backfill", value: "%s"}]}) '
             '{ ... on Runs { count results { status tags { key value } } } } }' % backfill_id)
    deadline = time.monotonic() + 150
    while True:
        runs = _graphql(page.base_url, query)["runsOrError"]
        if runs["count"] and all(r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in runs["results"]):
            break
        assert time.monotonic() < deadline, f"backfill {backfill_id} did not finish: {runs}"
        time.sleep(2)
    assert runs["count"] == 1, runs
    (run,) = runs["results"]
    assert run["status"] == "SUCCESS", run
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert "dagster/asset_partition_range_start" in tags and "dagster/asset_partition_range_end" in tags
    _open(page, f"/runs/b/{backfill_id}")
    expect(page.get_by_text("Partition selection").first).to_be_visible()
    for name in LIBRARY_FILES:
        expect(page.get_by_text(partition_key_for(name), exact=True).first).to_be_visible()
    _shot(page, "backfill.png")


def test_instance_runs_with_the_run_lanes(page):
    _open(page, "/deployment/config")
    for text in ("QueuedRunCoordinator", "LibraryRunStorage", "key: library/lane", "value: enrich",
                 "value: maintenance"):
        expect(page.get_by_text(text).first).to_be_visible()
    _shot(page, "instance-config.png")
    _open(page, "/deployment/daemons")
    for daemon in ("Scheduler", "Sensors", "Run queue"):
        expect(page.get_by_text(daemon, exact=True).first).to_be_visible()
    expect(page.get_by_text("Running").first).to_be_visible()
    _shot(page, "daemons.png")


def test_automation_lists_the_sensors(page):
    _open(page, "/automation")
    for name in ("library_folder_sensor", "library_automation"):
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    _shot(page, "automation.png")
