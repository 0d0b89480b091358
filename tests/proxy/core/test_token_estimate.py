"""proxy/core/token_estimate.py: the documented input-token estimate, by its rules, and a call's
worst case (every answer it asks for), through each dialect that has an output limit."""

from __future__ import annotations

import json

import pytest
from msgspec import UNSET

from proxy.core.canonical import (
    Call,
    FilePart,
    FunctionCall,
    FunctionDefinition,
    ImagePart,
    ImageURL,
    Message,
    Params,
    TextPart,
    Tool,
    ToolCall,
)
from proxy.core.token_estimate import estimate_input_tokens, expected_tokens, output_limit
from proxy.dialects import all_dialects


def call(*messages: Message, tools: list[Tool] | None = None) -> Call:
    params = Params(tools=tools) if tools else Params()
    return Call(
        request_id="r", dialect="anthropic", model="m", messages=list(messages), params=params
    )


def test_four_bytes_a_token_rounded_up_plus_four_a_message() -> None:
    assert estimate_input_tokens(call(Message(role="user", content="abcd"))) == 1 + 4
    assert estimate_input_tokens(call(Message(role="user", content="abcde"))) == 2 + 4
    two = call(Message(role="system", content="ab"), Message(role="user", content="cd"))
    assert estimate_input_tokens(two) == 1 + 8  # bytes are summed before rounding


def test_utf8_bytes_count_so_dense_scripts_are_not_undercounted() -> None:
    assert estimate_input_tokens(call(Message(role="user", content="日本語"))) == 3 + 4  # 9 bytes


def test_parts_images_files_calls_and_tools() -> None:
    message = Message(
        role="user",
        content=[
            TextPart(text="look"),
            ImagePart(image_url=ImageURL(url="https://x/a.png")),
            FilePart(file={"file_data": "QUJD"}),
        ],
    )
    calls = Message(
        role="assistant",
        content=None,
        tool_calls=[ToolCall(id="c", function=FunctionCall(name="f", arguments='{"a":1}'))],
    )
    tool = Tool(
        function=FunctionDefinition(name="f", description="d", parameters={"type": "object"})
    )
    text_bytes = 4 + len(b'{"file_data":"QUJD"}') + 1 + 7 + 1 + 1 + len(b'{"type":"object"}')
    expected = -(-text_bytes // 4) + 8 + 1600
    assert estimate_input_tokens(call(message, calls, tools=[tool])) == expected


def test_nothing_but_framing_for_empty_messages() -> None:
    assert estimate_input_tokens(call(Message(role="user", content=None))) == 4
    assert estimate_input_tokens(call()) == 0
    assert Params().tools is UNSET


def test_the_output_limit_counts_every_answer_and_the_larger_limit() -> None:
    asked = call(Message(role="user", content="abcd"))
    assert output_limit(asked) is None  # no limit: the upstream's default applies
    assert expected_tokens(asked, 7) == (5, 7)
    asked.params = Params(n=3)
    assert expected_tokens(asked, 7) == (5, 21)  # the default reserve per answer
    asked.params = Params(n=128, max_tokens=20)
    assert output_limit(asked) == 2_560
    asked.params = Params(n=2, max_tokens=5, max_completion_tokens=9)
    assert output_limit(asked) == 18
    asked.params = Params(max_tokens=50, max_completion_tokens=9)
    assert output_limit(asked) == 50  # an upstream may honour either


def test_the_worst_case_counts_tools_and_images_in_its_input() -> None:
    image = Message(role="user", content=[ImagePart(image_url=ImageURL(url="https://x/a.png"))])
    tool = Tool(function=FunctionDefinition(name="f", parameters={"type": "object"}))
    asked = call(image, tools=[tool])
    asked.params.max_tokens = 1
    assert expected_tokens(asked, 0) == (estimate_input_tokens(asked), 1)
    assert expected_tokens(asked, 0)[0] >= 4 + 1600 + 5


DIALECT_BODIES = [
    # (route, request body, output tokens of its worst case)
    (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 128, "max_tokens": 20},
        2_560,
    ),
    ("/v1/completions", {"model": "m", "prompt": "hi", "n": 4, "max_tokens": 8}, 32),
    ("/v1/completions", {"model": "m", "prompt": "hi", "n": 4}, 64),  # OpenAI's default 16
    (
        "/v1/messages",
        {"model": "m", "max_tokens": 300, "messages": [{"role": "user", "content": "hi"}]},
        300,
    ),
    ("/v1/responses", {"model": "m", "input": "hi", "max_output_tokens": 70}, 70),
    ("/v2/router/completions", {"model": "m", "prompt": "hi", "n": 3, "max_tokens": 5}, 15),
]


@pytest.mark.parametrize(("path", "body", "output"), DIALECT_BODIES)
def test_each_dialects_output_limit_reaches_the_worst_case(path, body, output) -> None:
    (dialect,) = [d for d in all_dialects() if path in d.paths]
    decoded = dialect.decode(json.dumps(body).encode(), {}, "r", 0.0)
    assert output_limit(decoded) == output
    assert expected_tokens(decoded, 1)[1] == output
