"""The Responses API's routes beside ``POST /v1/responses``, through a real gateway with the
official openai SDK's own methods: ``responses.input_items.list`` (paged both ways),
``responses.input_tokens.count`` (the mock's exact count; the estimate, marked, where the
provider cannot count), ``responses.compact`` (a clear 400), ``responses.cancel`` (404 for
another key's response, 400 for a synchronous one), ``responses.retrieve(id, stream=True)``
(400 naming ``stream`` for a response that is not a background one) and ``delete``; every body
validated against OpenAI's schema, every route scoped to the caller's key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest

from tests.proxy.dialects.adapters.gateway import serve
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
CONFIG = """\
server: {access_log: false}
database: {url: "sqlite:///DATABASE"}
providers:
  mock: {type: mock}
  far: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key: "unused"}
plugins:
  - plugin: tests.e2e.key_plugin:HeaderKey
"""


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[str, str, str]]:
    """A gateway whose callers are told apart by ``x-test-key`` (:mod:`tests.e2e.key_plugin`),
    stored responses in its database: its URL and two callers' keys."""
    config = CONFIG.replace("DATABASE", str(tmp_path / "crossway.db"))
    async with serve(tmp_path, config) as url:
        yield url, "alice", "bob"


def sdk(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="client", max_retries=0, default_headers={"x-test-key": key}
    )


async def test_input_items_list_pages_the_input_and_stays_with_its_key(
    gateway: tuple[str, str, str],
) -> None:
    url, alice_key, bob_key = gateway
    async with sdk(url, alice_key) as alice, sdk(url, bob_key) as bob:
        first = await alice.responses.create(model="mock/echo", input="one")
        second = await alice.responses.create(
            model="mock/echo",
            previous_response_id=first.id,
            input=[
                {"role": "user", "content": "two"},
                {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
            ],
        )
        listed = await alice.responses.input_items.list(second.id)
        validate_in(SPEC, "ResponseItemList", listed.to_dict(mode="json"))
        texts = [item.content[0].text for item in listed.data]  # type: ignore[union-attr]
        assert texts == ["three", "two"]  # newest first; the previous response's input is not
        oldest = await alice.responses.input_items.list(second.id, order="asc", limit=1)
        assert [item.content[0].text for item in oldest.data] == ["two"]  # type: ignore[union-attr]
        assert oldest.has_more is True
        rest = await alice.responses.input_items.list(second.id, order="asc", after=oldest.last_id)
        assert [item.content[0].text for item in rest.data] == ["three"]  # type: ignore[union-attr]
        assert rest.has_more is False
        with pytest.raises(openai.NotFoundError):
            await bob.responses.input_items.list(second.id)
        with pytest.raises(openai.BadRequestError) as bad:
            await alice.responses.input_items.list(second.id, limit=101)
        assert bad.value.body["param"] == "limit"  # type: ignore[index]


async def test_input_tokens_counts_exactly_or_marks_the_estimate(
    gateway: tuple[str, str, str],
) -> None:
    url, alice_key, _ = gateway
    async with sdk(url, alice_key) as alice:
        exact = await alice.responses.input_tokens.with_raw_response.count(
            model="mock/echo", input="how many tokens are here"
        )
        counted = exact.parse()
        validate_in(SPEC, "TokenCountsResource", counted.to_dict(mode="json"))
        assert counted.input_tokens > 0
        assert exact.headers["x-crossway-token-count"] == "exact"
        estimated = await alice.responses.input_tokens.with_raw_response.count(
            model="far/gpt-x", input="how many tokens are here"
        )
        assert estimated.parse().input_tokens > 0
        assert estimated.headers["x-crossway-token-count"] == "estimate"


async def test_compact_cancel_and_retrieve_as_a_stream_say_what_the_gateway_cannot_do(
    gateway: tuple[str, str, str],
) -> None:
    url, alice_key, bob_key = gateway
    async with sdk(url, alice_key) as alice, sdk(url, bob_key) as bob:
        created = await alice.responses.create(model="mock/echo", input="hi")
        with pytest.raises(openai.BadRequestError) as compact:
            await alice.responses.compact(model="mock/echo", input="hi")
        assert compact.value.code == "compaction_unsupported"
        validate_in(SPEC, "ErrorResponse", compact.value.response.json())
        with pytest.raises(openai.BadRequestError) as cancel:
            await alice.responses.cancel(created.id)
        assert "synchronous" in cancel.value.message
        with pytest.raises(openai.NotFoundError):
            await bob.responses.cancel(created.id)
        with pytest.raises(openai.BadRequestError) as stream:
            await alice.responses.retrieve(created.id, stream=True)
        assert stream.value.body["param"] == "stream"  # type: ignore[index]
        fetched = await alice.responses.retrieve(created.id)
        validate_in(SPEC, "Response", fetched.to_dict(mode="json", exclude_unset=False))
        await alice.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            await alice.responses.retrieve(created.id)
