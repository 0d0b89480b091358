"""proxy/dialects/responses/decode.py: Responses requests into canonical calls."""

from __future__ import annotations

import json
from typing import Any

import pytest
from msgspec import UNSET

from proxy.core.canonical import (
    Call,
    FilePart,
    FunctionCall,
    ImagePart,
    ImageURL,
    Message,
    TextPart,
    ToolCall,
)
from proxy.core.errors import BadRequest
from proxy.dialects.responses import ResponsesDialect, envelope_of

DIALECT = ResponsesDialect()
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def decode(**fields: Any) -> Call:
    fields.setdefault("model", "mock/echo")
    return DIALECT.decode(json.dumps(fields).encode(), {}, "req-1", 0.0)


def refused(**fields: Any) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        decode(**fields)
    return info.value


def test_a_string_input_is_one_user_turn_after_the_instructions() -> None:
    call = decode(input="Hello", instructions="Be brief.")
    assert call.messages == [
        Message(role="system", content="Be brief."),
        Message(role="user", content="Hello"),
    ]
    assert call.dialect == "responses"
    assert call.stream is False


def test_message_items_with_and_without_type_and_every_input_part() -> None:
    call = decode(
        input=[
            {"role": "developer", "content": "Rules."},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Look:"},
                    {"type": "input_image", "image_url": "https://x/cat.png", "detail": "high"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAA"},
                    {
                        "type": "input_file",
                        "file_data": "data:application/pdf;base64,JVB",
                        "filename": "a.pdf",
                    },
                    {"type": "input_file", "file_id": "file-1"},
                ],
            },
        ]
    )
    assert call.messages[0] == Message(role="developer", content="Rules.")
    assert call.messages[1].content == [
        TextPart(text="Look:"),
        ImagePart(image_url=ImageURL(url="https://x/cat.png", detail="high")),
        ImagePart(image_url=ImageURL(url="data:image/png;base64,AAA")),
        FilePart(file={"file_data": "data:application/pdf;base64,JVB", "filename": "a.pdf"}),
        FilePart(file={"file_id": "file-1"}),
    ]


def test_a_previous_turn_sent_back_as_items_is_one_assistant_message() -> None:
    """What an agent loop sends: reasoning, text and calls of one turn, then the outputs."""
    call = decode(
        input=[
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Two cities."}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {
                "type": "function_call",
                "call_id": "c2",
                "name": "get_weather",
                "arguments": '{"city":"Rome"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "18C"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "21C"}],
            },
        ]
    )
    user, assistant, paris, rome = call.messages
    assert user == Message(role="user", content="Weather in Paris and Rome?")
    assert assistant.role == "assistant"
    assert assistant.content == "Checking."
    assert assistant.reasoning_content == "Two cities."
    assert assistant.tool_calls is not UNSET
    assert [c.id for c in assistant.tool_calls] == ["c1", "c2"]
    assert assistant.tool_calls[1].function.arguments == '{"city":"Rome"}'
    assert paris == Message(role="tool", content="18C", tool_call_id="c1")
    assert rome == Message(role="tool", content=[TextPart(text="21C")], tool_call_id="c2")


def test_a_call_without_text_or_reasoning_starts_its_own_assistant_turn() -> None:
    call = decode(
        input=[
            {"role": "user", "content": "Go"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {
                "type": "reasoning",
                "id": "rs_2",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "ok"}],
            },
            {"role": "assistant", "content": "All done."},
        ]
    )
    assert [m.role for m in call.messages] == ["user", "assistant", "tool", "assistant"]
    assert call.messages[1] == Message(
        role="assistant",
        content=None,
        tool_calls=[ToolCall(id="c1", function=FunctionCall(name="f", arguments="{}"))],
    )
    assert call.messages[3].content == "All done."
    assert call.messages[3].reasoning_content == "ok"


def test_encrypted_reasoning_carries_nothing_upstream() -> None:
    call = decode(
        input=[
            {"role": "user", "content": "Hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        ]
    )
    assert [m.role for m in call.messages] == ["user"]


def test_generation_parameters_and_structured_output() -> None:
    call = decode(
        input="x",
        max_output_tokens=64,
        temperature=0.3,
        top_p=0.9,
        user="u-1",
        parallel_tool_calls=False,
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        reasoning={"effort": "low", "summary": "auto"},
        text={
            "format": {
                "type": "json_schema",
                "name": "weather",
                "schema": {"type": "object"},
                "strict": True,
            }
        },
    )
    params = call.params
    assert (params.max_completion_tokens, params.temperature, params.top_p) == (64, 0.3, 0.9)
    assert (params.user, params.parallel_tool_calls, params.reasoning_effort) == (
        "u-1",
        False,
        "low",
    )
    assert params.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert params.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "weather", "schema": {"type": "object"}, "strict": True},
    }
    assert params.tools is not UNSET
    assert params.tools is not None
    (tool,) = params.tools
    assert (tool.function.name, tool.function.description) == ("get_weather", "Weather for a city")
    assert tool.function.strict is UNSET  # not asked for: not sent
    assert decode(input="x", text={"format": {"type": "json_object"}}).params.response_format == {
        "type": "json_object"
    }
    assert decode(input="x", text={"format": {"type": "text"}}).params.response_format is UNSET


def test_the_envelope_repeats_the_request_and_fixes_id_and_time() -> None:
    call = decode(
        input="x",
        instructions="I",
        store=False,
        metadata={"team": "search"},
        previous_response_id="resp_prev",
        truncation="auto",
        tools=[WEATHER],
        text={"format": {"type": "json_object"}, "verbosity": "low"},
    )
    envelope = envelope_of(call)
    assert envelope.id.startswith("resp_")
    assert len(envelope.id) == 53
    assert envelope.created_at > 1_700_000_000
    assert (envelope.store, envelope.instructions, envelope.previous_response_id) == (
        False,
        "I",
        "resp_prev",
    )
    assert (envelope.metadata, envelope.truncation) == ({"team": "search"}, "auto")
    assert envelope.text == {"format": {"type": "json_object"}, "verbosity": "low"}
    assert [tool.name for tool in envelope.tools] == ["get_weather"]
    assert envelope_of(decode(input="x")).store is True
    assert envelope_of(decode(input="y")).id != envelope_of(decode(input="y")).id


def test_input_may_be_omitted_only_when_continuing() -> None:
    assert refused().param == "input"
    assert decode(previous_response_id="resp_1").messages == []


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": "x", "tools": [{"type": "code_interpreter"}]}, "tools[0].type"),
        ({"input": "x", "tool_choice": {"type": "allowed_tools"}}, "tool_choice.type"),
        ({"input": "x", "tool_choice": {"type": "function"}}, "tool_choice.name"),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
        ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"input": [{"type": "computer_call", "id": "c"}]}, "input[0].type"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        ({"input": [{"type": "function_call", "call_id": "c"}]}, "input[0].name"),
        ({"input": [{"role": "user"}]}, "input[0].content"),
        (
            {
                "input": [
                    {"role": "assistant", "content": [{"type": "input_image", "image_url": "u"}]}
                ]
            },
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "u"}]}]},
            "input[0].content[0].file_data",
        ),
        ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
    ],
)
def test_what_the_gateway_cannot_do_is_a_400_naming_the_field(
    fields: dict[str, Any], param: str
) -> None:
    error = refused(**fields)
    assert error.param == param
    assert param in error.message


def test_the_model_may_be_left_out_for_the_route_to_resolve() -> None:
    call = DIALECT.decode(b'{"input": "hi"}', {}, "req-1", 0.0)
    assert call.model == ""
    assert envelope_of(call).model == ""


def test_the_open_responses_fields_are_echoed_and_the_penalties_translated() -> None:
    call = decode(
        input="hi",
        service_tier="flex",
        top_logprobs=20,
        max_tool_calls=3,
        safety_identifier="user-1",
        prompt_cache_key="k",
        presence_penalty=-2,
        frequency_penalty=1.5,
    )
    envelope = envelope_of(call)
    assert (envelope.service_tier, envelope.top_logprobs, envelope.max_tool_calls) == (
        "flex",
        20,
        3,
    )
    assert (envelope.safety_identifier, envelope.prompt_cache_key) == ("user-1", "k")
    assert (call.params.presence_penalty, call.params.frequency_penalty) == (-2, 1.5)
    defaults = envelope_of(decode(input="hi"))
    assert (defaults.service_tier, defaults.presence_penalty, defaults.background) == (
        "default",
        0.0,
        False,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_logprobs", 21),
        ("top_logprobs", -1),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("safety_identifier", "x" * 65),
        ("service_tier", "gold"),
    ],
)
def test_values_outside_the_schema_are_a_400_naming_the_field(field: str, value: Any) -> None:
    error = refused(input="hi", **{field: value})
    assert error.param == field


def test_mcp_tools_go_to_the_envelope_not_to_the_model() -> None:
    call = decode(
        input="hi",
        tools=[
            {"type": "function", "name": "lookup"},
            {"type": "mcp", "server_label": "github", "require_approval": "never"},
            {
                "type": "mcp",
                "server_label": "x",
                "server_url": "https://x.example/mcp",
                "allowed_tools": {"tool_names": ["a", "b"]},
            },
        ],
    )
    assert [tool.function.name for tool in call.params.tools or []] == ["lookup"]
    specs = envelope_of(call).mcp
    assert [(s.server_label, s.server_url, s.allowed_tools) for s in specs] == [
        ("github", None, None),
        ("x", "https://x.example/mcp", ["a", "b"]),
    ]


_APPROVAL = {"type": "mcp", "server_label": "g", "require_approval": "always"}
_FILTER = {"type": "mcp", "server_label": "g", "allowed_tools": {"read_only": True}}


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "mcp"}, "tools[0].server_label"),
        (_APPROVAL, "tools[0].require_approval"),
        (_FILTER, "tools[0].allowed_tools"),
    ],
)
def test_an_mcp_tool_the_gateway_cannot_run_is_refused(tool: dict[str, Any], param: str) -> None:
    assert refused(input="hi", tools=[tool]).param == param
