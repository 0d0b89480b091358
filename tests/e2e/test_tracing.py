"""Traces through the HTTP server (issue 40): a gateway with ``telemetry.traces`` exports its
spans over OTLP to a real receiver on 127.0.0.1 (:mod:`tests.e2e.otlp_receiver`), for whole,
streamed, retried, fallen-back, cached and refused requests over the openai and anthropic SDKs;
a client's ``traceparent`` continues into the gateway's spans and the attempt span's reaches
the upstream (which records its headers); with masking and content capture on, no value the
masking plugin replaced is in any span; the gRPC exporter exports to a gRPC receiver.
"""

from __future__ import annotations

import io
import json
import os
import re
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import UPSTREAM_KEY, start_site
from tests.e2e.fake_openai import FakeOpenAI
from tests.e2e.masking_upstream import EchoUpstream
from tests.e2e.otlp_receiver import CLIENT, SERVER, STATUS_ERROR, OtlpReceiver, ReceivedSpan

CLIENT_KEY = "sk-cw-traced-" + "0123456789abcdef" * 2
LIMITED_KEY = "sk-cw-limited-" + "0123456789abcdef" * 2
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACE_ID = "x-crossway-trace-id"
CORPUS = Path(__file__).parents[1] / "proxy" / "pii" / "corpus"
MASKED_ENTITIES = ("email", "phone", "iban", "ip_address", "us_ssn", "credit_card", "secret")


def traced_config(upstream: str, receiver: str) -> str:
    return textwrap.dedent(
        f"""\
        server: {{access_log: false}}
        telemetry:
          traces:
            endpoint: "{receiver}"
            service_name: crossway-e2e
            resource_attributes: {{deployment.environment: test}}
            headers: {{x-otlp-key: otlp-backend-secret-0123456789}}
        providers:
          up:
            type: openai
            base_url: "{upstream}/v1"
            api_key: "{UPSTREAM_KEY}"
            timeouts: {{first_byte: 5, idle: 5, total: 15}}
          quiet:
            type: openai
            base_url: "{upstream}/v1"
            api_key: "{UPSTREAM_KEY}"
            propagate_trace: false
        models:
          chat: [{{target: up/gpt-test, prices: {{input: 10, output: 20}}}}]
          flaky: [{{target: up/fail-503}}]
          quiet: [{{target: quiet/gpt-test}}]
          cut: [{{target: up/cut-stream}}]
        auth:
          teams: {{platform: {{}}}}
          keys:
            - {{key: "{CLIENT_KEY}", alias: traced-client, team: platform}}
            - {{key: "{LIMITED_KEY}", alias: limited, rpm: 1}}
        plugins:
          - auth: {{}}
          - limits: {{}}
          - cache: {{}}
          - cost: {{}}
          - fallback: {{chains: {{flaky: [chat]}}}}
          - retry: {{retries: 1, backoff_base: 0, backoff_cap: 0}}
        """
    )


@pytest.fixture
def fast_batches() -> Iterator[None]:
    """Spans exported 50 ms after they end, not 5 s (the batch processor's environment knob)."""
    previous = os.environ.get("OTEL_BSP_SCHEDULE_DELAY")
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["OTEL_BSP_SCHEDULE_DELAY"]
        else:
            os.environ["OTEL_BSP_SCHEDULE_DELAY"] = previous


class Traced:
    """A gateway exporting to ``receiver``, in front of ``upstream``."""

    def __init__(self, url: str, receiver: OtlpReceiver, upstream: Any, logs: io.StringIO):
        self.url = url
        self.receiver = receiver
        self.upstream = upstream
        self.logs = logs
        self.clients: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []

    def openai(self, key: str = CLIENT_KEY) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)
        self.clients.append(client)
        return client

    def anthropic(self) -> anthropic.AsyncAnthropic:
        client = anthropic.AsyncAnthropic(base_url=self.url, api_key=CLIENT_KEY, max_retries=0)
        self.clients.append(client)
        return client


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[OtlpReceiver, str]]:
    otlp = OtlpReceiver()
    runner, url = await start_site(otlp.app())
    try:
        yield otlp, url
    finally:
        await runner.cleanup()


@pytest.fixture
async def traced(
    tmp_path: Path, fast_batches: None, receiver: tuple[OtlpReceiver, str]
) -> AsyncIterator[Traced]:
    otlp, receiver_url = receiver
    upstream = FakeOpenAI()
    upstream_runner, upstream_url = await start_site(upstream.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(traced_config(upstream_url, receiver_url))
    logs = io.StringIO()
    runner, url = await start_site(create_app(path, log_stream=logs))
    gateway = Traced(url, otlp, upstream, logs)
    try:
        yield gateway
    finally:
        for client in gateway.clients:
            await client.close()
        await runner.cleanup()
        await upstream_runner.cleanup()


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [span.name for span in spans])
    return found[0]


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [span for span in spans if span.name == name]


def has(*names: str, count: int = 1) -> Any:
    """A ``done`` predicate: every name is there ``count`` times or more, and the request span."""

    def done(spans: list[ReceivedSpan]) -> bool:
        return all(len(named(spans, name)) >= count for name in names) and any(
            span.kind == SERVER for span in spans
        )

    return done


def traceparent(header: str) -> tuple[str, str, str]:
    version, trace_id, parent_id, flags = header.split("-")
    assert version == "00"
    return trace_id, parent_id, flags


async def test_a_whole_answer_continues_the_callers_trace_into_the_upstream(
    traced: Traced,
) -> None:
    caller = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    raw = await traced.openai().chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=50,
        temperature=0.5,
        top_p=0.9,
        stop=["END"],
        seed=7,
        extra_headers={"traceparent": caller, "tracestate": "vendor=opaque"},
    )
    assert raw.parse().choices[0].message.content
    assert raw.headers[TRACE_ID] == CALLER_TRACE
    spans = await traced.receiver.wait_for(CALLER_TRACE, has("chat gpt-test"))

    request = one(spans, "POST /v1/chat/completions")
    assert request.kind == SERVER
    assert request.parent_id == CALLER_SPAN  # the caller's span is the gateway's parent
    assert request.attributes["http.route"] == "/v1/chat/completions"
    assert request.attributes["http.request.method"] == "POST"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["crossway.key_alias"] == "traced-client"
    assert request.attributes["crossway.team"] == "platform"
    assert request.attributes["crossway.cache"] == "miss"
    assert request.attributes["crossway.cost_usd"] > 0
    assert request.resource["service.name"] == "crossway-e2e"
    assert request.resource["deployment.environment"] == "test"
    assert request.schema_url == "https://opentelemetry.io/schemas/1.44.0"

    auth = one(spans, "crossway.auth")
    assert auth.parent_id == request.span_id
    assert auth.attributes["crossway.key_alias"] == "traced-client"
    plugins = {
        name: one(spans, f"crossway.plugin {name}")
        for name in ("auth", "limits", "cache", "cost", "fallback", "retry")
    }
    assert plugins["auth"].parent_id == request.span_id  # the chain's links nest, outer first
    assert plugins["limits"].parent_id == plugins["auth"].span_id
    assert plugins["cache"].attributes["crossway.cache"] == "miss"

    attempt = one(spans, "chat gpt-test")
    assert attempt.kind == CLIENT
    assert attempt.parent_id == plugins["retry"].span_id
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.request.max_tokens": 50,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.stop_sequences": ["END"],
        "gen_ai.request.seed": 7,
        "gen_ai.request.stream": False,
        "gen_ai.response.id": "chatcmpl-fake",
        "gen_ai.response.model": "gpt-test",
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.usage.cache_read.input_tokens": 4,
        "gen_ai.usage.cache_creation.input_tokens": 0,
        "gen_ai.usage.reasoning.output_tokens": 1,
        "server.address": "127.0.0.1",
        "crossway.provider": "up",
    }
    assert {key: attempt.attributes.get(key) for key in expected} == expected
    assert "gen_ai.system" not in attempt.attributes  # deprecated: gen_ai.provider.name
    assert "gen_ai.input.messages" not in attempt.attributes  # content is opt-in

    sent = traced.upstream.headers[-1]
    trace_id, parent_id, flags = traceparent(sent["traceparent"])
    assert (trace_id, parent_id, flags) == (CALLER_TRACE, attempt.span_id, "01")
    assert sent["tracestate"] == "vendor=opaque"
    exported = json.dumps([span._asdict() for span in traced.receiver.spans])
    assert UPSTREAM_KEY not in exported
    assert CLIENT_KEY not in exported
    assert "otlp-backend-secret" not in exported
    assert traced.receiver.headers[-1]["x-otlp-key"] == "otlp-backend-secret-0123456789"


async def test_a_streamed_answer_ends_its_attempt_with_the_stream(traced: Traced) -> None:
    async with traced.openai().chat.completions.with_streaming_response.create(
        model="chat",
        messages=[{"role": "user", "content": "Stream, please"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        trace_id = response.headers[TRACE_ID]
        text = "".join(
            [
                chunk.choices[0].delta.content or ""
                async for chunk in await response.parse()
                if chunk.choices
            ]
        )
    assert text
    spans = await traced.receiver.wait_for(trace_id, has("chat gpt-test"))
    request = one(spans, "POST /v1/chat/completions")
    assert request.parent_id == ""  # no caller's trace: a new one
    attempt = one(spans, "chat gpt-test")
    assert attempt.attributes["gen_ai.request.stream"] is True
    assert attempt.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert attempt.attributes["gen_ai.response.id"]
    assert attempt.attributes["gen_ai.response.model"] == "gpt-test"
    assert attempt.attributes["gen_ai.usage.output_tokens"] > 0
    assert traceparent(traced.upstream.headers[-1]["traceparent"])[1] == attempt.span_id


async def test_a_stream_cut_after_its_first_chunk_fails_its_attempt(traced: Traced) -> None:
    async with traced.openai().chat.completions.with_streaming_response.create(
        model="cut", messages=[{"role": "user", "content": "Start, then fail"}], stream=True
    ) as response:
        trace_id = response.headers[TRACE_ID]
        with pytest.raises(openai.APIError):
            async for _ in await response.parse():
                pass
    spans = await traced.receiver.wait_for(trace_id, has("chat cut-stream"))
    attempt = one(spans, "chat cut-stream")
    assert attempt.status == STATUS_ERROR
    assert attempt.attributes["error.type"]
    assert attempt.attributes["gen_ai.response.time_to_first_chunk"] > 0
    request = one(spans, "POST /v1/chat/completions")
    assert request.status == STATUS_ERROR
    assert request.attributes["error.type"] == attempt.attributes["error.type"]


async def test_retries_and_fallbacks_are_sibling_attempts(traced: Traced) -> None:
    raw = await traced.openai().chat.completions.with_raw_response.create(
        model="flaky", messages=[{"role": "user", "content": "Try hard"}]
    )
    assert raw.parse().choices[0].message.content
    trace_id = raw.headers[TRACE_ID]
    spans = await traced.receiver.wait_for(trace_id, has("chat fail-503", count=2))
    spans = await traced.receiver.wait_for(trace_id, has("chat gpt-test"))
    failed = named(spans, "chat fail-503")
    assert len(failed) == 2  # the attempt and its retry
    assert failed[0].parent_id == failed[1].parent_id  # siblings under the retry plugin
    for attempt in failed:
        assert attempt.status == STATUS_ERROR
        assert attempt.attributes["error.type"]
    served = one(spans, "chat gpt-test")
    retries = {span.span_id: span for span in named(spans, "crossway.plugin retry")}
    assert len(retries) == 2  # one per model the fallback tried
    fallback = one(spans, "crossway.plugin fallback")
    assert retries[failed[0].parent_id].parent_id == fallback.span_id
    assert retries[served.parent_id].parent_id == fallback.span_id
    request = one(spans, "POST /v1/chat/completions")
    assert request.attributes["crossway.attempts"] == 3
    assert request.status != STATUS_ERROR


async def test_a_cache_hit_has_no_attempt(traced: Traced) -> None:
    client = traced.openai()
    messages: Any = [{"role": "user", "content": "Cache me"}]
    await client.chat.completions.create(model="chat", messages=messages)
    raw = await client.chat.completions.with_raw_response.create(model="chat", messages=messages)
    trace_id = raw.headers[TRACE_ID]
    spans = await traced.receiver.wait_for(trace_id, has("crossway.plugin cache"))
    assert one(spans, "crossway.plugin cache").attributes["crossway.cache"] == "hit"
    assert one(spans, "POST /v1/chat/completions").attributes["crossway.cache"] == "hit"
    assert not [span for span in spans if span.kind == CLIENT]


async def test_refused_requests_carry_their_codes(traced: Traced) -> None:
    with pytest.raises(openai.AuthenticationError) as refused:
        await traced.openai(key="sk-cw-unknown-" + "0" * 32).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "Hi"}]
        )
    trace_id = refused.value.response.headers[TRACE_ID]
    spans = await traced.receiver.wait_for(trace_id, has("crossway.auth"))
    auth = one(spans, "crossway.auth")
    assert auth.status == STATUS_ERROR
    assert auth.attributes["error.type"]
    request = one(spans, "POST /v1/chat/completions")
    assert request.attributes["http.response.status_code"] == 401
    assert request.attributes["error.type"] == auth.attributes["error.type"]
    assert request.status != STATUS_ERROR  # a 4xx is the client's: no error status on a server

    limited = traced.openai(key=LIMITED_KEY)
    await limited.chat.completions.create(model="chat", messages=[{"role": "user", "content": "1"}])
    with pytest.raises(openai.RateLimitError) as limit:
        await limited.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "2"}]
        )
    trace_id = limit.value.response.headers[TRACE_ID]
    spans = await traced.receiver.wait_for(trace_id, has("crossway.plugin limits"))
    limits = one(spans, "crossway.plugin limits")
    assert limits.status == STATUS_ERROR
    assert limits.attributes["error.type"]
    assert one(spans, "POST /v1/chat/completions").attributes["http.response.status_code"] == 429
    assert not [span for span in spans if span.kind == CLIENT]


async def test_the_anthropic_sdk_whole_and_streamed(traced: Traced) -> None:
    client = traced.anthropic()
    caller = f"00-{CALLER_TRACE[:-4]}beef-{CALLER_SPAN}-01"
    raw = await client.messages.with_raw_response.create(
        model="chat",
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": "Hello"}],
        extra_headers={"traceparent": caller},
    )
    assert (await raw.parse()).content
    trace_id = raw.headers[TRACE_ID]
    assert trace_id == CALLER_TRACE[:-4] + "beef"
    spans = await traced.receiver.wait_for(trace_id, has("chat gpt-test"))
    request = one(spans, "POST /v1/messages")
    assert request.parent_id == CALLER_SPAN
    attempt = one(spans, "chat gpt-test")
    assert attempt.attributes["gen_ai.request.max_tokens"] == 64
    assert traceparent(traced.upstream.headers[-1]["traceparent"])[:2] == (
        trace_id,
        attempt.span_id,
    )

    async with client.messages.stream(
        model="chat", max_tokens=64, messages=[{"role": "user", "content": "Stream"}]
    ) as stream:
        text = await stream.get_final_text()
        streamed_trace = stream.response.headers[TRACE_ID]
    assert text
    spans = await traced.receiver.wait_for(streamed_trace, has("chat gpt-test"))
    assert one(spans, "chat gpt-test").attributes["gen_ai.request.stream"] is True


async def test_a_provider_can_refuse_the_traceparent(traced: Traced) -> None:
    raw = await traced.openai().chat.completions.with_raw_response.create(
        model="quiet", messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers[TRACE_ID]
    assert "traceparent" not in traced.upstream.headers[-1]
    spans = await traced.receiver.wait_for(raw.headers[TRACE_ID], has("chat gpt-test"))
    assert one(spans, "chat gpt-test").attributes["crossway.provider"] == "quiet"


def corpus_values() -> list[tuple[str, str]]:
    """Every positive example of the masking corpus: its text and the values in it."""
    examples = []
    for entity in MASKED_ENTITIES:
        for line in (CORPUS / f"{entity}.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["positive"]:
                examples += [(record["text"], value) for _, value in record["spans"]]
    return examples


async def test_masked_values_never_reach_a_span(
    tmp_path: Path, fast_batches: None, receiver: tuple[OtlpReceiver, str]
) -> None:
    otlp, receiver_url = receiver
    upstream = EchoUpstream()
    upstream_runner, upstream_url = await start_site(upstream.app())
    entities = ", ".join(f"{entity}: mask" for entity in MASKED_ENTITIES)
    path = tmp_path / "gateway.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            server: {{access_log: false}}
            telemetry: {{traces: {{endpoint: "{receiver_url}/v1/traces", capture_content: true}}}}
            providers:
              openai: {{type: openai, base_url: "{upstream_url}/v1", api_key: "{UPSTREAM_KEY}"}}
            plugins:
              - masking: {{entities: {{{entities}}}}}
            """
        )
    )
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client", max_retries=0)
        examples = corpus_values()
        texts = sorted({text for text, _ in examples})
        trace_ids = []
        for index in range(0, len(texts), 20):  # a few examples a request: fewer requests
            batch = "\n".join(texts[index : index + 20])
            raw = await client.chat.completions.with_raw_response.create(
                model="openai/echo",
                messages=[
                    {"role": "system", "content": f"Context: {batch}"},
                    {"role": "user", "content": batch},
                ],
            )
            assert raw.parse().choices[0].message.content
            trace_ids.append(raw.headers[TRACE_ID])
        spans = []
        for trace_id in trace_ids:
            spans += await otlp.wait_for(trace_id, has("chat echo"))
        await client.close()
    finally:
        await runner.cleanup()
        await upstream_runner.cleanup()
    sent = json.dumps(upstream.requests, ensure_ascii=False)
    masked = {value for _, value in examples if value not in sent}
    assert len(masked) >= 0.9 * len({value for _, value in examples})  # the masking did mask
    attempts = [span for span in spans if span.name == "chat echo"]
    assert len(attempts) == len(trace_ids)
    for attempt in attempts:
        assert re.search(r"<[A-Z_]+_[0-9]+>", attempt.attributes["gen_ai.input.messages"])
        assert "gen_ai.system_instructions" in attempt.attributes
        assert "gen_ai.output.messages" in attempt.attributes
    recorded = json.dumps([span.attributes for span in spans], ensure_ascii=False)
    leaked = sorted(value for value in masked if value in recorded)
    assert not leaked


@asynccontextmanager
async def plain_gateway(
    tmp_path: Path, telemetry: str = ""
) -> AsyncIterator[tuple[openai.AsyncOpenAI, FakeOpenAI]]:
    """A gateway with one OpenAI-compatible upstream (alias ``chat``) and ``telemetry`` (a
    config line, or none), and an openai client of it."""
    upstream = FakeOpenAI()
    upstream_runner, upstream_url = await start_site(upstream.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(
        telemetry
        + f'providers:\n  up: {{type: openai, base_url: "{upstream_url}/v1",'
        + f' api_key: "{UPSTREAM_KEY}"}}\n'
        + "models:\n  chat: [{target: up/gpt-test}]\n"
    )
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client", max_retries=0)
    try:
        yield client, upstream
    finally:
        await client.close()
        await runner.cleanup()
        await upstream_runner.cleanup()


async def test_the_grpc_exporter_exports(tmp_path: Path, fast_batches: None) -> None:
    otlp = OtlpReceiver()
    server, port = await otlp.start_grpc()
    telemetry = f'telemetry: {{traces: {{endpoint: "http://127.0.0.1:{port}", protocol: grpc}}}}\n'
    try:
        async with plain_gateway(tmp_path, telemetry) as (client, _):
            raw = await client.chat.completions.with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "Hi"}]
            )
            spans = await otlp.wait_for(raw.headers[TRACE_ID], has("chat gpt-test"))
    finally:
        await server.stop(None)
    assert one(spans, "chat gpt-test").attributes["gen_ai.provider.name"] == "openai"


async def test_without_telemetry_there_is_no_trace(tmp_path: Path) -> None:
    async with plain_gateway(tmp_path) as (client, upstream):
        raw = await client.chat.completions.with_raw_response.create(
            model="chat",
            messages=[{"role": "user", "content": "Hi"}],
            extra_headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"},
        )
    assert TRACE_ID not in raw.headers
    assert "traceparent" not in upstream.headers[-1]  # not ours to forward


async def test_a_background_response_runs_in_the_trace_of_its_request(
    tmp_path: Path, fast_batches: None, receiver: tuple[OtlpReceiver, str]
) -> None:
    otlp, receiver_url = receiver
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f'telemetry: {{traces: {{endpoint: "{receiver_url}"}}}}\n'
        f'database: {{url: "sqlite:///{tmp_path / "crossway.db"}"}}\n'
        "providers:\n  mock: {type: mock}\n"
    )
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client", max_retries=0)
    try:
        raw = await client.responses.with_raw_response.create(
            model="mock/echo", input="one two three", background=True
        )
        trace_id = raw.headers[TRACE_ID]
        spans = await otlp.wait_for(trace_id, has("chat echo"))
    finally:
        await client.close()
        await runner.cleanup()
    request = one(spans, "POST /v1/responses")
    attempt = one(spans, "chat echo")
    assert attempt.trace_id == request.trace_id
    assert attempt.attributes["gen_ai.provider.name"] == "crossway.mock"
    assert "server.address" not in attempt.attributes  # an in-process provider
