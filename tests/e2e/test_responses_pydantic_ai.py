"""pydantic-ai's ``OpenAIResponsesModel`` against a real gateway with the cache on: ``run_stream``
with a structured output type (pydantic-ai's output tool, which the mock's ``tools`` model calls
with arguments built from its schema) yields the validated object, on the upstream's stream and
again on the cache hit's replay (where the tool call arrives whole: its arguments must be
carried once, not ``{…}{…}``)."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from proxy.cache.replay import CACHE_HEADER
from tests.proxy.dialects.adapters.gateway import serve

CONFIG = """\
server: {access_log: false}
providers:
  mock: {type: mock}
plugins:
  - cache: {}
"""


class City(BaseModel):
    """The structured output asked for."""

    city: str


async def test_run_stream_with_structured_output_works_on_a_miss_and_a_cache_hit(
    tmp_path: Path,
) -> None:
    seen: list[str] = []

    async def note(response: httpx.Response) -> None:
        seen.append(response.headers.get(CACHE_HEADER, "none"))

    async with (
        serve(tmp_path, CONFIG) as url,
        httpx.AsyncClient(event_hooks={"response": [note]}) as http,
        openai.AsyncOpenAI(
            base_url=f"{url}/v1",
            api_key="client",
            max_retries=0,
            http_client=http,  # type: ignore[arg-type]  # the SDK's stubs name its vendored httpx
        ) as client,
    ):
        model = OpenAIResponsesModel("mock/tools", provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, output_type=City)
        outputs = []
        for _ in range(2):
            async with agent.run_stream("Paris") as result:
                outputs.append(await result.get_output())
    assert outputs == [City(city="Paris"), City(city="Paris")]
    assert seen == ["miss", "hit"]
