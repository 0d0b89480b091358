"""The official ``openai`` SDK's Responses API against the gateway, over the mock and over the
Anthropic-format fake upstream: ``responses.create``, ``responses.stream`` and ``stream=True``,
a function tool round trip with ``function_call_output`` (stateless, and through
``previous_response_id``), chaining, structured output with ``responses.parse``, and
``retrieve`` / ``delete``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel

from tests.e2e.responses_gateway import UPSTREAMS, Gateway, responses_gateway
from tests.proxy.dialects.adapters.responses import validate_event
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


class Weather(BaseModel):
    city: str
    days: int


@pytest.fixture(params=UPSTREAMS)
async def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with responses_gateway(tmp_path, request.param) as running:
        yield running


async def test_create(gateway: Gateway) -> None:
    upstream = gateway.upstream
    response = await gateway.client().responses.create(
        model=upstream.text_model,
        instructions="Be brief.",
        input="Paris",
        max_output_tokens=100,
        temperature=0.5,
        metadata={"ticket": "T-1"},
    )
    assert response.output_text == upstream.answer("Paris")
    assert response.id.startswith("resp_")
    assert (response.status, response.object) == ("completed", "response")
    assert response.usage is not None
    assert response.usage.input_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert (response.instructions, response.metadata) == ("Be brief.", {"ticket": "T-1"})
    validate_in(SPEC, "Response", response.to_dict(mode="json", exclude_unset=False))
    if upstream.fake is not None:
        sent = upstream.sent()
        assert sent["system"] == [{"type": "text", "text": "Be brief."}]
        assert sent["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "Paris"}]}
        ]
        assert (sent["max_tokens"], sent["temperature"]) == (100, 0.5)


async def test_the_stream_helper(gateway: Gateway) -> None:
    upstream = gateway.upstream
    deltas: list[str] = []
    kinds: list[str] = []
    async with gateway.client().responses.stream(model=upstream.text_model, input="Rome") as stream:
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == upstream.answer("Rome")
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert final.usage is not None
    assert final.usage.output_tokens > 0


async def test_stream_true_yields_every_event_in_order(gateway: Gateway) -> None:
    upstream = gateway.upstream
    stream = await gateway.client().responses.create(
        model=upstream.text_model, input="Oslo", stream=True
    )
    events = [event async for event in stream]
    for position, event in enumerate(events):
        payload = event.to_dict(mode="json", exclude_unset=False)
        validate_event(payload)
        assert event.sequence_number == position
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == upstream.answer("Oslo")  # type: ignore[union-attr]


async def test_a_function_call_round_trip_with_function_call_output(gateway: Gateway) -> None:
    upstream = gateway.upstream
    client = gateway.client()
    question = [{"role": "user", "content": "Paris"}]
    first = await client.responses.create(
        model=upstream.tools_model,
        input=question,
        tools=[WEATHER],
        store=False,  # type: ignore[list-item]
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == upstream.tool_arguments("Paris")
    second = await client.responses.create(
        model=upstream.tools_model,
        tools=[WEATHER],  # type: ignore[list-item]
        store=False,
        input=[
            *question,
            *[item.to_dict() for item in first.output],  # as an agent loop sends them back
            {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
        ],  # type: ignore[arg-type]
    )
    assert second.output_text == upstream.after_tool("18C")
    if upstream.fake is not None:
        turns = upstream.sent()["messages"]
        assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
        assert turns[1]["content"][-1]["type"] == "tool_use"
        assert turns[2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": turns[1]["content"][-1]["id"],
            "content": "18C",
        }


async def test_a_function_call_answered_through_previous_response_id(gateway: Gateway) -> None:
    upstream = gateway.upstream
    client = gateway.client()
    first = await client.responses.create(
        model=upstream.tools_model,
        input="Paris",
        tools=[WEATHER],  # type: ignore[list-item]
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    second = await client.responses.create(
        model=upstream.tools_model,
        previous_response_id=first.id,
        tools=[WEATHER],  # type: ignore[list-item]
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}],
    )
    assert second.output_text == upstream.after_tool("18C")
    assert second.previous_response_id == first.id


async def test_previous_response_id_carries_the_conversation(gateway: Gateway) -> None:
    upstream = gateway.upstream
    client = gateway.client()
    first = await client.responses.create(model=upstream.text_model, input="one two three")
    second = await client.responses.create(
        model=upstream.text_model, input="four", previous_response_id=first.id
    )
    assert second.output_text == upstream.answer("four")
    assert second.usage is not None
    if upstream.fake is None:
        # The mock counts a token per word and one per message: the history was sent.
        assert second.usage.input_tokens == (3 + 1) + (3 + 1) + (1 + 1)
    else:
        assert [turn["role"] for turn in upstream.sent()["messages"]] == [
            "user",
            "assistant",
            "user",
        ]
        assert upstream.sent()["messages"][1]["content"][0]["text"] == upstream.answer("x")
    fetched = await client.responses.retrieve(second.id)
    assert fetched.output_text == second.output_text
    await client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as info:
        await client.responses.create(
            model=upstream.text_model, input="five", previous_response_id=first.id
        )
    assert info.value.code == "previous_response_not_found"


async def test_structured_output_with_text_format(gateway: Gateway) -> None:
    upstream = gateway.upstream
    wanted = Weather(city="Paris", days=3)
    parsed = await gateway.client().responses.parse(
        model=upstream.text_model,
        input=wanted.model_dump_json(),  # what the mock echoes
        text_format=Weather,
    )
    assert parsed.output_parsed == wanted
    if upstream.fake is not None:
        schema = upstream.sent()["output_config"]["format"]["schema"]
        assert set(schema["properties"]) == {"city", "days"}


async def test_built_in_tools_are_a_clear_400(gateway: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await gateway.client().responses.create(
            model=gateway.upstream.text_model, input="x", tools=[{"type": "web_search"}]
        )
    assert info.value.param == "tools[0].type"
    assert "web_search" in info.value.message
