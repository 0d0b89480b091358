"""The Anthropic and OpenAI SDKs on the routes beside the Messages API: ``count_tokens`` (exact
from an Anthropic upstream and from the mock, estimated otherwise), ``models.retrieve`` in
both SDKs' shapes, Anthropic-shaped 404s, and ``message_start`` carrying the input usage an
Anthropic upstream announced first. The upstreams are the Anthropic-format fake and the fake
OpenAI server, both real servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import FakeOpenAI
from tests.proxy.dialects.adapters.gateway import post, serve
from tests.proxy.providers.fakes.anthropic import COUNTED_TOKENS, KEY, AnthropicFake
from tests.schemas import validate_in

SPEC = "anthropic-count-tokens-models.openapi.json"
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HELLO = [{"role": "user", "content": "Hello, world"}]


class Gateway:
    def __init__(self, url: str, anthropic_fake: AnthropicFake, openai_fake: FakeOpenAI) -> None:
        self.url = url
        self.anthropic_fake = anthropic_fake
        self.openai_fake = openai_fake

    def anthropic(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.url, api_key="client", max_retries=0)

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="client", max_retries=0)


@pytest.fixture
async def gateway(tmp_path: Path, upstream: tuple[FakeOpenAI, str]) -> AsyncIterator[Gateway]:
    openai_fake, openai_url = upstream
    fake = AnthropicFake()
    runner, anthropic_url = await start_site(fake.app())
    config = f"""\
server: {{access_log: false}}
providers:
  claude: {{type: anthropic, base_url: "{anthropic_url}", api_key: "{KEY}"}}
  up: {{type: openai, base_url: "{openai_url}/v1", api_key: "{UPSTREAM_KEY}"}}
  mock: {{type: mock}}
models:
  sonnet: [{{target: up/gpt-test}}, {{target: claude/text}}]
"""
    try:
        async with serve(tmp_path, config) as url:
            yield Gateway(url, fake, openai_fake)
    finally:
        await runner.cleanup()


async def test_count_tokens_is_anthropics_own_count_for_an_anthropic_model(
    gateway: Gateway,
) -> None:
    raw = await gateway.anthropic().messages.with_raw_response.count_tokens(
        model="claude/text",
        system="Be brief.",
        messages=HELLO,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    counted = await raw.parse()
    assert counted.input_tokens == COUNTED_TOKENS
    validate_in(SPEC, "CountMessageTokensResponse", counted.to_dict())
    assert raw.headers["request-id"]
    sent = gateway.anthropic_fake.requests[-1]
    assert sent.path == "/v1/messages/count_tokens"
    assert sent.headers["x-api-key"] == KEY
    assert sent.body == {
        "model": "text",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello, world"}]}],
        "system": [{"type": "text", "text": "Be brief."}],
        "tools": [
            {
                "name": "get_weather",
                "input_schema": WEATHER["input_schema"],
                "description": "Weather for a city",
            }
        ],
    }


async def test_an_alias_is_counted_by_its_deployment_that_can_count(gateway: Gateway) -> None:
    counted = await gateway.anthropic().messages.count_tokens(model="sonnet", messages=HELLO)  # type: ignore[arg-type]
    assert counted.input_tokens == COUNTED_TOKENS


async def test_the_mock_counts_what_it_will_report(gateway: Gateway) -> None:
    client = gateway.anthropic()
    messages = [
        {"role": "user", "content": "one two three"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "four"},
    ]
    counted = await client.messages.count_tokens(model="mock/echo", messages=messages)  # type: ignore[arg-type]
    message = await client.messages.create(model="mock/echo", max_tokens=10, messages=messages)  # type: ignore[arg-type]
    assert counted.input_tokens == message.usage.input_tokens == 8


async def test_other_providers_get_the_documented_estimate(gateway: Gateway) -> None:
    counted = await gateway.anthropic().messages.count_tokens(
        model="up/gpt-test",
        system="Be brief.",
        messages=HELLO,  # type: ignore[arg-type]
    )
    # ceil((9 + 12 UTF-8 bytes) / 4) + 4 per message (system and user)
    assert counted.input_tokens == 6 + 8
    assert gateway.openai_fake.requests == [], "nothing was generated to count"


@pytest.mark.parametrize(
    ("model", "error", "status", "error_type"),
    [
        ("nowhere/x", anthropic.NotFoundError, 404, "not_found_error"),
        ("claude/fail-429", anthropic.RateLimitError, 429, "rate_limit_error"),
        ("claude/fail-auth", anthropic.InternalServerError, 502, "api_error"),
    ],
)
async def test_count_tokens_errors_are_anthropic_errors(
    gateway: Gateway,
    model: str,
    error: type[anthropic.APIStatusError],
    status: int,
    error_type: str,
) -> None:
    with pytest.raises(error) as info:
        await gateway.anthropic().messages.count_tokens(model=model, messages=HELLO)  # type: ignore[arg-type]
    assert info.value.status_code == status
    body: Any = info.value.body
    validate_in(SPEC, "ErrorResponse", body)
    assert body["error"]["type"] == error_type
    assert KEY not in str(body)
    if status == 429:
        assert info.value.response.headers["retry-after"] == "3"


async def test_a_bad_count_request_is_an_anthropic_400(gateway: Gateway) -> None:
    answer = await post(gateway.url, "/v1/messages/count_tokens", {"model": "mock/echo"})
    assert answer.status == 400
    validate_in(SPEC, "ErrorResponse", answer.json())
    assert "messages" in answer.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/messages/nothing/here", "/v1/messages/batches/b/nothing"])
async def test_unknown_anthropic_paths_are_anthropic_404s(gateway: Gateway, path: str) -> None:
    answer = await post(gateway.url, path, {"model": "mock/echo"})
    assert answer.status == 404
    validate_in(SPEC, "ErrorResponse", answer.json())
    assert answer.json()["error"]["type"] == "not_found_error"


async def test_models_retrieve_in_the_openai_sdk(gateway: Gateway) -> None:
    client = gateway.openai()
    for model_id, owner in [
        ("mock/echo", "mock"),
        ("sonnet", "crossway"),
        ("claude/text", "claude"),
    ]:
        model = await client.models.retrieve(model_id)
        assert (model.id, model.object, model.owned_by) == (model_id, "model", owner)
        validate_in("openai-chat.openapi.json", "Model", model.to_dict())
    with pytest.raises(openai.NotFoundError) as info:
        await client.models.retrieve("nowhere/x")
    body: Any = info.value.body
    assert body["code"] == "model_not_found"


async def test_models_retrieve_in_the_anthropic_sdk(gateway: Gateway) -> None:
    model = await gateway.anthropic().models.retrieve("claude/text")
    assert (model.id, model.type, model.display_name) == ("claude/text", "model", "claude/text")
    validate_in(SPEC, "ModelInfo", model.to_dict(mode="json"))
    with pytest.raises(anthropic.NotFoundError) as info:
        await gateway.anthropic().models.retrieve("nowhere/x")
    validate_in(SPEC, "ErrorResponse", info.value.body)  # type: ignore[arg-type]


async def test_message_start_carries_the_input_usage_an_anthropic_upstream_announced(
    gateway: Gateway,
) -> None:
    async with gateway.anthropic().messages.stream(
        model="claude/text",
        max_tokens=50,
        messages=HELLO,  # type: ignore[arg-type]
    ) as stream:
        events = [event async for event in stream]
    start = events[0]
    assert start.type == "message_start"
    usage = start.message.usage  # type: ignore[union-attr]
    assert (
        usage.input_tokens,
        usage.cache_read_input_tokens,
        usage.cache_creation_input_tokens,
    ) == (
        11,
        7,
        5,
    )
    assert start.message.id.startswith("msg_")  # type: ignore[union-attr]
    final = await stream.get_final_message()
    assert (final.usage.input_tokens, final.usage.output_tokens) == (11, 9)


async def test_a_count_names_its_request_once(gateway: Gateway) -> None:
    body = {"model": "mock/echo", "messages": HELLO}
    answer = await post(gateway.url, "/v1/messages/count_tokens", body)
    assert answer.headers["request-id"] == answer.headers["x-request-id"]
    failed = await post(gateway.url, "/v1/messages/count_tokens", {**body, "model": "nowhere/x"})
    assert (
        failed.json()["request_id"]
        == failed.headers["x-request-id"]
        == failed.headers["request-id"]
    )
