"""A batch's usage: the output lines' usages summed, whichever endpoint's shape each has (chat
completions, responses, embeddings); a line without a usage, or not JSON, adds nothing."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from proxy.batches.objects import BatchUsage
from proxy.batches.usage import UsageTally


def line(usage: Any) -> bytes:
    body = {"object": "x"} if usage is None else {"usage": usage}
    output = {"id": "batch_req_1", "custom_id": "c", "error": None}
    output["response"] = {"status_code": 200, "request_id": "r", "body": body}
    return json.dumps(output).encode()


def test_the_usages_of_every_endpoint_are_summed() -> None:
    tally = UsageTally()
    tally.add(
        line(
            {
                "prompt_tokens": 10,
                "completion_tokens": 4,
                "total_tokens": 14,
                "prompt_tokens_details": {"cached_tokens": 3},
                "completion_tokens_details": {"reasoning_tokens": 2},
            }
        )
    )
    tally.add(
        line(
            {
                "input_tokens": 7,
                "output_tokens": 5,
                "total_tokens": 12,
                "input_tokens_details": {"cached_tokens": 1},
                "output_tokens_details": {"reasoning_tokens": 4},
            }
        )
    )
    tally.add(line({"prompt_tokens": 6, "total_tokens": 6}))  # embeddings
    tally.add(line({"prompt_tokens": 2, "completion_tokens": 1}))  # no total: their sum
    tally.add(line({"prompt_tokens": 1, "prompt_tokens_details": None}))
    expected = {
        "input_tokens": 26,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 6},
        "total_tokens": 36,
    }
    assert msgspec.to_builtins(tally.usage) == expected


def test_lines_without_a_usage_add_nothing() -> None:
    tally = UsageTally()
    for raw in (line(None), b"not json", b'{"response": null}', line("many")):
        tally.add(raw)
    assert tally.usage == BatchUsage()
