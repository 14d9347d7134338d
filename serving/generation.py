"""Text generation backends for abstractive summaries and graph extraction.

Three backends, chosen by LIBRARY_LLM_BACKEND:
- `none` (default): no LLM. Callers use their offline paths (extractive
  summaries, NER + patterns); `load_generator` returns None so nobody can
  mistake "no model" for "a model that returned nothing".
- `ollama`: an Ollama server's /api/chat, JSON-schema output through `format`.
- `openai`: any OpenAI-compatible /v1/chat/completions (llama.cpp's server,
  vLLM), JSON-schema output through `response_format`.

Deterministic settings (temperature 0, a fixed seed): a rebuilt summary tree or
graph should differ only when its input did. Transport failures and 5xx answers
are retried with exponential backoff; a 4xx (unknown model, bad request) is not,
because retrying cannot fix it. When the server stays unreachable the error says
which backend, URL and model, so the operator knows what to start.

No Ollama server or usable instruct model can run on a machine without hub or
Ollama access, so this code is tested against a local HTTP server speaking the
Ollama API; nothing here downloads anything.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from serving.settings import DEFAULT_OLLAMA_URL

log = logging.getLogger(__name__)

BACKENDS = ("none", "ollama", "openai")
DEFAULT_URLS = {"ollama": DEFAULT_OLLAMA_URL, "openai": "http://127.0.0.1:8080"}


class GenerationError(RuntimeError):
    """The backend could not produce an answer (down, refused, or unparseable)."""


class TextGenerator(Protocol):
    name: str

    def generate(self, system: str, prompt: str, *, schema: dict | None = None,
                 max_tokens: int | None = None) -> str: ...

    def generate_json(self, system: str, prompt: str, schema: dict, *,
                      max_tokens: int | None = None) -> Any: ...


def parse_json_answer(text: str) -> Any:
    """A JSON answer, tolerating a Markdown fence or prose around one object:
    models without constrained decoding wrap their JSON more often than not."""
    text = text.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            try:
                return json.loads(text[start:end + 1])
            except json.JSONDecodeError:
                continue
    raise GenerationError(f"the model's answer is not JSON: {text[:200]!r}")


@dataclass
class _HTTPGenerator:
    model: str
    url: str
    timeout: float = 120.0
    retries: int = 3
    backoff: float = 0.5          # seconds before the first retry, doubled each time
    seed: int = 42
    api_key: str | None = None
    kind: str = field(default="", init=False)

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.model}"

    def _post(self, path: str, body: dict) -> dict:
        endpoint = self.url.rstrip("/") + path
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = httpx.post(endpoint, json=body, headers=headers, timeout=self.timeout)
            except httpx.HTTPError as exc:  # refused, reset, timed out
                last = exc
                log.warning("%s: %s (attempt %d/%d)", endpoint, exc, attempt + 1, self.retries + 1)
                continue
            if response.status_code >= 500:
                last = GenerationError(f"HTTP {response.status_code}: {response.text[:200]}")
                log.warning("%s: HTTP %d (attempt %d/%d)", endpoint, response.status_code, attempt + 1,
                            self.retries + 1)
                continue
            if response.status_code >= 400:
                raise GenerationError(f"{self.kind} backend at {self.url} refused the request for model "
                                      f"{self.model!r}: HTTP {response.status_code}: {response.text[:300]}")
            try:
                return response.json()
            except json.JSONDecodeError as exc:
                raise GenerationError(f"{self.kind} backend at {self.url} answered non-JSON: "
                                      f"{response.text[:200]!r}") from exc
        raise GenerationError(f"{self.kind} backend at {self.url} (model {self.model!r}) is unavailable after "
                              f"{self.retries + 1} attempts: {last}. Start the server, or set "
                              f"LIBRARY_LLM_BACKEND=none to use the offline extractive/NER paths.")

    def generate_json(self, system: str, prompt: str, schema: dict, *, max_tokens: int | None = None) -> Any:
        return parse_json_answer(self.generate(system, prompt, schema=schema, max_tokens=max_tokens))


@dataclass
class OllamaGenerator(_HTTPGenerator):
    """Ollama /api/chat, non-streaming. `format` takes a JSON schema (Ollama >= 0.5)."""

    kind: str = field(default="ollama", init=False)

    def generate(self, system: str, prompt: str, *, schema: dict | None = None,
                 max_tokens: int | None = None) -> str:
        options: dict[str, Any] = {"temperature": 0, "seed": self.seed}
        if max_tokens:
            options["num_predict"] = max_tokens
        body: dict[str, Any] = {
            "model": self.model, "stream": False, "options": options,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        }
        if schema is not None:
            body["format"] = schema
        answer = self._post("/api/chat", body)
        try:
            return answer["message"]["content"]
        except (KeyError, TypeError) as exc:
            raise GenerationError(f"ollama answer without message.content: {str(answer)[:200]}") from exc


@dataclass
class OpenAIGenerator(_HTTPGenerator):
    """OpenAI-compatible /v1/chat/completions; `url` is the server root (without /v1)."""

    kind: str = field(default="openai", init=False)

    def generate(self, system: str, prompt: str, *, schema: dict | None = None,
                 max_tokens: int | None = None) -> str:
        body: dict[str, Any] = {
            "model": self.model, "temperature": 0, "seed": self.seed,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        }
        if max_tokens:
            body["max_tokens"] = max_tokens
        if schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "answer", "schema": schema, "strict": True}}
        base = self.url.rstrip("/")
        answer = self._post("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions", body)
        try:
            return answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise GenerationError(f"openai answer without choices[0].message.content: {str(answer)[:200]}") from exc


def load_generator(backend: str = "none", model: str | None = None, url: str | None = None, *,
                   timeout: float = 120.0, retries: int = 3, api_key: str | None = None) -> TextGenerator | None:
    """The configured generator, or None for `none`. Raises ValueError for a
    misconfiguration (unknown backend, no model) rather than failing later."""
    backend = (backend or "none").strip().lower()
    if backend not in BACKENDS:
        raise ValueError(f"LIBRARY_LLM_BACKEND must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if backend == "none":
        return None
    if not model:
        raise ValueError(f"LIBRARY_LLM_BACKEND={backend} needs LIBRARY_LLM_MODEL (e.g. qwen3:8b)")
    cls = OllamaGenerator if backend == "ollama" else OpenAIGenerator
    return cls(model=model, url=url or DEFAULT_URLS[backend], timeout=timeout, retries=retries, api_key=api_key)
