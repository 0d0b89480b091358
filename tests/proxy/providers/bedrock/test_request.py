"""proxy/providers/bedrock/request.py: the Converse request body, through the provider's
``build_request`` (table-driven from the ``request`` fixtures of tests/fixtures/bedrock/: a
canonical call in, the Converse path and body out; then the refusals).

Signing, credentials and the URL are tested in ``test_bedrock.py``, whose helpers these tests
share.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from proxy.core.canonical import Message, Params
from proxy.core.errors import BadRequest
from tests.proxy.providers.bedrock.test_provider import provider, simple_call
from tests.proxy.providers.translation_support import call_from, load_fixtures


@pytest.mark.parametrize("fixture", load_fixtures("bedrock", "request"))
def test_request_translation(fixture: dict[str, Any]):
    request = provider().build_request(call_from(fixture["call"]), fixture["upstream_model"])
    assert json.loads(request.body) == fixture["expected_body"]
    base = "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert request.url == base + fixture["expected_path"]


@pytest.mark.parametrize(
    ("content", "param", "message"),
    [
        ([{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}], "[0]", "data: URLs"),
        ([{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}], "[0]", "png"),
        (
            [{"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}],
            "[0]",
            "base64",
        ),
        ([{"type": "image_url", "image_url": {"url": "s3://b/cat.tiff"}}], "[0]", "png"),
        (
            [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}],
            "[0]",
            "Audio",
        ),
    ],
    ids=["http-image", "bmp", "bad-base64", "s3-tiff", "audio"],
)
def test_unsupported_content_is_a_bad_request(content, param, message):
    call = simple_call(
        messages=msgspec.convert([{"role": "user", "content": content}], list[Message])
    )
    with pytest.raises(BadRequest, match=message) as info:
        provider().build_request(call, "m")
    assert info.value.param == f"messages[0].content{param}"


@pytest.mark.parametrize(
    ("arguments", "message"), [("{not json", "must be JSON"), ("[1, 2]", "JSON object")]
)
def test_tool_call_arguments_must_be_a_json_object(arguments, message):
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": arguments}}],
        },
    ]
    call = simple_call(messages=msgspec.convert(messages, list[Message]))
    with pytest.raises(BadRequest, match=message) as info:
        provider().build_request(call, "m")
    assert info.value.param == "messages[1].tool_calls[0]"


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"n": 2}, "n"),
        ({"tools": [{"function": {"name": "f"}}], "tool_choice": "sometimes"}, "tool_choice"),
        (
            {"tools": [{"function": {"name": "f"}}], "tool_choice": {"type": "function"}},
            "tool_choice",
        ),
    ],
)
def test_inexpressible_params_are_bad_requests(params, param):
    call = simple_call(params=msgspec.convert(params, Params))
    with pytest.raises(BadRequest) as info:
        provider().build_request(call, "m")
    assert info.value.param == param
