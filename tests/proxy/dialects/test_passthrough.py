"""proxy/dialects/passthrough.py, and through it the OpenAI chat dialect: an upstream's members
that the canonical types do not model are spliced in beside the canonical ones, which win."""

from __future__ import annotations

import json
import time

import msgspec
import pytest

from proxy.core.reply import Reply, Response
from proxy.dialects.openai_chat import OpenAIChatDialect
from proxy.dialects.passthrough import merged, without_usage
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider

DIALECT = OpenAIChatDialect()
BODY = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hi",
                "refusal": None,
                "audio": {"id": "a"},
            },
            "finish_reason": "stop",
            "logprobs": None,
            "content_filter_results": {},
        }
    ],
    "usage": {
        "prompt_tokens": 3,
        "completion_tokens": 1,
        "total_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 1, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "rejected_prediction_tokens": 0},
        "queue_ms": 5,
    },
    "x_vendor": True,
}


def parsed(body: dict) -> Response:
    provider = OpenAIProvider("up", OpenAIConfig(api_key="k"))
    return provider.parse_response(json.dumps(body).encode(), "m")


def answered(response: Response) -> bytes:
    call = DIALECT.decode(
        b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
        {},
        "r",
        time.perf_counter(),
    )
    return DIALECT.encode_response(call, Reply("up", "m", response=response))


def test_an_unchanged_answer_is_the_upstreams_body_byte_for_byte() -> None:
    body = json.dumps(BODY).encode()
    response = OpenAIProvider("up", OpenAIConfig(api_key="k")).parse_response(body, "m")
    assert response.unchanged()
    assert answered(response) == body


def test_once_changed_the_canonical_fields_win_and_the_rest_is_merged() -> None:
    response = parsed(BODY)
    response.choices[0].message.content = "Changed by a plugin"
    assert not response.unchanged()
    out = json.loads(answered(response))
    assert out["choices"][0]["message"]["content"] == "Changed by a plugin"
    expected = json.loads(json.dumps(BODY))
    expected["choices"][0]["message"]["content"] = "Changed by a plugin"
    assert out == expected


def test_without_raw_only_the_canonical_fields_are_sent() -> None:
    response = parsed(BODY)
    response.raw = None
    out = json.loads(answered(response))
    assert "x_vendor" not in out
    assert "audio" not in out["choices"][0]["message"]
    assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 1}


def test_a_choice_the_upstream_did_not_send_gets_no_extras() -> None:
    response = parsed(BODY)
    response.choices.append(msgspec.structs.replace(response.choices[0], index=1))
    out = json.loads(answered(response))
    assert "content_filter_results" in out["choices"][0]
    assert "content_filter_results" not in out["choices"][1]


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[1, 2]", b'{"choices": [{"message": null}], "usage": 3}', b'{"choices": 7}'],
)
def test_bodies_of_unexpected_shapes_add_nothing(raw: bytes) -> None:
    ours = {"id": "c", "choices": [{"index": 0, "message": {"role": "assistant"}}], "usage": {}}
    assert json.loads(merged(json.loads(json.dumps(ours)), raw)) == ours


def test_an_incomplete_body_is_not_kept() -> None:
    body = {key: value for key, value in BODY.items() if key != "created"}
    assert parsed(body).raw is None


def test_without_usage_keeps_every_other_member() -> None:
    chunk = b'{"id":"c","choices":[{"index":0}],"usage":{"prompt_tokens":1},"x":{"y":1}}'
    assert json.loads(without_usage(chunk)) == {"id": "c", "choices": [{"index": 0}], "x": {"y": 1}}
