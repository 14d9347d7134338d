"""Fixtures for the enrich tests: a local HTTP server speaking the Ollama chat
API and the OpenAI-compatible one (the one fake the project allows: no such
server can run here), and a
small real library built from the shared test documents."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dagster as dg
import pytest

from library_pipeline.ingest.extract import extract_file


@dataclass
class FakeOllama:
    """`answer(body) -> str` produces message.content; `fail_first` 5xx answers come first."""

    answer: Callable[[dict], str]
    fail_first: int = 0
    requests: list[dict] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeOllama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append({"path": self.path, "body": body})
                if self.path not in ("/api/chat", "/v1/chat/completions"):
                    return self._send(404, {"error": f"unknown path {self.path}"})
                if fake.fail_first > 0:
                    fake.fail_first -= 1
                    return self._send(503, {"error": "model is loading"})
                if body.get("model") != "fake-chat":
                    return self._send(404, {"error": f"model '{body.get('model')}' not found"})
                content = fake.answer(body)
                if self.path == "/v1/chat/completions":  # the OpenAI-compatible shape (llama.cpp, vLLM)
                    return self._send(200, {"id": "x", "object": "chat.completion", "model": body["model"],
                                            "choices": [{"index": 0, "finish_reason": "stop",
                                                         "message": {"role": "assistant", "content": content}}]})
                self._send(200, {"model": body["model"], "created_at": "2026-11-30T00:00:00Z",
                                 "message": {"role": "assistant", "content": content}, "done": True,
                                 "done_reason": "stop"})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture(scope="module")
def instance():
    """One ephemeral Dagster instance per test module (import it into the module)."""
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


def first_sentences(body: dict) -> str:
    """A deterministic 'summary': the first sentence of each passage in the prompt,
    which is what a real model is told to condense."""
    prompt = body["messages"][-1]["content"]
    passages = prompt.split("Passages:", 1)[-1].split("---")
    firsts = [re.split(r"(?<=[.!?])\s", p.strip(), maxsplit=1)[0] for p in passages if p.strip()]
    return "SUMMARY: " + " ".join(f for f in firsts[:3] if f and f != "Summary:")


def sherlock_excerpt(shared: Path, target: Path, sections: slice = slice(4, 7)) -> Path:
    """The first story of the real Sherlock Holmes EPUB (A Scandal in Bohemia, 3 parts)
    as a text file: a long real text (~120 passages) at a test's cost."""
    book = extract_file(shared / "documents" / "epub" / "pg1661-sherlock-holmes.epub")
    text = "The Adventures of Sherlock Holmes\n\n" + "\n\n".join(p.text for p in book.pages[sections])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def pushkin_excerpt(shared: Path, target: Path, chars: int = 30000) -> Path:
    text = (shared / "documents" / "text_ru" / "pushkin_kapitanskaya-dochka.txt").read_text(encoding="utf-8")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text[:chars].rsplit("\n", 1)[0], encoding="utf-8")
    return target


def llm_resource(db, backend: str, model: str, url: str, retries: int):
    """The text-generation resource of `db`'s library pointed at another backend."""
    import dataclasses

    from library_pipeline.defs.enrich.resources import GeneratorResource

    return GeneratorResource.from_settings(dataclasses.replace(
        db.settings, llm_backend=backend, llm_model=model, llm_url=url, llm_retries=retries))


def run_assets(db, instance, assets: list, keys: list[str], *, llm=None, run_config: dict | None = None):
    """Materialise enrich assets for a range of file partitions, as the nightly schedule does."""
    import dagster as dg

    from library_pipeline.defs.enrich.resources import GeneratorResource
    from library_pipeline.resources import EmbedderResource, LibraryDatabase

    resources = {"library_db": LibraryDatabase.from_settings(db.settings),
                 "embedder": EmbedderResource.from_settings(db.settings),
                 "llm": llm or GeneratorResource.from_settings(db.settings)}
    tags = {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
    return dg.materialize(assets, instance=instance, resources=resources, tags=tags,
                          run_config=run_config or {}, raise_on_error=False)


def partition_keys(db, relpaths: list[str]) -> list[str]:
    with db.connect() as conn:
        rows = dict(conn.execute("SELECT path, partition_key FROM documents WHERE path = ANY(%s)",
                                 (relpaths,)).fetchall())
    return [rows[p] for p in relpaths]
