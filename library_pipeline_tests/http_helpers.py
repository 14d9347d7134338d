"""A real `serving.mcp_server --http` process for the transport tests: a free
port, start-up awaited (the server loads MiniLM at start), stopped afterwards."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mcp_http_server(env: dict[str, str], log_path: Path, *, timeout: float = 120,
                    module: tuple[str, ...] = ("serving.mcp_server",)) -> Iterator[str]:
    """Runs the HTTP MCP server with `env` until the block ends; yields its URL.
    `module`: what `python -m` runs before `--http` (the bare server, or the
    `library serve` command: ("library_pipeline.cli.main", "serve"))."""
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", *module, "--http", "--port", str(port)],
                                env=env, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    assert proc.poll() is None, log_path.read_text()[-2000:]
                    assert time.monotonic() < deadline, "HTTP server did not start"
                    time.sleep(0.3)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
