"""proxy/dialects/responses/input_list.py: a stored input as OpenAI's input item list, paged."""

from __future__ import annotations

import msgspec
import pytest

from proxy.core.canonical import FunctionCall, Message, ToolCall
from proxy.core.errors import BadRequest
from proxy.dialects.responses.input_list import input_items, page
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
MESSAGES = [
    Message(role="user", content="weather?"),
    Message(
        role="assistant",
        content=None,
        tool_calls=[ToolCall(id="call_1", function=FunctionCall(name="f", arguments="{}"))],
    ),
    Message(role="tool", content="sunny", tool_call_id="call_1"),
]


def test_every_kind_of_input_becomes_its_item_and_validates() -> None:
    items = input_items("resp_abc", MESSAGES)
    assert [(item["type"], item["id"]) for item in items] == [
        ("message", "msg_abc_in0"),
        ("function_call", "fc_abc_in1"),
        ("function_call_output", "fco_abc_in2"),
    ]
    assert items[2]["output"] == "sunny"
    listed = page(items, order="asc")
    validate_in(SPEC, "ResponseItemList", msgspec.to_builtins(listed))


def test_pages_cut_both_ways_and_an_unknown_cursor_names_its_field() -> None:
    items = input_items("resp_abc", MESSAGES)
    newest = page(items, limit=2)
    assert [item["id"] for item in newest.data] == ["fco_abc_in2", "fc_abc_in1"]
    assert newest.has_more is True
    before = page(items, order="asc", before="fco_abc_in2")
    assert [item["id"] for item in before.data] == ["msg_abc_in0", "fc_abc_in1"]
    with pytest.raises(BadRequest) as unknown:
        page(items, after="msg_nope")
    assert unknown.value.param == "after"
