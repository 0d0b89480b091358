"""LangChain's ``ChatOpenAI(use_responses_api=True)`` through the gateway, over the mock and over
the Anthropic-format fake upstream: a call, a stream, a tool round trip, structured output."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from tests.e2e.responses_gateway import UPSTREAMS, Gateway, responses_gateway


@pytest.fixture(params=UPSTREAMS)
async def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with responses_gateway(tmp_path, request.param) as running:
        yield running


def chat(gateway: Gateway, model: str) -> ChatOpenAI:
    return ChatOpenAI(
        model=model,
        base_url=f"{gateway.url}/v1",
        api_key="client",  # type: ignore[arg-type]
        use_responses_api=True,
        max_retries=0,
    )


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return "18C, sunny"


class Weather(BaseModel):
    city: str
    days: int


async def test_invoke(gateway: Gateway) -> None:
    upstream = gateway.upstream
    message = await chat(gateway, upstream.text_model).ainvoke("Lisbon")
    assert message.text == upstream.answer("Lisbon")
    assert message.usage_metadata is not None
    assert message.usage_metadata["input_tokens"] > 0
    assert message.response_metadata["id"].startswith("resp_")


async def test_stream(gateway: Gateway) -> None:
    upstream = gateway.upstream
    pieces = [chunk.text async for chunk in chat(gateway, upstream.text_model).astream("Madrid")]
    assert "".join(pieces) == upstream.answer("Madrid")
    assert len([piece for piece in pieces if piece]) >= 1


async def test_a_tool_round_trip(gateway: Gateway) -> None:
    upstream = gateway.upstream
    model = chat(gateway, upstream.tools_model).bind_tools([get_weather])
    question = HumanMessage("Paris")
    called = await model.ainvoke([question])
    (call,) = called.tool_calls
    assert (call["name"], call["args"]) == ("get_weather", upstream.tool_arguments("Paris"))
    result = get_weather.invoke(call["args"])
    answered = await model.ainvoke(
        [question, called, ToolMessage(content=result, tool_call_id=call["id"])]
    )
    assert answered.text == upstream.after_tool("18C, sunny")


async def test_structured_output(gateway: Gateway) -> None:
    upstream = gateway.upstream
    wanted = Weather(city="Paris", days=3)
    structured = chat(gateway, upstream.text_model).with_structured_output(Weather)
    assert await structured.ainvoke(wanted.model_dump_json()) == wanted
