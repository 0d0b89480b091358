"""proxy/providers/openai/provider.py: pure translation, table-driven from
tests/fixtures/openai/*.json.

Fixture kinds: ``request`` (a canonical call in, the upstream JSON body out), ``response`` (an
upstream body in, the canonical Response out, as ``msgspec.to_builtins`` gives it) and ``event``
(one stream event's data in, the canonical Chunk out).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from multidict import CIMultiDict

from proxy.core.canonical import Call, Message, Params, Usage
from proxy.core.errors import (
    ContentPolicyViolation,
    ContextWindowExceeded,
    UpstreamAuthError,
    UpstreamClientError,
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRateLimited,
)
from proxy.providers.base import HttpProvider, StreamEnd
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "openai"
KEY = "sk-test-provider-key-0123456789"


def load_fixtures(kind: str) -> list[Any]:
    cases = []
    for path in sorted(FIXTURES.glob("*.json")):
        fixture = json.loads(path.read_text(encoding="utf-8"))
        if fixture["kind"] == kind:
            cases.append(pytest.param(fixture, id=path.stem))
    assert cases, f"no {kind} fixtures in {FIXTURES}"
    return cases


ONE_CHOICE = {"index": 0, "message": {"role": "assistant", "content": "x"}}


def provider(**config: Any) -> OpenAIProvider:
    config.setdefault("api_key", KEY)
    return OpenAIProvider("openai", OpenAIConfig(**config))


def call_from(spec: dict[str, Any]) -> Call:
    """A canonical call from a fixture's ``call`` object (``extra`` values become raw JSON)."""
    return Call(
        request_id="req-1",
        dialect="openai",
        model=spec["model"],
        messages=msgspec.convert(spec["messages"], list[Message]),
        stream=spec.get("stream", False),
        include_usage=spec.get("include_usage", False),
        params=msgspec.convert(spec.get("params", {}), Params),
        extra={k: msgspec.Raw(json.dumps(v).encode()) for k, v in spec.get("extra", {}).items()},
    )


def simple_call(**fields: Any) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content="hi")],
        **fields,
    )


def strict_json(body: bytes) -> dict[str, Any]:
    """Parse ``body``, failing on duplicate keys (which parsers resolve inconsistently)."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        duplicated = sorted({key for key in keys if keys.count(key) > 1})
        assert not duplicated, f"duplicate JSON keys {duplicated} in {body!r}"
        return dict(pairs)

    return json.loads(body, object_pairs_hook=no_duplicates)


def test_is_an_http_provider():
    assert isinstance(provider(), HttpProvider)


# ---------------------------------------------------------------------------------------------
# Table-driven translation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", load_fixtures("request"))
def test_request_translation(fixture: dict[str, Any]):
    request = provider().build_request(call_from(fixture["call"]), fixture["upstream_model"])
    assert strict_json(request.body) == fixture["expected_body"]
    assert request.url == "https://api.openai.com/v1/chat/completions"


@pytest.mark.parametrize("fixture", load_fixtures("response"))
def test_response_translation(fixture: dict[str, Any]):
    body = json.dumps(fixture["body"]).encode()
    response = provider().parse_response(body, fixture["requested_model"])
    assert response.raw in (None, body)  # a complete body is kept whole, for OpenAI clients
    response.raw = response.raw_fingerprint = None
    assert msgspec.to_builtins(response) == fixture["expected"]


@pytest.mark.parametrize("fixture", load_fixtures("event"))
def test_event_translation(fixture: dict[str, Any]):
    data = json.dumps(fixture["data"]).encode()
    chunk = provider().parse_event("", data)
    assert chunk is not None
    assert chunk.raw in (None, data), "raw, when kept, is the upstream's own JSON"
    chunk.raw = None
    assert msgspec.to_builtins(chunk) == fixture["expected"]


# ---------------------------------------------------------------------------------------------
# Usage normalisation
# ---------------------------------------------------------------------------------------------


def usage_of(usage: dict[str, Any]) -> Usage:
    body = {"id": "x", "choices": [ONE_CHOICE], "usage": usage}
    response = provider().parse_response(json.dumps(body).encode(), "m")
    assert response.usage is not None
    return response.usage


def test_usage_cached_and_reasoning_tokens_become_disjoint_buckets():
    usage = usage_of(
        {
            "prompt_tokens": 100,
            "completion_tokens": 50,
            "prompt_tokens_details": {"cached_tokens": 30},
            "completion_tokens_details": {"reasoning_tokens": 20},
        }
    )
    assert usage == Usage(input=70, cache_read=30, output=30, reasoning=20)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (100, 50, 150)


def test_usage_without_details():
    assert usage_of({"prompt_tokens": 9, "completion_tokens": 4}) == Usage(input=9, output=4)


def test_usage_with_null_counts():
    usage = usage_of(
        {
            "prompt_tokens": None,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": None},
            "completion_tokens_details": None,
        }
    )
    assert usage == Usage(output=3)


def test_openrouter_cost_becomes_cost_usd():
    usage = usage_of({"prompt_tokens": 1, "completion_tokens": 1, "cost": 0.0042})
    assert usage.cost_usd == pytest.approx(0.0042)
    assert usage_of({"prompt_tokens": 1}).cost_usd is None


def test_no_usage_is_none():
    body = json.dumps({"id": "x", "choices": [ONE_CHOICE]}).encode()
    response = provider().parse_response(body, "m")
    assert response.usage is None


def test_malformed_response_body():
    with pytest.raises(UpstreamError) as info:
        provider().parse_response(b"<html>oops</html>", "m")
    assert info.value.provider == "openai"
    with pytest.raises(UpstreamError):
        provider().parse_response(b'{"id": "x"}', "m")  # choices are required


# ---------------------------------------------------------------------------------------------
# Requests
# ---------------------------------------------------------------------------------------------


def test_unknown_request_fields_pass_through_verbatim():
    raw = b'{"b":  [1, 2.50, "x"],   "a":true}'  # odd spacing and number text are kept as sent
    call = simple_call(extra={"vendor_option": msgspec.Raw(raw)})
    body = provider().build_request(call, "gpt").body
    assert b'"vendor_option":' + raw in body
    assert strict_json(body)["vendor_option"] == {"b": [1, 2.5, "x"], "a": True}


@pytest.mark.parametrize(("include_usage", "stream_usage"), [(False, True), (True, True)])
def test_stream_options_include_usage_is_forced_on_streams(include_usage, stream_usage):
    call = simple_call(stream=True, include_usage=include_usage)
    body = strict_json(provider(stream_usage=stream_usage).build_request(call, "gpt").body)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_stream_usage_off_still_honours_the_client():
    off = provider(stream_usage=False)
    body = strict_json(off.build_request(simple_call(stream=True), "gpt").body)
    assert "stream_options" not in body
    body = strict_json(off.build_request(simple_call(stream=True, include_usage=True), "g").body)
    assert body["stream_options"] == {"include_usage": True}


def test_non_stream_request_has_no_stream_options():
    body = strict_json(provider().build_request(simple_call(), "gpt").body)
    assert "stream" not in body
    assert "stream_options" not in body


def test_build_request_headers():
    request = provider().build_request(simple_call(), "gpt")
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"


def test_build_request_with_configured_headers_and_url():
    configured = provider(
        base_url="http://127.0.0.1:8000/v1/", headers={"x-org": "acme", "HTTP-Referer": "x"}
    )
    request = configured.build_request(simple_call(), "gpt")
    assert request.url == "http://127.0.0.1:8000/v1/chat/completions"
    assert request.headers["x-org"] == "acme"
    assert request.headers["HTTP-Referer"] == "x"
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_keyless_provider_sends_no_authorization():
    request = provider(api_key=None).build_request(simple_call(), "gpt")
    assert "authorization" not in {name.lower() for name in request.headers}


def test_plugin_headers_are_sent_and_build_request_does_not_share_header_dicts():
    p = provider()
    first = p.build_request(simple_call(upstream_headers={"x-trace-id": "t"}), "gpt")
    second = p.build_request(simple_call(), "gpt")
    assert first.headers["x-trace-id"] == "t"
    assert "x-trace-id" not in second.headers


# ---------------------------------------------------------------------------------------------
# Readiness and secrets
# ---------------------------------------------------------------------------------------------


def test_readiness():
    assert provider(api_key=None).ready is True  # a keyless upstream (vLLM, Ollama)
    assert provider(api_key="").ready is False  # a key is needed and missing
    assert provider(api_key=KEY).ready is True


def test_secrets():
    assert provider().secrets == (KEY,)
    assert provider(api_key=None).secrets == ()
    assert provider(api_key="").secrets == ()


# ---------------------------------------------------------------------------------------------
# Stream events
# ---------------------------------------------------------------------------------------------


def test_done_raises_stream_end():
    with pytest.raises(StreamEnd):
        provider().parse_event("", b"[DONE]")


def test_in_band_error_chunk_raises_upstream_error():
    data = b'{"error": {"message": "overloaded mid-stream", "type": "server_error", "code": 500}}'
    with pytest.raises(UpstreamError) as info:
        provider().parse_event("", data)
    assert "overloaded mid-stream" in info.value.message
    assert info.value.provider == "openai"


def test_in_band_context_error_is_classified():
    data = b'{"error": {"message": "too long", "code": "context_length_exceeded"}}'
    with pytest.raises(ContextWindowExceeded):
        provider().parse_event("", data)


def test_malformed_event_raises_upstream_error():
    with pytest.raises(UpstreamError):
        provider().parse_event("", b"{not json")


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def error_body(message: str, code: Any = None, type_: str = "invalid_request_error") -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "code": code}}).encode()


def test_context_length_exceeded():
    body = error_body(
        "This model's maximum context length is 8192 tokens", "context_length_exceeded"
    )
    error = provider().parse_error(400, CIMultiDict(), body)
    assert isinstance(error, ContextWindowExceeded)
    assert error.status == 400
    assert error.upstream_status == 400
    assert error.code == "context_length_exceeded"
    assert error.kind == "context_window"
    assert "maximum context length" in error.message


def test_content_policy_violation():
    error = provider().parse_error(400, CIMultiDict(), error_body("no", "content_policy_violation"))
    assert isinstance(error, ContentPolicyViolation)
    assert error.status == 400
    assert error.kind == "content_policy"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"Retry-After-Ms": "250", "Retry-After": "9"}, 0.25),  # the precise one wins
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),  # dates are ignored
        ({}, None),
    ],
)
def test_rate_limit_with_retry_after(headers, expected):
    body = error_body("Rate limit reached", "rate_limit_exceeded", "requests")
    error = provider().parse_error(429, CIMultiDict(headers), body)
    assert isinstance(error, UpstreamRateLimited)
    assert error.status == 429
    assert error.retry_after == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("status", "cls", "client_status"),
    [
        (400, UpstreamClientError, 400),
        (401, UpstreamAuthError, 502),
        (404, UpstreamClientError, 404),
        (500, UpstreamError, 502),
        (503, UpstreamOverloaded, 503),
    ],
)
def test_status_classification(status, cls, client_status):
    error = provider().parse_error(status, CIMultiDict(), error_body("nope"))
    assert type(error) is cls
    assert error.status == client_status
    assert error.message == "nope"
    assert error.provider == "openai"


def test_non_json_error_body():
    body = b"  <html><body>502 Bad Gateway</body></html>\n"
    error = provider().parse_error(502, CIMultiDict(), body)
    assert type(error) is UpstreamError
    assert error.status == 502
    assert error.message == "<html><body>502 Bad Gateway</body></html>"


def test_long_non_json_error_body_is_truncated():
    error = provider().parse_error(500, CIMultiDict(), b"x" * 10_000)
    assert len(error.message) <= 1000


def test_empty_error_body_gets_a_message():
    error = provider().parse_error(500, CIMultiDict(), b"")
    assert error.message == "upstream answered HTTP 500"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": "plain string error"}', "plain string error"),
        (b'{"message": "top-level message"}', "top-level message"),
        (b'{"error": {"message": "numeric code", "code": 1234}}', "numeric code"),
        (b'"just a string"', '"just a string"'),
    ],
)
def test_other_error_body_shapes(body, message):
    error = provider().parse_error(400, CIMultiDict(), body)
    assert error.message == message


def test_client_reasoning_is_not_sent_upstream():
    provider = OpenAIProvider("up", OpenAIConfig(base_url="http://127.0.0.1:9/v1", api_key="k"))
    call = Call(
        request_id="r",
        dialect="anthropic",
        model="up/m",
        messages=[
            Message(role="user", content="Hi"),
            Message(role="assistant", content="Hello", reasoning_content="thinking..."),
        ],
    )
    body = json.loads(provider.build_request(call, "m").body)
    assert body["messages"][1] == {"role": "assistant", "content": "Hello"}
    assert call.messages[1].reasoning_content == "thinking...", "the call itself is unchanged"


def test_an_earlier_answers_citations_are_not_sent_upstream():
    provider = OpenAIProvider("up", OpenAIConfig(base_url="http://127.0.0.1:9/v1", api_key="k"))
    cited = [{"type": "url_citation", "url_citation": {"url": "https://a.example"}}]
    call = Call(
        request_id="r",
        dialect="openai",
        model="up/m",
        messages=[
            Message(role="assistant", content="Hello", annotations=cited),
            Message(role="user", content="More?"),
        ],
    )
    body = json.loads(provider.build_request(call, "m").body)
    assert body["messages"][0] == {"role": "assistant", "content": "Hello"}


def test_complete_chunks_keep_their_raw_json_usage_chunks_included():
    data = b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[]}'
    assert provider().parse_event("", data).raw == data
    with_usage = (
        b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,'
        b'"completion_tokens_details":{"audio_tokens":0}}}'
    )
    chunk = provider().parse_event("", with_usage)
    assert (chunk.raw, chunk.usage) == (with_usage, Usage(input=1, output=2))
    no_created = b'{"id":"c1","model":"m","choices":[]}'
    assert provider().parse_event("", no_created).raw is None


def test_a_response_without_choices_is_an_upstream_error():
    body = b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[]}'
    with pytest.raises(UpstreamError) as caught:
        provider().parse_response(body, "m")
    assert caught.value.status == 502


def test_usage_is_translated_whatever_the_whitespace_and_null_usage_is_none():
    spaced = (
        b'{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",'
        b' "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4,'
        b' "prompt_tokens_details": {"cached_tokens": 3}}}'
    )
    chunk = provider().parse_event("", spaced)
    assert (chunk.usage.input, chunk.usage.cache_read, chunk.usage.output) == (7, 3, 4)
    assert chunk.raw == spaced
    null = (
        b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[],"usage":null}'
    )
    chunk = provider().parse_event("", null)
    assert chunk.usage is None
    assert chunk.raw == null


_IDENTITY = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
_DELTA = {"choices": [{"index": 0, "delta": {"content": 'say "error": \n\ndata: no'}}]}


def _frames(*events: dict[str, Any] | str) -> bytes:
    return b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    )


def test_ordinary_chunks_are_relayed_as_they_came_and_decode_like_any_other():
    spaced = {**_IDENTITY, **_DELTA, "usage": None}
    data = (
        _frames({**_IDENTITY, **_DELTA}, spaced)
        + b'data: {"id":"c1" , "created":2,"model":"m"}\n\n'
    )
    frames, rest = provider().relay_frames(data)
    assert frames is not None
    assert (frames.data, rest) == (data, b"")
    chunks = [frames.parse(payload) for payload in frames.payloads()]
    assert [c.raw for c in chunks] == list(frames.payloads())  # type: ignore[union-attr]
    assert chunks[0].choices[0].delta.content == _DELTA["choices"][0]["delta"]["content"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "tail",
    [
        _frames({**_IDENTITY, "choices": [], "usage": {"prompt_tokens": 1}}, "[DONE]"),
        b"data: " + msgspec.json.encode({**_IDENTITY, "usage": {"prompt_tokens": 1}}) + b"\n\n",
        _frames({"error": {"message": "boom"}}),
        _frames(_IDENTITY)[:-3],  # a frame the next read finishes
    ],
    ids=["usage-and-done", "compact-usage", "error", "partial"],
)
def test_the_run_of_ordinary_chunks_before_the_tail_is_relayed(tail):
    run = _frames(_IDENTITY, _IDENTITY)
    frames, rest = provider().relay_frames(run + tail)
    assert frames is not None
    assert (frames.data, rest) == (run, tail)


@pytest.mark.parametrize(
    "data",
    [
        _frames({**_IDENTITY, "usage": {"prompt_tokens": 1}}),
        _frames("[DONE]"),
        _frames({"error": {"message": "boom"}}),
        _frames({**_IDENTITY, "error": {"message": "boom"}}),
        _frames({**_IDENTITY, "id": ""}),
        _frames({**_IDENTITY, "created": 0}),
        _frames({key: value for key, value in _IDENTITY.items() if key != "model"}),
        _frames(_IDENTITY, "[1]"),
        _frames(_IDENTITY)[:-1],  # an unfinished frame
        b": comment\n\n" + _frames(_IDENTITY),
        _frames(_IDENTITY).replace(b"\n\n", b"\r\n\r\n"),
        _frames(_IDENTITY).replace(b"data: ", b"data:"),
        _frames(_IDENTITY, _IDENTITY).replace(b"\n\ndata: ", b"\n\nevent: x\ndata: "),
        b"data: " + json.dumps(_IDENTITY).encode().replace(b",", b",\ndata: ", 1) + b"\n\n",
        b"data: {not json}\n\n",
    ],
    ids=[
        "usage",
        "done",
        "error",
        "error-with-identity",
        "empty-id",
        "no-created",
        "no-model",
        "not-an-object",
        "partial",
        "comment",
        "crlf",
        "no-space",
        "named-event",
        "multi-line",
        "malformed",
    ],
)
def test_any_frame_that_is_not_an_ordinary_chunk_is_left_to_decode(data):
    assert provider().relay_frames(data) == (None, data)
