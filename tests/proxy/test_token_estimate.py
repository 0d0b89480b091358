"""proxy/token_estimate.py: the documented input-token estimate, by its rules."""

from __future__ import annotations

from msgspec import UNSET

from proxy.canonical import (
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
from proxy.token_estimate import estimate_input_tokens


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
