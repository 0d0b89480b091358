"""Fabro completions (``POST /api/v1/completions``) end to end: a raw HTTP client against the
gateway, in front of the fake OpenAI upstream and the mock provider."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from proxy.dialects.fabro_replies import FabroStreamEncoder
from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.dialect_gateway import dialect_config
from tests.e2e.fake_openai import ANSWER, FakeOpenAI
from tests.proxy.dialects.adapters import ToolCallOut, sse_events
from tests.proxy.dialects.adapters.fabro import ADAPTER
from tests.proxy.dialects.adapters.gateway import Answer, post, serve
from tests.schemas import validate_in

SPEC = "fabro-completions.openapi.json"
PATH = "/api/v1/completions"
FAKE_USAGE = {
    "input_tokens": 6,
    "output_tokens": 4,
    "reasoning_tokens": 1,
    "cache_read_tokens": 4,
    "cache_write_tokens": 0,
}
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    },
}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"kind": "text", "data": text}]}


class Gateway:
    """A running gateway and the fake upstream behind it."""

    def __init__(self, url: str, upstream: FakeOpenAI) -> None:
        self.url = url
        self.upstream = upstream

    async def post(self, body: dict[str, Any] | bytes, path: str = PATH) -> Answer:
        return await post(self.url, path, body)


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Gateway]:
    fake, upstream_url = upstream
    async with serve(tmp_path, dialect_config(upstream_url)) as url:
        yield Gateway(url, fake)


def stream_events(answer: Answer) -> list[dict[str, Any]]:
    assert answer.status == 200, answer.body
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    return [json.loads(e.data) for e in sse_events(answer.body) if e.event == "stream_event"]


async def test_streams_by_default_through_the_default_model(gateway: Gateway) -> None:
    answer = await gateway.post({"messages": [user("Hi")]})
    outcome = ADAPTER.read_stream(answer.body)
    assert outcome.text == ANSWER
    assert b"[DONE]" not in answer.body
    assert answer.headers["x-crossway-model"] == "up/gpt-test"
    finish = stream_events(answer)[-1]
    assert finish["type"] == "finish"
    assert finish["finish_reason"] == "stop"
    assert finish["usage"] == FAKE_USAGE
    assert finish["response"]["provider"] == "up"
    assert finish["response"]["model"] == "gpt-test"
    sent = gateway.upstream.requests[-1]
    assert sent["model"] == "gpt-test"
    assert sent["stream"] is True
    assert sent["messages"] == [{"role": "user", "content": "Hi"}]


async def test_whole_response_with_parameters(gateway: Gateway) -> None:
    answer = await gateway.post(
        {
            "model": "chat",
            "stream": False,
            "system": "Be brief.",
            "messages": [user("Hi")],
            "temperature": 0.2,
            "top_p": 0.5,
            "max_tokens": 50,
            "stop_sequences": ["END"],
            "reasoning_effort": "max",
            "provider_options": {"seed": 3, "top_k": 5, "api_key": "sk-client-smuggled"},
        }
    )
    assert answer.status == 200, answer.body
    body = answer.json()
    validate_in(SPEC, "CompletionResponse", body)
    assert body["message"] == {"role": "assistant", "content": [{"kind": "text", "data": ANSWER}]}
    assert body["stop_reason"] == "end_turn"
    assert body["usage"] == FAKE_USAGE
    assert "cost_usd" not in body
    assert "cost_source" not in body
    sent = gateway.upstream.requests[-1]
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    expected = {"temperature": 0.2, "top_p": 0.5, "max_tokens": 50, "stop": ["END"]}
    assert {key: sent[key] for key in expected} == expected
    assert (sent["reasoning_effort"], sent["seed"], sent["top_k"]) == ("high", 3, 5)
    assert "api_key" not in sent
    assert gateway.upstream.headers[-1]["Authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_provider_pin_serves_that_providers_default_model(gateway: Gateway) -> None:
    answer = await gateway.post({"provider": "mock", "stream": False, "messages": [user("Hi")]})
    body = answer.json()
    assert (body["provider"], body["model"]) == ("mock", "echo")
    assert body["message"]["content"] == [{"kind": "text", "data": "Hi"}]
    assert answer.headers["x-crossway-provider"] == "mock"
    assert gateway.upstream.requests == []


async def test_without_default_models_the_first_ready_alias_serves(tmp_path: Path) -> None:
    config = """\
server: {access_log: false}
providers:
  keyless: {type: openai, api_key: ""}
  mock: {type: mock}
models:
  down: [{target: keyless/gpt-4o}]
  chat: [{target: mock/echo}]
"""
    body = {"stream": False, "messages": [user("Hi")]}
    async with serve(tmp_path, config) as url:
        answer = await post(url, PATH, body)
        pinned = await post(url, PATH, {**body, "provider": "keyless"})
    assert answer.status == 200, answer.body
    assert (answer.json()["provider"], answer.json()["model"]) == ("mock", "echo")
    assert answer.headers["x-crossway-model"] == "mock/echo"
    assert pinned.status == 400
    assert pinned.json()["errors"][0]["detail"].startswith("no model given")


@pytest.mark.parametrize("stream", [True, False])
async def test_tool_calls_from_the_mock(gateway: Gateway, stream: bool) -> None:
    answer = await gateway.post(
        {"model": "mock/tools", "stream": stream, "tools": [WEATHER], "messages": [user("Paris")]}
    )
    assert answer.status == 200, answer.body
    outcome = ADAPTER.read_stream(answer.body) if stream else ADAPTER.read_response(answer.json())
    assert outcome.tool_calls == (ToolCallOut("get_weather", {"city": "Paris", "days": 1}),)
    assert outcome.text == ""


async def test_tool_call_round_trip_reaches_the_upstream_in_openai_shape(gateway: Gateway) -> None:
    first = await gateway.post(
        {
            "model": "chat",
            "stream": False,
            "tools": [WEATHER],
            "tool_choice": {"mode": "named", "tool_name": "get_weather"},
            "messages": [user("Weather in Paris?")],
        }
    )
    body = first.json()
    assert body["stop_reason"] == "tool_calls"
    (part,) = body["message"]["content"]
    assert part == {
        "kind": "tool_call",
        "data": {
            "id": "call_fake_1",
            "name": "get_weather",
            "type": "function",
            "arguments": {"city": "Paris", "days": 3},
        },
    }
    assert gateway.upstream.requests[-1]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    second = await gateway.post(
        {
            "model": "chat",
            "stream": False,
            "messages": [
                user("Weather in Paris?"),
                body["message"],
                {
                    "role": "tool",
                    "content": [
                        {
                            "kind": "tool_result",
                            "data": {"tool_call_id": "call_fake_1", "content": {"c": 18}},
                        }
                    ],
                },
            ],
        }
    )
    assert second.json()["message"]["content"] == [{"kind": "text", "data": ANSWER}]
    assert gateway.upstream.requests[-1]["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_fake_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris","days":3}'},
                }
            ],
        },
        {"role": "tool", "content": '{"c":18}', "tool_call_id": "call_fake_1"},
    ]


async def test_schema_returns_the_parsed_output_and_never_streams(gateway: Gateway) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    answer = await gateway.post(
        {"model": "mock/echo", "schema": schema, "messages": [user('{"city": "Paris"}')]}
    )
    assert answer.headers["Content-Type"].startswith("application/json")
    body = answer.json()
    validate_in(SPEC, "CompletionResponse", body)
    assert body["output"] == {"city": "Paris"}

    answer = await gateway.post({"model": "chat", "schema": schema, "messages": [user("Hi")]})
    assert "output" not in answer.json(), "the fake upstream's answer is not JSON"
    sent = gateway.upstream.requests[-1]
    assert sent.get("stream", False) is False
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({}, 400, "invalid_request", "messages"),
        ({"messages": [user("Hi")], "provider": "nowhere"}, 400, "invalid_request", "provider"),
        ({"messages": [user("Hi")], "model": "nope/x"}, 404, "model_not_found", "model"),
        ({"messages": [user("Hi")], "model": "up/fail-500"}, 502, "upstream_error", None),
        ({"messages": [user("Hi")], "model": "up/fail-503"}, 502, "upstream_overloaded", None),
    ],
)
async def test_errors_carry_the_request_id(
    gateway: Gateway, body: dict[str, Any], status: int, code: str, field: str | None
) -> None:
    answer = await gateway.post(body)
    assert answer.status == status
    error = answer.json()
    detail = ADAPTER.read_error(status, error)
    assert error["request_id"] == answer.headers["x-request-id"]
    assert error["errors"][0]["code"] == code
    assert UPSTREAM_KEY not in detail
    if field is not None:
        assert field in detail


async def test_failure_mid_stream_is_an_error_event_with_no_finish(gateway: Gateway) -> None:
    answer = await gateway.post({"model": "mock/cut-3", "messages": [user("a b c d e")]})
    outcome = ADAPTER.read_stream(answer.body)
    assert outcome.error == "mock upstream cut the stream"
    events = stream_events(answer)
    assert events[-1]["error"]["status"] == "502"
    assert "finish" not in [e["type"] for e in events]


async def test_idle_stream_gets_keepalive_pings(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FabroStreamEncoder, "keepalive", 0.02)
    answer = await gateway.post({"model": "paced/echo", "messages": [user("one two three")]})
    pings = [e for e in sse_events(answer.body) if e.event == "ping"]
    assert pings
    assert {json.loads(e.data)["type"] for e in pings} == {"ping"}
    assert ADAPTER.read_stream(answer.body).text == "one two three"
