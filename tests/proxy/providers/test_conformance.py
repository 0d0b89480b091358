"""Provider conformance: every provider fake in ``FAKES``, through the gateway, with the openai SDK.

For each provider a real fake upstream (speaking that provider's wire format) and the gateway run
on 127.0.0.1; the official ``openai`` SDK is the client. Every test runs once per registered fake,
so adding a provider is adding a fake, not a test. What is checked: the answer, and the request
the provider received (through the fake's provider-neutral view), for plain text, a system
prompt, several turns, an image, a tool-call round trip, streamed text, streamed tool-call
arguments, usage in every canonical bucket, each upstream error class, and a stream that ends
mid-way.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from proxy.core.canonical import Usage
from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.proxy.providers.fakes import FAKES, ProviderFake, RequestView
from tests.proxy.providers.fakes.base import TOOL_ARGUMENTS, answer

PROVIDER = "up"
TIMEOUTS = {"connect": 2, "first_byte": 5, "idle": 5, "total": 10}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
    "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


class Gateway:
    """A running gateway in front of one fake upstream."""

    def __init__(self, url: str, fake: ProviderFake) -> None:
        self.url = url
        self.fake = fake

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="client-key", max_retries=0)

    def last_view(self) -> RequestView:
        assert self.fake.requests, "the fake upstream received no request"
        return self.fake.view(self.fake.requests[-1].body)

    async def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        async with aiohttp.ClientSession() as session, session.get(f"{self.url}/metrics") as r:
            text = await r.text()
        total = 0.0
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match is None or match["name"] != name:
                continue
            found = dict(_LABEL.findall(match["labels"]))
            if all(found.get(k) == v for k, v in labels.items()):
                total += float(match["value"])
        return total


@pytest.fixture(params=sorted(FAKES))
def fake(request: pytest.FixtureRequest) -> ProviderFake:
    chosen = FAKES[request.param]
    chosen.requests.clear()
    return chosen


@pytest.fixture
async def gateway(tmp_path: Path, fake: ProviderFake) -> AsyncIterator[Gateway]:
    upstream_runner, upstream_url = await start_site(fake.app())
    provider = dict(fake.config(upstream_url))
    provider.setdefault("timeouts", TIMEOUTS)
    config = {"server": {"access_log": False}, "providers": {PROVIDER: provider}}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        yield Gateway(url, fake)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()


def model(name: str) -> str:
    return f"{PROVIDER}/{name}"


def assert_usage(usage: Any, expected: Usage) -> None:
    """The OpenAI-shaped usage the client got matches the fake's buckets."""
    assert usage is not None
    assert usage.prompt_tokens == expected.prompt_tokens
    assert usage.completion_tokens == expected.completion_tokens
    assert usage.total_tokens == expected.total_tokens
    assert usage.prompt_tokens_details.cached_tokens == expected.cache_read
    assert usage.completion_tokens_details.reasoning_tokens == expected.reasoning


async def test_plain_text(gateway: Gateway) -> None:
    async with gateway.client() as client:
        completion = await client.chat.completions.create(
            model=model("text"), messages=[{"role": "user", "content": "Hi"}]
        )
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == answer(gateway.fake.type)
    assert choice.finish_reason == "stop"
    assert_usage(completion.usage, gateway.fake.expected_usage)
    view = gateway.last_view()
    assert view.system == ""
    assert [(t.role, t.kinds, t.text) for t in view.turns] == [("user", ("text",), "Hi")]


async def test_system_prompt(gateway: Gateway) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    async with gateway.client() as client:
        completion = await client.chat.completions.create(model=model("text"), messages=messages)
    assert completion.choices[0].message.content == answer(gateway.fake.type)
    view = gateway.last_view()
    assert view.system == "Be brief."
    assert [t.role for t in view.turns] == ["user"]
    assert "Be brief." not in view.turns[0].text


async def test_multi_turn(gateway: Gateway) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ]
    async with gateway.client() as client:
        completion = await client.chat.completions.create(model=model("text"), messages=messages)
    assert completion.choices[0].message.content == answer(gateway.fake.type)
    view = gateway.last_view()
    assert view.system == "Be brief."
    assert [(t.role, t.text) for t in view.turns] == [
        ("user", "Hi"),
        ("assistant", "Hello! How can I help?"),
        ("user", "Tell me a joke."),
    ]


async def test_image_input(gateway: Gateway) -> None:
    content: list[Any] = [
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": PIXEL}},
    ]
    async with gateway.client() as client:
        completion = await client.chat.completions.create(
            model=model("text"), messages=[{"role": "user", "content": content}]
        )
    assert completion.choices[0].message.content == answer(gateway.fake.type)
    (turn,) = gateway.last_view().turns
    assert turn.role == "user"
    assert turn.kinds == ("text", "image")
    assert turn.text == "What is in this image?"


async def test_tool_call_round_trip(gateway: Gateway) -> None:
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    async with gateway.client() as client:
        first = await client.chat.completions.create(
            model=model("text"), messages=messages, tools=TOOLS
        )
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        (tool_call,) = choice.message.tool_calls or []
        assert tool_call.type == "function"
        assert tool_call.id
        assert tool_call.function.name == "get_weather"
        assert json.loads(tool_call.function.arguments) == TOOL_ARGUMENTS
        assert gateway.last_view().tools == ("get_weather",)
        messages += [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tool_call.id, "content": "18C and sunny"},
        ]
        second = await client.chat.completions.create(
            model=model("text"), messages=messages, tools=TOOLS
        )
    assert second.choices[0].message.content == answer(gateway.fake.type)
    assert second.choices[0].finish_reason == "stop"
    turns = gateway.last_view().turns
    assert [t.kinds for t in turns[-2:]] == [("tool_call",), ("tool_result",)]
    assert turns[-2].role == "assistant"
    assert "18C and sunny" in turns[-1].text


async def test_streaming_text(gateway: Gateway) -> None:
    async with gateway.client() as client:
        stream = await client.chat.completions.create(
            model=model("text"),
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces: list[str] = []
        finish, usage, roles, models = None, None, set(), set()
        async for chunk in stream:
            usage = chunk.usage or usage
            models.add(chunk.model)
            for choice in chunk.choices:
                if choice.delta.role:
                    roles.add(choice.delta.role)
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
    assert "".join(pieces) == answer(gateway.fake.type)
    assert len(pieces) > 1, "the answer is streamed, not sent whole"
    assert roles == {"assistant"}
    assert finish == "stop"
    assert "" not in models, "every chunk names its model, even when the wire format does not"
    assert_usage(usage, gateway.fake.expected_usage)


async def test_streaming_tool_call_arguments(gateway: Gateway) -> None:
    async with gateway.client() as client:
        stream = await client.chat.completions.create(
            model=model("text"),
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=TOOLS,
            stream=True,
        )
        fragments: list[str] = []
        ids, names, finish = [], [], None
        async for chunk in stream:
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                for delta in choice.delta.tool_calls or []:
                    assert delta.index == 0
                    if delta.id:
                        ids.append(delta.id)
                    if delta.function and delta.function.name:
                        names.append(delta.function.name)
                    if delta.function and delta.function.arguments:
                        fragments.append(delta.function.arguments)
    assert len(ids) == 1
    assert names == ["get_weather"]
    assert json.loads("".join(fragments)) == TOOL_ARGUMENTS
    if gateway.fake.streams_tool_arguments:
        assert len(fragments) > 2, "argument fragments are forwarded as they arrive"
    assert finish == "tool_calls"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_usage_buckets(gateway: Gateway, stream: bool) -> None:
    async with gateway.client() as client:
        if stream:
            chunks = await client.chat.completions.create(
                model=model("text"), messages=[{"role": "user", "content": "Hi"}], stream=True
            )
            async for _ in chunks:
                pass
        else:
            await client.chat.completions.create(
                model=model("text"), messages=[{"role": "user", "content": "Hi"}]
            )
    expected = gateway.fake.expected_usage
    for kind in ("input", "cache_read", "cache_write", "output", "reasoning"):
        counted = await gateway.metric("crossway_tokens_total", provider=PROVIDER, kind=kind)
        assert counted == getattr(expected, kind), kind


ERRORS = [
    # model, client status, error kind (metric reason), OpenAI error type, code (None: any)
    ("fail-429", 429, "rate_limited", "rate_limit_error", None),
    ("fail-500", 502, "upstream_server", "api_error", None),
    ("fail-503", 503, "overloaded", "api_error", None),
    ("fail-auth", 502, "auth", "authentication_error", None),
    ("fail-context", 400, "context_window", "invalid_request_error", "context_length_exceeded"),
    ("fail-policy", 400, "content_policy", "invalid_request_error", "content_policy_violation"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("name", "status", "kind", "error_type", "code"), ERRORS, ids=[e[0] for e in ERRORS]
)
async def test_error_classes(
    gateway: Gateway,
    stream: bool,
    name: str,
    status: int,
    kind: str,
    error_type: str,
    code: str | None,
) -> None:
    async with gateway.client() as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model=model(name), messages=[{"role": "user", "content": "Hi"}], stream=stream
            )
    error = caught.value
    assert error.status_code == status
    assert error.type == error_type
    if code is not None:
        assert error.code == code
    if status == 429:
        assert error.response.headers["retry-after"] == "3"
    assert await gateway.metric("crossway_upstream_errors_total", provider=PROVIDER) == 1
    assert await gateway.metric("crossway_upstream_errors_total", reason=kind) == 1, "its kind"


async def collect_unfinished(stream: Any, pieces: list[str]) -> None:
    """Append the streamed text to ``pieces``; no chunk may say the answer finished."""
    async for chunk in stream:
        for choice in chunk.choices:
            assert choice.finish_reason is None, "a cut stream never finishes"
            pieces.append(choice.delta.content or "")


async def test_stream_cut_midway_is_an_in_band_error(gateway: Gateway) -> None:
    pieces: list[str] = []
    async with gateway.client() as client:
        stream = await client.chat.completions.create(
            model=model("cut-stream"), messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        with pytest.raises(openai.APIError) as caught:
            await collect_unfinished(stream, pieces)
    full = answer(gateway.fake.type)
    text = "".join(pieces)
    assert text
    assert full.startswith(text)
    assert text != full
    assert not isinstance(caught.value, openai.APIStatusError), "in-band, after a 200"
    assert await gateway.metric("crossway_upstream_errors_total", reason="connection") == 1


ODD_NUMBERS = (
    json.dumps(
        {
            "model": "up/text",
            "messages": [{"role": "user", "content": "Hi"}],
            "top_k": 2**70,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "n": {"type": "integer", "maximum": 2**70, "minimum": -(2**70)}
                            },
                        },
                    },
                }
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "s", "schema": {"type": "number", "maximum": 2**70}},
            },
            "vendor_option": ["HUGE", "-HUGE", 1e-300, 2**70],
        }
    )
    .replace('"-HUGE"', "-1e400")
    .replace('"HUGE"', "1e400")
)  # beyond a double, as written


async def test_numbers_beyond_64_bits_or_a_double_never_make_a_5xx(gateway: Gateway) -> None:
    """Each provider builds its request from such a call and answers: integers
    of any size in tool schemas, the response format and pass-through fields, 1e400 written in
    the JSON text of a pass-through field (kept as written; in a field the gateway decodes, such
    as a tool schema, it is a 400 naming the field)."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway.url}/v1/chat/completions",
            data=ODD_NUMBERS.encode(),
            headers={"content-type": "application/json"},
        ) as response,
    ):
        body = await response.json()
    assert response.status == 200, body
