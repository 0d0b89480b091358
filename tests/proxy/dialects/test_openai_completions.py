"""proxy/dialects/openai_completions.py: legacy completions served through chat models, with
output validated against OpenAI's CreateCompletionResponse schema (tests/schemas.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from proxy.core.canonical import Call, FunctionCall, Message, Params, ToolCall, Usage
from proxy.core.errors import BadRequest, GatewayError, UpstreamRateLimited
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response
from proxy.dialects.openai_chat import DONE_FRAME
from proxy.dialects.openai_completions import OpenAICompletionsDialect
from proxy.providers.mock.provider import MockConfig, MockProvider
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider
from tests.schemas import validate

DIALECT = OpenAICompletionsDialect()


def body(**fields: Any) -> bytes:
    fields.setdefault("model", "gpt-3.5-turbo-instruct")
    fields.setdefault("prompt", "Say this is a test")
    return json.dumps(fields).encode()


def decode(raw: bytes) -> Call:
    return DIALECT.decode(raw, {}, "req-1", 1.0)


def bad(raw: bytes) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        decode(raw)
    assert info.value.status == 400
    return info.value


def frames(data: bytes) -> list[Any]:
    out = []
    for frame in data.split(b"\n\n"):
        if frame:
            assert frame.startswith(b"data: "), frame
            payload = frame[len(b"data: ") :]
            out.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
    return out


def validate_frame(payload: dict[str, Any]) -> None:
    """Validate a stream frame against CreateCompletionResponse.

    OpenAI streams legacy completions in the same shape as the whole response, except that
    ``finish_reason`` is null until the last chunk; the published schema (written for the whole
    response) does not allow that null, so in-progress choices are checked with it filled in.
    """
    checked = copy.deepcopy(payload)
    for choice in checked["choices"]:
        if choice.get("finish_reason", "missing") is None:
            choice["finish_reason"] = "stop"
    validate("CreateCompletionResponse", checked)


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def test_routes():
    assert "/v1/completions" in DIALECT.paths


def test_decode_prompt_becomes_one_user_message():
    call = decode(body(temperature=0.3, stop="\n", n=2, user="u"))
    assert call.dialect == "openai_completions"
    assert call.model == "gpt-3.5-turbo-instruct"
    assert call.messages == [Message(role="user", content="Say this is a test")]
    assert call.params == Params(temperature=0.3, stop="\n", n=2, user="u", max_tokens=16)
    assert call.stream is False


def test_max_tokens_defaults_to_16():
    assert decode(body()).params.max_tokens == 16
    assert decode(body(max_tokens=300)).params.max_tokens == 300


def test_prompt_list_of_one_string():
    assert decode(body(prompt=["only one"])).messages == [Message(role="user", content="only one")]


def test_several_prompts_are_refused():
    error = bad(body(prompt=["one", "two"]))
    assert error.param == "prompt"
    assert "several prompts" in error.message


@pytest.mark.parametrize("prompt", [[1212, 318, 257], [[1212, 318]], [[1], [2]], ["a", 1]])
def test_token_array_prompts_are_refused(prompt):
    error = bad(body(prompt=prompt))
    assert error.param == "prompt"


def test_missing_prompt():
    assert bad(json.dumps({"model": "m"}).encode()).param == "prompt"
    assert bad(body(prompt=None)).param == "prompt"


def test_suffix_is_refused():
    assert bad(body(suffix="the end")).param == "suffix"


def test_empty_or_null_suffix_is_fine():
    decode(body(suffix=""))
    decode(body(suffix=None))


def test_best_of():
    assert bad(body(best_of=3)).param == "best_of"  # more candidates: chat models cannot
    assert bad(body(best_of=21)).param == "best_of"  # beyond OpenAI's schema
    decode(body(best_of=1))
    decode(body(best_of=0))  # OpenAI's schema allows it


def test_max_tokens_zero_is_accepted_as_the_schema_allows():
    assert decode(body(max_tokens=0)).params.max_tokens == 0


def test_logprobs_integer_asks_for_top_logprobs():
    params = decode(body(logprobs=3)).params
    assert params.logprobs is True
    assert params.top_logprobs == 3
    assert bad(body(logprobs=6)).param == "logprobs"


def test_echo_is_remembered_for_the_reply():
    assert decode(body(echo=True)).dialect_state == {"echo": "Say this is a test"}
    assert decode(body(echo=False)).dialect_state == {}


def test_stream_with_usage():
    call = decode(body(stream=True, stream_options={"include_usage": True}))
    assert (call.stream, call.include_usage) == (True, True)


@pytest.mark.parametrize("model", [None, ""])
def test_missing_model(model):
    fields = {"prompt": "x"} if model is None else {"prompt": "x", "model": model}
    assert bad(json.dumps(fields).encode()).param == "model"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"prompt": 5}, "prompt"),
        ({"max_tokens": "many"}, "max_tokens"),
        ({"max_tokens": -1}, "max_tokens"),
        ({"temperature": "warm"}, "temperature"),
        ({"echo": "yes"}, "echo"),
    ],
)
def test_wrong_type_names_the_field(fields, param):
    assert bad(body(**fields)).param == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"seed": 2**63}, "seed"),
        ({"seed": 2**70}, "seed"),
    ],
)
def test_out_of_range_names_the_field(fields, param):
    # The same bounds as the chat dialect: OpenAI's legacy API documents them too.
    assert bad(body(**fields)).param == param


def test_invalid_json():
    assert bad(b"{oops").code == "invalid_json"


def test_unknown_fields_are_kept_and_credentials_dropped():
    call = decode(body(top_k=5, api_key="sk-smuggled-0123456789abcdef", base_url="http://x"))
    assert set(call.extra) == {"top_k"}
    assert bytes(call.extra["top_k"]) == b"5"


def test_upstream_body_has_no_duplicate_keys():
    # Fields the canonical call already encodes (messages, top_logprobs, ...) must not also be
    # passed through raw, or the upstream receives the same key twice.
    call = decode(body(logprobs=2, top_logprobs=4, messages=[{"role": "user", "content": "x"}]))
    raw = OpenAIProvider("o", OpenAIConfig()).build_request(call, "gpt").body

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        assert len(keys) == len(set(keys)), f"duplicate keys in {raw!r}"
        return dict(pairs)

    sent = json.loads(raw, object_pairs_hook=no_duplicates)
    assert sent["messages"] == [{"role": "user", "content": "Say this is a test"}]


# ---------------------------------------------------------------------------------------------
# Whole responses
# ---------------------------------------------------------------------------------------------


def encoded(call: Call, response: Response) -> dict[str, Any]:
    out = json.loads(
        DIALECT.encode_response(call, Reply(provider="p", model="m", response=response))
    )
    validate("CreateCompletionResponse", out)
    assert out["object"] == "text_completion"
    return out


def response(text: str | None, finish: str = "stop", **fields: Any) -> Response:
    message = Message(role="assistant", content=text)
    return Response(id="cmpl-1", model="m", choices=[Choice(0, message, finish)], **fields)


def test_response_conforms():
    out = encoded(decode(body()), response("This is a test.", usage=Usage(input=5, output=7)))
    assert out["choices"] == [
        {"text": "This is a test.", "index": 0, "logprobs": None, "finish_reason": "stop"}
    ]
    assert out["usage"]["prompt_tokens"] == 5
    assert out["usage"]["total_tokens"] == 12


def test_echo_prepends_the_prompt():
    out = encoded(decode(body(echo=True)), response(" Indeed."))
    assert out["choices"][0]["text"] == "Say this is a test Indeed."


@pytest.mark.parametrize(
    ("chat", "legacy"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("tool_calls", "stop"),
        ("function_call", "stop"),
    ],
)
def test_finish_reasons_are_mapped(chat: str, legacy: str):
    out = encoded(decode(body()), response("x", chat))
    assert out["choices"][0]["finish_reason"] == legacy


def test_tool_call_answer_has_empty_text():
    message = Message(
        role="assistant", content=None, tool_calls=[ToolCall("c1", FunctionCall("f", "{}"))]
    )
    out = encoded(
        decode(body()), Response(id="c", model="m", choices=[Choice(0, message, "tool_calls")])
    )
    assert out["choices"][0]["text"] == ""


@pytest.mark.parametrize("model", ["default", "echo", "error-free"])
async def test_mock_provider_responses_conform(model: str):
    call = decode(body(n=2))
    result = await MockProvider("mock", MockConfig()).complete(call, model)
    out = encoded(call, result)
    assert len(out["choices"]) == 2


async def test_mock_max_tokens_default_truncates_with_length():
    call = decode(body(prompt=" ".join(["word"] * 40)))
    result = await MockProvider("mock", MockConfig()).complete(call, "echo")
    out = encoded(call, result)
    assert out["choices"][0]["finish_reason"] == "length"
    assert len(out["choices"][0]["text"].split()) == 16


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


def encode_stream(call: Call, chunks: list[Chunk]) -> bytes:
    encoder = DIALECT.stream_encoder(call, Reply(provider="p", model="m"))
    return b"".join(encoder.chunk(chunk) for chunk in chunks) + encoder.end()


def stream_payloads(data: bytes) -> list[dict[str, Any]]:
    assert data.endswith(DONE_FRAME)
    payloads = frames(data)
    assert payloads[-1] == "[DONE]"
    for payload in payloads[:-1]:
        validate_frame(payload)
        assert payload["object"] == "text_completion"
    return payloads[:-1]


async def mock_stream(call: Call, model: str = "echo") -> list[Chunk]:
    stream = await MockProvider("mock", MockConfig()).complete(call, model)
    return [chunk async for chunk in stream]


def stream_text(payloads: list[dict[str, Any]]) -> str:
    return "".join(c["text"] for p in payloads for c in p["choices"])


@pytest.mark.parametrize("include_usage", [False, True])
async def test_mock_stream_conforms(include_usage: bool):
    call = decode(body(stream=True, stream_options={"include_usage": include_usage}))
    payloads = stream_payloads(encode_stream(call, await mock_stream(call)))
    assert stream_text(payloads) == "Say this is a test"
    finishes = [c["finish_reason"] for p in payloads for c in p["choices"] if c["finish_reason"]]
    assert finishes == ["stop"]
    usage = [p["usage"] for p in payloads if p.get("usage")]
    assert len(usage) == (1 if include_usage else 0)


async def test_stream_echo_prefixes_the_first_text_only():
    call = decode(body(stream=True, echo=True, prompt="a b"))
    payloads = stream_payloads(encode_stream(call, await mock_stream(call)))
    assert stream_text(payloads) == "a b" + "a b"


def test_stream_echo_is_sent_even_without_generated_text():
    # The whole-response encoder always includes the echoed prompt; the stream must too.
    call = decode(body(stream=True, echo=True, prompt="Echo me"))
    chunks = [
        Chunk(id="c", model="m", choices=[ChunkChoice(0, Delta(role="assistant", content=""))]),
        Chunk(id="c", model="m", choices=[ChunkChoice(0, Delta(), finish_reason="length")]),
    ]
    assert stream_text(stream_payloads(encode_stream(call, chunks))) == "Echo me"


def test_role_only_and_empty_chunks_are_skipped():
    call = decode(body(stream=True))
    encoder = DIALECT.stream_encoder(call, Reply(provider="p", model="m"))
    role_only = Chunk(id="c", model="m", choices=[ChunkChoice(0, Delta(role="assistant"))])
    assert encoder.chunk(role_only) == b""
    usage_only = Chunk(id="c", model="m", choices=[], usage=Usage(input=1, output=1))
    assert encoder.chunk(usage_only) == b""  # the client did not ask for usage


def test_tool_call_finish_maps_to_stop_in_streams():
    call = decode(body(stream=True))
    chunk = Chunk(id="c", model="m", choices=[ChunkChoice(0, Delta(), finish_reason="tool_calls")])
    (payload,) = stream_payloads(encode_stream(call, [chunk]))
    assert payload["choices"][0]["finish_reason"] == "stop"


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        BadRequest("several prompts", param="prompt"),
        UpstreamRateLimited("slow down", upstream_status=429),
        GatewayError("internal"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_conform(error: GatewayError):
    out = json.loads(DIALECT.encode_error(error, "req-1"))
    validate("ErrorResponse", out)
    encoder = DIALECT.stream_encoder(decode(body(stream=True)), Reply(provider="p", model="m"))
    (payload,) = frames(encoder.error(error))
    validate("ErrorResponse", payload)


def test_stream_echo_prefixes_every_choice_when_n_is_above_one():
    # The whole-response encoder echoes the prompt in every choice; the stream must too.
    call = decode(body(stream=True, echo=True, prompt="P ", n=2))
    chunks = [
        Chunk(
            id="c",
            model="m",
            choices=[ChunkChoice(0, Delta(content="a")), ChunkChoice(1, Delta(content="b"))],
        ),
        Chunk(id="c", model="m", choices=[ChunkChoice(1, Delta(content="c"))]),
        Chunk(
            id="c",
            model="m",
            choices=[ChunkChoice(0, Delta(), "stop"), ChunkChoice(1, Delta(), "stop")],
        ),
    ]
    texts = {0: "", 1: ""}
    for payload in stream_payloads(encode_stream(call, chunks)):
        for choice in payload["choices"]:
            texts[choice["index"]] += choice["text"]
    assert texts == {0: "P a", 1: "P bc"}
