"""The OpenAI Agents SDK's default model class (the Responses model its OpenAI provider hands
out) running an agent with one function tool through the gateway, over the mock and over the
Anthropic-format fake upstream, whole and streamed. Tracing is off: nothing leaves 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agents import Agent, OpenAIProvider, OpenAIResponsesModel, RunConfig, Runner, function_tool

from tests.e2e.responses_gateway import UPSTREAMS, Gateway, responses_gateway


@pytest.fixture(params=UPSTREAMS)
async def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Gateway]:
    async with responses_gateway(tmp_path, request.param) as running:
        yield running


def weather_agent(model: str, asked: list[str]) -> Agent:
    @function_tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        asked.append(city)
        return "18C, sunny"

    return Agent(
        name="weather",
        instructions="Answer with the weather tool.",
        tools=[get_weather],
        model=model,
    )


def run_config(gateway: Gateway) -> RunConfig:
    provider = OpenAIProvider(openai_client=gateway.client())
    return RunConfig(model_provider=provider, tracing_disabled=True)


def test_the_provider_hands_out_the_responses_model(tmp_path: Path) -> None:
    provider = OpenAIProvider(api_key="unused", base_url="http://127.0.0.1:9/v1")
    assert isinstance(provider.get_model("any"), OpenAIResponsesModel)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_an_agent_calls_its_tool_and_answers(gateway: Gateway, streamed: bool) -> None:
    upstream = gateway.upstream
    asked: list[str] = []
    agent = weather_agent(upstream.tools_model, asked)
    if streamed:
        result = Runner.run_streamed(agent, "Paris", run_config=run_config(gateway))
        kinds = [event.type async for event in result.stream_events()]
        assert "raw_response_event" in kinds
    else:
        result = await Runner.run(agent, "Paris", run_config=run_config(gateway))  # type: ignore[assignment]
    assert asked == [upstream.tool_arguments("Paris")["city"]]
    assert result.final_output == upstream.after_tool("18C, sunny")
    if upstream.fake is not None:
        sent = upstream.sent()
        assert sent["system"] == [{"type": "text", "text": "Answer with the weather tool."}]
        assert [turn["role"] for turn in sent["messages"]] == ["user", "assistant", "user"]
        assert sent["messages"][2]["content"][0]["type"] == "tool_result"
