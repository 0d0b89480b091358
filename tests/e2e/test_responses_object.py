"""The full response object through a real gateway, read by the official openai SDK: every field
OpenAI's schema and Open Responses give it (``completed_at``, ``background``, ``service_tier``,
``top_logprobs``, ``max_tool_calls``, ``safety_identifier``, ``prompt_cache_key``, the
penalties), ``model`` echoing what the request named, and a request that names no model served
by the router's default (a 400 naming ``model`` only when there is none)."""

from __future__ import annotations

import time
from pathlib import Path

import openai

from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS, post, serve
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"


async def test_the_response_object_is_whole_and_names_the_model_asked_for(
    tmp_path: Path,
) -> None:
    async with (
        serve(tmp_path) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client", max_retries=0) as client,
    ):
        before = int(time.time())
        response = await client.responses.create(
            model="mock/echo",
            input="hello",
            safety_identifier="user-7",
            prompt_cache_key="pck",
            top_logprobs=2,
            max_tool_calls=4,
            extra_body={"presence_penalty": 0.5, "frequency_penalty": -0.5},
        )
        stored = await client.responses.retrieve(response.id)
    body = response.to_dict(mode="json", exclude_unset=False)
    validate_in(SPEC, "Response", body)
    assert response.model == "mock/echo"
    assert response.completed_at is not None
    assert response.completed_at >= before
    assert (response.background, response.service_tier) == (False, "default")
    assert (response.top_logprobs, response.max_tool_calls) == (2, 4)
    assert (response.safety_identifier, response.prompt_cache_key) == ("user-7", "pck")
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -0.5)
    assert stored.to_dict(mode="json") == response.to_dict(mode="json")


async def test_a_request_without_a_model_gets_the_default_or_a_400_naming_model(
    tmp_path: Path,
) -> None:
    with_default = MOCK_PROVIDERS.replace(
        "mock: {type: mock, faults: true}", "mock: {type: mock, faults: true, default_model: echo}"
    )
    async with serve(tmp_path, with_default) as url:
        answer = await post(url, "/v1/responses", {"input": "hi"})
        assert answer.status == 200, answer.body
        assert answer.json()["model"] == "mock/echo"
        assert answer.json()["output_text"] == "hi"
        validate_in(SPEC, "Response", answer.json())
    async with serve(tmp_path, MOCK_PROVIDERS) as url:
        refused = await post(url, "/v1/responses", {"input": "hi"})
    assert refused.status == 400
    assert refused.json()["error"]["param"] == "model"
    validate_in(SPEC, "ErrorResponse", refused.json())


async def test_a_streamed_response_names_the_model_asked_for(tmp_path: Path) -> None:
    async with (
        serve(tmp_path) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client", max_retries=0) as client,
        client.responses.stream(model="mock/echo", input="hi") as events,
    ):
        final = await events.get_final_response()
    assert final.model == "mock/echo"
    assert final.completed_at is not None


async def test_temperature_and_top_p_are_numbers_whether_or_not_the_request_set_them(
    tmp_path: Path,
) -> None:
    """Open Responses' ResponseResource requires both as numbers (its compliance suite refuses
    null): the request's values, else the API's default of 1, streamed or not, and stored."""
    async with (
        serve(tmp_path) as url,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="client", max_retries=0) as client,
    ):
        unset = await client.responses.create(model="mock/echo", input="hi")
        chosen = await client.responses.create(
            model="mock/echo", input="hi", temperature=0.2, top_p=0.5
        )
        async with client.responses.stream(model="mock/echo", input="hi") as events:
            streamed = await events.get_final_response()
        stored = await client.responses.retrieve(unset.id)
        raw = await post(url, "/v1/responses", {"model": "mock/echo", "input": "hi"})
    assert (unset.temperature, unset.top_p) == (1.0, 1.0)
    assert (chosen.temperature, chosen.top_p) == (0.2, 0.5)
    assert (streamed.temperature, streamed.top_p) == (1.0, 1.0)
    assert (stored.temperature, stored.top_p) == (1.0, 1.0)
    assert (raw.json()["temperature"], raw.json()["top_p"]) == (1.0, 1.0)
    validate_in(SPEC, "Response", raw.json())
