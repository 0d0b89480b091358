"""proxy/batches/wire.py: a native batch's lines as the provider's batch endpoint takes them,
and its results back in the client's shape — passed through when the provider takes the batch's
own endpoint, translated through the canonical call between OpenAI's chat completions and
Anthropic's messages otherwise (answers and errors alike)."""

from __future__ import annotations

import json

import msgspec
import pytest

from proxy.batches.usage import WireUsage
from proxy.batches.wire import Passthrough, Translated
from proxy.core.canonical import Usage
from proxy.core.errors import GatewayError
from proxy.dialects.anthropic import AnthropicDialect
from proxy.dialects.openai_chat import OpenAIChatDialect
from proxy.providers.anthropic.provider import AnthropicConfig, AnthropicProvider
from proxy.providers.base import NativeResult
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider

CLAUDE = AnthropicProvider("claude", AnthropicConfig(api_key="k"))
GPT = OpenAIProvider("gpt", OpenAIConfig(api_key="k"))
CHAT_LINE = json.dumps(
    {"model": "alias", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}
).encode()
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2},
}


def test_a_passed_through_answer_keeps_the_providers_body_and_reads_its_usage() -> None:
    codec = Passthrough("/v1/messages", CLAUDE, "claude-x")
    assert codec.request(CHAT_LINE) == json.loads(CHAT_LINE)
    body = json.dumps(MESSAGE).encode()
    answer = codec.answer(CHAT_LINE, NativeResult("l0", 200, body, "succeeded"))
    assert (answer.status, answer.body, answer.error) == (200, body, None)
    assert answer.usage == Usage(input=10, output=5, cache_read=2)


def test_a_passed_through_embeddings_answer_reads_openais_usage_object() -> None:
    codec = Passthrough("/v1/embeddings", GPT, "e")
    body = b'{"data": [], "usage": {"prompt_tokens": 7, "total_tokens": 7}}'
    answer = codec.answer(b"{}", NativeResult("l0", 200, body, "succeeded"))
    assert answer.usage == Usage(input=7)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            b'{"error": {"message": "no", "type": "invalid_request_error", "code": "bad"}}',
            ("bad", "no"),
        ),
        (
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}',
            ("overloaded_error", "busy"),
        ),
        (b"not json", ("upstream_error", "the provider answered an error")),
    ],
)
def test_a_passed_through_error_names_its_code_and_message(
    body: bytes, error: tuple[str, str]
) -> None:
    answer = Passthrough("/v1/chat/completions", GPT, "m").answer(
        b"{}", NativeResult("l0", 400, body, "errored")
    )
    assert (answer.status, answer.body, answer.usage, answer.error) == (400, body, None, error)


def test_an_openai_chat_line_becomes_the_messages_request_the_provider_sends_online() -> None:
    codec = Translated(OpenAIChatDialect(), CLAUDE, "claude", "claude-x")
    params = codec.request(CHAT_LINE)
    assert (params["model"], params["max_tokens"]) == ("claude-x", 20)
    assert params["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_a_messages_answer_comes_back_as_a_chat_completion() -> None:
    codec = Translated(OpenAIChatDialect(), CLAUDE, "claude", "claude-x")
    body = json.dumps(MESSAGE).encode()
    answer = codec.answer(CHAT_LINE, NativeResult("l0", 200, body, "succeeded"))
    completion = json.loads(answer.body)
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["content"] == "hello"
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert completion["usage"]["prompt_tokens"] == 12
    assert (answer.status, answer.error, answer.usage) == (
        200,
        None,
        Usage(input=10, output=5, cache_read=2),
    )


def test_a_messages_error_comes_back_in_openais_error_shape_with_its_status() -> None:
    codec = Translated(OpenAIChatDialect(), CLAUDE, "claude", "claude-x")
    body = b'{"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}'
    answer = codec.answer(CHAT_LINE, NativeResult("l0", 429, body, "errored"))
    assert answer.status == 429
    assert json.loads(answer.body)["error"]["type"] == "rate_limit_error"
    assert answer.error is not None
    assert answer.usage is None


def test_an_anthropic_line_becomes_a_chat_request_and_its_answer_a_message() -> None:
    codec = Translated(AnthropicDialect(), GPT, "gpt", "gpt-x")
    line = json.dumps(
        {"model": "alias", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    request = codec.request(line)
    assert (request["model"], request["max_tokens"]) == ("gpt-x", 9)
    assert "stream" not in request or request["stream"] is False
    completion = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-x",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yo"}}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    answer = codec.answer(
        line, NativeResult("l0", 200, json.dumps(completion).encode(), "succeeded")
    )
    message = json.loads(answer.body)
    assert (message["type"], message["content"][0]["text"]) == ("message", "yo")
    assert message["usage"]["output_tokens"] == 2


def test_a_line_the_provider_cannot_take_raises_the_online_error() -> None:
    codec = Translated(OpenAIChatDialect(), CLAUDE, "claude", "claude-x")
    two = msgspec.json.encode({**json.loads(CHAT_LINE), "n": 2})
    with pytest.raises(GatewayError) as raised:
        codec.request(two)
    assert raised.value.param == "n"


def test_openai_usage_separates_cached_and_reasoning_tokens() -> None:
    raw = {
        "prompt_tokens": 10,
        "completion_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    usage = msgspec.convert(raw, WireUsage)
    assert usage.canonical() == Usage(input=6, output=5, cache_read=4, reasoning=3)
