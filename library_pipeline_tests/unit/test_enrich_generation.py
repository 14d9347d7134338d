"""The LLM backend client against a local server speaking the Ollama API."""

from __future__ import annotations

import socket

import pytest

from library_pipeline_tests.enrich_fixtures import FakeOllama
from serving.generation import GenerationError, OllamaGenerator, load_generator, parse_json_answer


@pytest.fixture()
def fake():
    server = FakeOllama(answer=lambda body: '{"entities": [{"name": "Holmes", "type": "person"}], "relations": []}')
    yield server.start()
    server.stop()


def test_ollama_request_is_deterministic_and_schema_constrained(fake):
    gen = load_generator("ollama", "fake-chat", fake.url)
    schema = {"type": "object", "properties": {"entities": {"type": "array"}}}
    answer = gen.generate_json("system text", "user text", schema)
    assert answer["entities"][0] == {"name": "Holmes", "type": "person"}
    body = fake.requests[-1]["body"]
    assert fake.requests[-1]["path"] == "/api/chat"
    assert body["stream"] is False
    assert body["options"]["temperature"] == 0 and isinstance(body["options"]["seed"], int)
    assert body["format"] == schema
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_retries_transient_errors_then_succeeds(fake):
    fake.fail_first = 2
    gen = OllamaGenerator(model="fake-chat", url=fake.url, retries=3, backoff=0.01)
    assert "Holmes" in gen.generate("s", "p")
    assert len(fake.requests) == 3


def test_unknown_model_is_not_retried(fake):
    gen = OllamaGenerator(model="no-such-model", url=fake.url, retries=3, backoff=0.01)
    with pytest.raises(GenerationError, match="no-such-model"):
        gen.generate("s", "p")
    assert len(fake.requests) == 1


def test_backend_down_gives_a_clear_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gen = OllamaGenerator(model="fake-chat", url=f"http://127.0.0.1:{port}", retries=1, backoff=0.01, timeout=2)
    with pytest.raises(GenerationError, match=r"unavailable after 2 attempts.*LIBRARY_LLM_BACKEND=none"):
        gen.generate("s", "p")


def test_configuration_errors_and_none_backend():
    assert load_generator("none") is None
    with pytest.raises(ValueError, match="LIBRARY_LLM_MODEL"):
        load_generator("ollama", None)
    with pytest.raises(ValueError, match="one of"):
        load_generator("gpt")


def test_json_answers_wrapped_in_prose_are_recovered():
    assert parse_json_answer('Here you go:\n```json\n{"a": 1}\n```') == {"a": 1}
    with pytest.raises(GenerationError, match="not JSON"):
        parse_json_answer("I cannot help with that.")


def test_openai_compatible_backend_uses_response_format(fake):
    gen = load_generator("openai", "fake-chat", fake.url + "/v1")
    schema = {"type": "object", "properties": {"entities": {"type": "array"}}}
    assert gen.generate_json("s", "p", schema)["entities"][0]["name"] == "Holmes"
    request = fake.requests[-1]
    assert request["path"] == "/v1/chat/completions"
    body = request["body"]
    assert body["temperature"] == 0 and isinstance(body["seed"], int)
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == schema
