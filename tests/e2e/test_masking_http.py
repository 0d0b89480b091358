"""The masking plugin through the HTTP server: the openai and anthropic SDKs, the Fabro route and
every other dialect. The upstream echoes what it was sent, so each test checks both sides: the
upstream never received a value, and the client got the value back (or not, for ``redact``)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from plugins.masking import MaskingConfig, MaskingPlugin
from proxy.pii.text import TextView
from proxy.runtime.plugins import PluginContext
from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.masking_upstream import EchoUpstream
from tests.proxy.dialects.adapters import load_adapters
from tests.proxy.dialects.adapters.gateway import post

EMAIL = "jane.doe@example.com"
PHONE = "+44 20 7946 0958"
CARD = "4111 1111 1111 1111"
SSN = "536-22-1042"
PROMPT = f"Write to {EMAIL} or call {PHONE}, employee EMP-004217, project Bluebird, SSN {SSN}."
SECRET_KEY = "sk-proj-" + "abc123DEF456ghi789JKL012mno345"  # split: secret scanners flag keys
ADAPTERS = load_adapters()


def config(upstream: str) -> str:
    return f"""
server: {{access_log: false}}
providers:
  openai:
    type: openai
    base_url: "{upstream}/v1"
    api_key: "sk-upstream-key-0123456789"
    timeouts: {{first_byte: 5, idle: 5, total: 15}}
  anthropic:
    type: anthropic
    base_url: "{upstream}"
    api_key: "anthropic-upstream-key"
    timeouts: {{first_byte: 5, idle: 15, total: 30}}
  mock: {{type: mock}}
plugins:
  - masking:
      entities: {{email: mask, phone: mask, credit_card: block, iban: mask, us_ssn: redact,
                  ip_address: redact, secret: block}}
      custom:
        - {{name: employee_id, pattern: "EMP-[0-9]{{6}}", action: mask}}
        - {{name: project, words: [bluebird, nightjar], action: redact}}
"""


class Gateway:
    def __init__(self, url: str, upstream: EchoUpstream, logs: io.StringIO) -> None:
        self.url = url
        self.upstream = upstream
        self.logs = logs

    def openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="client", max_retries=0)

    def anthropic(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.url, api_key="client", max_retries=0)

    def sent(self) -> str:
        """Everything the upstream received, as JSON text."""
        return json.dumps(self.upstream.requests, ensure_ascii=False)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    upstream = EchoUpstream()
    upstream_runner, upstream_url = await start_site(upstream.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(config(upstream_url))
    logs = io.StringIO()
    runner, url = await start_site(create_app(path, log_stream=logs))
    try:
        yield Gateway(url, upstream, logs)
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()


RESTORED = (
    f"Write to {EMAIL} or call {PHONE}, employee EMP-004217, project <PROJECT>, SSN <US_SSN>."
)


def assert_masked_upstream(gateway: Gateway) -> None:
    sent = gateway.sent()
    for value in (EMAIL, PHONE, "EMP-004217", "Bluebird", SSN):
        assert value not in sent
    assert "<EMAIL_1>" in sent
    assert "<PHONE_1>" in sent
    assert "<EMPLOYEE_ID_1>" in sent


async def test_openai_sdk_whole_and_streamed(gateway: Gateway) -> None:
    client = gateway.openai()
    messages: Any = [{"role": "user", "content": PROMPT}]
    whole = await client.chat.completions.create(model="openai/echo", messages=messages)
    assert whole.choices[0].message.content == RESTORED
    chunks = [
        chunk.choices[0].delta.content or ""
        async for chunk in await client.chat.completions.create(
            model="openai/echo", messages=messages, stream=True
        )
        if chunk.choices
    ]
    assert "".join(chunks) == RESTORED
    assert not any("<EM" in piece or "IL_1" in piece for piece in chunks)
    assert len(gateway.upstream.requests) == 2
    assert_masked_upstream(gateway)


async def test_openai_sdk_tool_arguments_are_restored_as_valid_json(gateway: Gateway) -> None:
    client = gateway.openai()
    tool: Any = {"type": "function", "function": {"name": "note", "parameters": {"type": "object"}}}
    text = f'Mail {EMAIL} "quoted" \\ back'
    messages: Any = [{"role": "user", "content": text}]
    whole = await client.chat.completions.create(
        model="openai/tool", messages=messages, tools=[tool]
    )
    calls = whole.choices[0].message.tool_calls
    assert calls is not None
    assert json.loads(calls[0].function.arguments) == {"note": text}  # type: ignore[union-attr]
    arguments = ""
    async for chunk in await client.chat.completions.create(
        model="openai/tool", messages=messages, tools=[tool], stream=True
    ):
        for fragment in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            arguments += fragment.function.arguments or ""  # type: ignore[union-attr]
    assert json.loads(arguments) == {"note": text}
    assert EMAIL not in gateway.sent()


async def test_block_answers_400_in_the_dialect_without_calling_the_upstream(
    gateway: Gateway,
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await gateway.openai().chat.completions.create(
            model="openai/echo", messages=[{"role": "user", "content": f"card {CARD}"}]
        )
    assert refused.value.code == "pii_blocked"
    assert CARD not in str(refused.value)
    with pytest.raises(anthropic.BadRequestError) as refused_anthropic:
        await gateway.anthropic().messages.create(
            model="openai/echo",
            max_tokens=10,
            messages=[{"role": "user", "content": f"my key is {SECRET_KEY}"}],
        )
    assert refused_anthropic.value.status_code == 400
    assert "secret" in str(refused_anthropic.value)
    assert SECRET_KEY not in str(refused_anthropic.value)
    assert gateway.upstream.requests == []
    assert SECRET_KEY not in gateway.logs.getvalue()


async def test_anthropic_sdk_any_provider_whole_and_streamed(gateway: Gateway) -> None:
    client = gateway.anthropic()
    messages: Any = [{"role": "user", "content": PROMPT}]
    whole = await client.messages.create(model="openai/echo", max_tokens=50, messages=messages)
    assert whole.content[0].text == RESTORED  # type: ignore[union-attr]
    streamed = ""
    async with client.messages.stream(
        model="openai/echo", max_tokens=50, messages=messages
    ) as stream:
        async for text in stream.text_stream:
            assert "<EM" not in text
            streamed += text
    assert streamed == RESTORED
    assert_masked_upstream(gateway)


async def test_anthropic_route_splits_of_litellm_22821(gateway: Gateway) -> None:
    """An SSE event, a UTF-8 character and a placeholder each split across network reads of an
    Anthropic upstream, relayed to an Anthropic client: nothing leaks, nothing is garbled."""
    text = f"Grüße an {EMAIL} ✓"
    seen = gateway.upstream.seen
    received = ""
    events = await gateway.anthropic().messages.create(
        model="anthropic/claude-echo",
        max_tokens=50,
        messages=[{"role": "user", "content": text}],
        stream=True,
    )
    async for event in events:
        if event.type == "message_start":
            seen[0].set()  # the first read reached the client: send the second
        if event.type == "content_block_delta":
            delta = event.delta.text  # type: ignore[union-attr]
            assert "<" not in delta
            received += delta
            seen[1].set()  # the second read reached the client: send the third
    assert received == text
    assert seen[0].is_set()
    assert seen[1].is_set()
    assert EMAIL not in gateway.sent()
    assert "Grüße an <EMAIL_1> ✓" in gateway.sent()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_fabro_route(gateway: Gateway, stream: bool) -> None:
    adapter = ADAPTERS["fabro"]
    path, body = adapter.request("openai/echo", PROMPT, stream=stream)
    answer = await post(gateway.url, path, body)
    assert answer.status == 200, answer.body
    outcome = adapter.read_stream(answer.body) if stream else adapter.read_response(answer.json())
    assert outcome.text == RESTORED
    assert_masked_upstream(gateway)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_every_dialect_restores(gateway: Gateway, dialect: str, stream: bool) -> None:
    adapter = ADAPTERS[dialect]
    path, body = adapter.request("openai/echo", PROMPT, stream=stream)
    answer = await post(gateway.url, path, body)
    assert answer.status == 200, answer.body
    outcome = adapter.read_stream(answer.body) if stream else adapter.read_response(answer.json())
    assert outcome.text.endswith(RESTORED)  # legacy completions may echo the prompt first
    assert_masked_upstream(gateway)


async def test_orq_per_request_pii_redaction(gateway: Gateway) -> None:
    body = {
        "model": "openai/echo",
        "prompt": "contact 10.1.2.3",
        "plugins": [{"id": "pii_redaction", "entities": ["IP_ADDRESS"], "threshold": 0.5}],
    }
    answer = await post(gateway.url, "/v2/router/completions", body)
    assert answer.status == 200, answer.body
    # ip_address is redact in the operator's config: the request cannot weaken it to mask.
    assert answer.json()["choices"][0]["text"] == "contact <IP_ADDRESS>"
    unknown = {**body, "plugins": [{"id": "pii_redaction", "entities": ["PERSON"]}]}
    refused = await post(gateway.url, "/v2/router/completions", unknown)
    assert refused.status == 400
    assert refused.json()["error"]["code"] == "pii_entity_unsupported"


async def test_detections_are_counted_and_logged_without_values(gateway: Gateway) -> None:
    await post(
        gateway.url,
        "/v1/chat/completions",
        {"model": "openai/echo", "messages": [{"role": "user", "content": PROMPT}]},
    )
    metrics = (await post_get(gateway.url, "/metrics")).decode()
    assert 'crossway_pii_detections_total{action="mask",entity="email"} 1.0' in metrics
    assert 'crossway_pii_detections_total{action="redact",entity="us_ssn"} 1.0' in metrics
    logs = gateway.logs.getvalue()
    assert '"event":"pii_detected"' in logs
    for value in (EMAIL, PHONE, SSN, "EMP-004217"):
        assert value not in logs
        assert value not in metrics


async def post_get(url: str, path: str) -> bytes:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url + path) as response:
        return await response.read()


async def test_masking_before_the_cache_shares_entries_between_customers(tmp_path: Path) -> None:
    """Two customers' prompts of the same shape mask to the same text: one upstream call, one
    cache entry, and each customer gets their own value back."""
    upstream = EchoUpstream()
    upstream_runner, upstream_url = await start_site(upstream.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(config(upstream_url) + "  - cache: {scope: global}\n")
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        answers = []
        for address in ("alice@example.com", "bob@example.org"):
            body = {
                "model": "openai/echo",
                "messages": [{"role": "user", "content": f"Mail {address}"}],
            }
            answer = await post(url, "/v1/chat/completions", body)
            assert answer.status == 200, answer.body
            answers.append(answer)
        assert [a.headers["x-crossway-cache"] for a in answers] == ["miss", "hit"]
        texts = [a.json()["choices"][0]["message"]["content"] for a in answers]
        assert texts == ["Mail alice@example.com", "Mail bob@example.org"]
        assert [r["messages"][-1]["content"] for r in upstream.requests] == ["Mail <EMAIL_1>"]
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()


def _broken_finder(view: TextView) -> list[tuple[int, int]]:
    raise RuntimeError("a detector bug")


class FailingMasking(MaskingPlugin):
    """The masking plugin with a broken e-mail detector, loaded by ``module:Class``."""

    def __init__(self, options: MaskingConfig, context: PluginContext) -> None:
        super().__init__(options, context, finders={"email": _broken_finder})


@pytest.mark.parametrize("on_error", ["block", "passthrough"])
async def test_a_detector_error_fails_closed_unless_passthrough(
    tmp_path: Path, on_error: str
) -> None:
    upstream = EchoUpstream()
    upstream_runner, upstream_url = await start_site(upstream.app())
    path = tmp_path / "gateway.yaml"
    chain = (
        f"plugins:\n  - plugin: {__name__}:FailingMasking\n"
        f"    options: {{entities: {{email: mask}}, on_error: {on_error}}}\n"
    )
    path.write_text(config(upstream_url).split("plugins:")[0] + chain)
    logs = io.StringIO()
    runner, url = await start_site(create_app(path, log_stream=logs))
    try:
        body = {"model": "openai/echo", "messages": [{"role": "user", "content": f"to {EMAIL}"}]}
        answer = await post(url, "/v1/chat/completions", body)
        if on_error == "block":
            assert answer.status == 500
            assert answer.json()["error"]["code"] == "pii_detection_failed"
            assert upstream.requests == []
        else:
            assert answer.status == 200
            assert upstream.requests[0]["messages"][-1]["content"] == f"to {EMAIL}"
        assert '"event":"pii_detection_failed"' in logs.getvalue()
        assert EMAIL not in logs.getvalue()
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
