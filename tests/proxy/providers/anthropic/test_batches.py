"""proxy/providers/anthropic/batches.py: Anthropic's Message Batches as requests sent through a
recording ``send`` — a submission's requests (never streamed, the upstream model), the poll's
outcomes, the cancel, and the result lines as results, always read at the configured base URL
(never at the ``results_url`` an answer names)."""

from __future__ import annotations

import json

import pytest

from proxy.providers.anthropic.provider import AnthropicConfig, AnthropicProvider
from proxy.providers.base import BatchAPIError, NativeBatchState, NativeResult
from tests.proxy.providers.fakes.batch_send import Recorder


def provider() -> AnthropicProvider:
    config = AnthropicConfig(base_url="http://claude.test/", api_key="key-3")
    return AnthropicProvider("claude", config)


async def test_a_submission_is_one_create_of_every_request() -> None:
    send = Recorder({"/v1/messages/batches": b'{"id": "msgbatch_1"}'})
    lines = [("l0", {"model": "alias", "max_tokens": 9, "stream": False, "messages": []})]
    got = await provider().submit_batch(send, "/v1/messages", "claude-x", lines)
    assert got == "msgbatch_1"
    ((request),) = send.sent
    assert request.url == "http://claude.test/v1/messages/batches"
    assert (request.headers["x-api-key"], request.headers["anthropic-version"]) == (
        "key-3",
        "2023-06-01",
    )
    assert json.loads(request.body) == {
        "requests": [
            {"custom_id": "l0", "params": {"model": "claude-x", "max_tokens": 9, "messages": []}}
        ]
    }


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        ({"processing_status": "in_progress"}, None),
        ({"processing_status": "canceling", "cancel_initiated_at": "t"}, None),
        ({"processing_status": "ended", "cancel_initiated_at": None}, "completed"),
        ({"processing_status": "ended", "cancel_initiated_at": "t"}, "cancelled"),
    ],
)
async def test_a_poll_says_whether_and_how_the_batch_ended(
    answer: dict[str, object], outcome: str | None
) -> None:
    answer["results_url"] = "http://elsewhere.test/results"
    send = Recorder({"/msgbatch_1": json.dumps(answer).encode()})
    state = await provider().poll_batch(send, "msgbatch_1")
    assert state.outcome == outcome
    assert state.results == (() if outcome is None else ("msgbatch_1",))
    ((request),) = send.sent
    assert (request.method, request.url) == (
        "GET",
        "http://claude.test/v1/messages/batches/msgbatch_1",
    )


async def test_results_are_read_at_the_base_url_and_each_kind_maps_to_a_result() -> None:
    lines = [
        {"custom_id": "l0", "result": {"type": "succeeded", "message": {"id": "m"}}},
        {
            "custom_id": "l1",
            "result": {
                "type": "errored",
                "error": {
                    "type": "error",
                    "error": {"type": "rate_limit_error", "message": "slow"},
                },
            },
        },
        {"custom_id": "l2", "result": {"type": "canceled"}},
        {"custom_id": "l3", "result": {"type": "expired"}},
        {"custom_id": "l4", "result": {"type": "errored", "error": {"type": "error"}}},
    ]
    body = b"\n".join(json.dumps(line).encode() for line in lines)
    send = Recorder({"/msgbatch_1/results": body})
    state = NativeBatchState("completed", results=("msgbatch_1",))
    got = [r async for r in provider().batch_results(send.read, state)]
    ((request),) = send.sent
    assert request.url == "http://claude.test/v1/messages/batches/msgbatch_1/results"
    assert got[0] == NativeResult("l0", 200, b'{"id": "m"}', "succeeded")
    assert (got[1].status, got[1].outcome) == (429, "errored")
    assert json.loads(got[1].body or b"")["error"]["message"] == "slow"
    assert got[2:4] == [
        NativeResult("l2", 0, None, "cancelled"),
        NativeResult("l3", 0, None, "expired"),
    ]
    assert (got[4].status, got[4].outcome) == (500, "errored")


async def test_a_cancel_is_a_post_to_the_batchs_cancel() -> None:
    send = Recorder({"/cancel": b"{}"})
    await provider().cancel_batch(send, "msgbatch_1")
    ((request),) = send.sent
    assert request.url == "http://claude.test/v1/messages/batches/msgbatch_1/cancel"


async def test_an_answer_that_is_not_the_batch_apis_is_a_lasting_error() -> None:
    with pytest.raises(BatchAPIError) as raised:
        await provider().submit_batch(
            Recorder({"/batches": b"{}"}), "/v1/messages", "m", [("l0", {})]
        )
    assert raised.value.lasting
