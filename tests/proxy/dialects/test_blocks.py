"""proxy/dialects/blocks.py: the block state machine the Anthropic and Fabro encoders share."""

from __future__ import annotations

from proxy.core.reply import FunctionCallDelta, ToolCallDelta
from proxy.dialects.blocks import Change, StreamBlocks


def shape(changes: list[Change]) -> list[tuple[str, str, int]]:
    return [("open" if c.opened else "close", c.block.kind, c.block.index) for c in changes]


def fragment(index: int, arguments: str = "", **fields: str) -> ToolCallDelta:
    return ToolCallDelta(index=index, function=FunctionCallDelta(arguments=arguments), **fields)


def test_prose_is_one_block_at_a_time_and_counts_per_kind() -> None:
    blocks = StreamBlocks("call_")
    text, changes = blocks.prose("text")
    assert shape(changes) == [("open", "text", 0)]
    assert blocks.prose("text") == (text, [])
    thinking, changes = blocks.prose("reasoning")
    assert shape(changes) == [("close", "text", 0), ("open", "reasoning", 1)]
    again, changes = blocks.prose("text")
    assert shape(changes) == [("close", "reasoning", 1), ("open", "text", 2)]
    assert (text.ordinal, thinking.ordinal, again.ordinal) == (0, 0, 1)
    assert shape(blocks.close()) == [("close", "text", 2)]


def test_tool_calls_stay_open_until_the_end_and_collect_their_arguments() -> None:
    blocks = StreamBlocks("call_")
    blocks.prose("text")
    first, changes, pieces = blocks.tool_fragment(fragment(0, '{"a":', id="c1"))
    assert shape(changes) == [("close", "text", 0), ("open", "tool_call", 1)]
    assert pieces == '{"a":'
    second, changes, _ = blocks.tool_fragment(fragment(1))
    assert shape(changes) == [("open", "tool_call", 2)]
    assert second.call_id == "call_1"  # no id given
    _, changes = blocks.prose("text")
    assert shape(changes) == [("open", "text", 3)]  # the calls stay open
    same, changes, pieces = blocks.tool_fragment(fragment(0, "1}"))
    assert (same, changes, pieces) == (first, [], "1}")
    assert "".join(first.arguments) == '{"a":1}'
    assert shape(blocks.close()) == [
        ("close", "tool_call", 1),
        ("close", "tool_call", 2),
        ("close", "text", 3),
    ]
    assert blocks.tool_calls == [first, second]
    assert blocks.close() == []
