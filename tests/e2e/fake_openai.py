"""A real OpenAI-compatible upstream on 127.0.0.1 for end-to-end tests.

Its behaviour is chosen by the requested model name:

- ``gpt-test``: a normal answer (streamed word by word when asked), usage with cached and
  reasoning tokens; with ``tools`` in the request it calls the first tool instead.
- ``fail-<status>``: that status with an OpenAI error body that echoes the gateway's key
  (as some upstreams do), so tests can prove it is sanitised; 429 carries ``retry-after: 2``.
- ``slow-stream``: one chunk, then a chunk every 0.2 s for a long time (for disconnect tests).
- ``hang``: never answers.
- ``cut-stream``: two chunks, then the connection is dropped.
- ``burst-stream``: the normal stream, every frame of it sent in one write (``burst_frames``
  gives those bytes), as a fast upstream's frames arrive.
- ``gated``: the normal answer, once the test sets ``gate`` (for requests held in flight).
- ``gated-stream``: the normal stream's first chunk at once, the second once ``gate`` is set,
  the rest once ``second_gate`` is set.
- ``gpt-rich``: an answer with what the gateway does not model, at every level (``RICH_BODY``,
  ``rich_frames``): url-citation annotations, ``audio``, a vendor's fields, usage details.

Every request (body and headers) is recorded; ``closed_streams`` counts streams whose client
went away before the end.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

ANSWER = "Hello from the fake upstream"
USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 5,
    "total_tokens": 15,
    "prompt_tokens_details": {"cached_tokens": 4},
    "completion_tokens_details": {"reasoning_tokens": 1},
}


class FakeOpenAI:
    """State and handlers of the fake upstream."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.closed_streams = 0
        self.stream_started = asyncio.Event()
        self.gate = asyncio.Event()
        self.second_gate = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        model = body["model"]
        if model.startswith("fail-"):
            return self._fail(int(model.removeprefix("fail-")), request)
        if model == "hang":
            await asyncio.Event().wait()
        if model == "gated":
            await self.gate.wait()
        if model == "gpt-rich":
            return await self._rich(request, body)
        tool_call = _tool_call(body)
        if body.get("stream"):
            return await self._stream(request, body, model, tool_call)
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER, "refusal": None}
        finish = "stop"
        if tool_call is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
            finish = "tool_calls"
        return web.json_response(
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": 1_700_000_001,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": USAGE,
                "system_fingerprint": "fp_fake",
            }
        )

    async def _rich(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if not body.get("stream"):
            return web.json_response(RICH_BODY)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for frame in rich_frames(include_usage):
            await response.write(b"data: " + json.dumps(frame).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    def _fail(self, status: int, request: web.Request) -> web.Response:
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        headers = {"retry-after": "2"} if status == 429 else {}
        code = "context_length_exceeded" if status == 413 else "upstream_code"
        return web.json_response(
            {
                "error": {
                    "message": f"Incorrect API key provided: {key}. Failure {status}.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": code,
                }
            },
            status=400 if status == 413 else status,
            headers=headers,
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        model: str,
        tool_call: dict[str, Any] | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if model == "burst-stream":
            await response.write(burst_frames(model, include_usage))
            return response
        deltas = _deltas(tool_call)
        try:
            for i, delta in enumerate(deltas):
                if model == "cut-stream" and i == 2:
                    request.transport.close()
                    return response
                await response.write(_frame(model, delta, None))
                if model == "gated-stream" and i < 2:
                    await (self.gate if i == 0 else self.second_gate).wait()
                if model == "slow-stream":
                    self.stream_started.set()
                    await asyncio.sleep(0.2 if i else 0)
            if model == "slow-stream":
                for _ in range(300):
                    await asyncio.sleep(0.2)
                    await response.write(_frame(model, {"content": "."}, None))
            finish = "tool_calls" if tool_call is not None else "stop"
            await response.write(_frame(model, {}, finish))
            if include_usage:
                usage_chunk = _chunk(model, [], USAGE)
                await response.write(b"data: " + json.dumps(usage_chunk).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.closed_streams += 1
            raise
        return response


def burst_frames(model: str, include_usage: bool) -> bytes:
    """The whole body of a ``burst-stream`` answer: content frames, [usage], [DONE]."""
    frames = [_frame(model, delta, None) for delta in _deltas(None)]
    frames.append(_frame(model, {}, "stop"))
    if include_usage:
        frames.append(b"data: " + json.dumps(_chunk(model, [], USAGE)).encode() + b"\n\n")
    frames.append(b"data: [DONE]\n\n")
    return b"".join(frames)


def _tool_call(body: dict[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools")
    if not tools:
        return None
    name = tools[0]["function"]["name"]
    return {
        "id": "call_fake_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps({"city": "Paris", "days": 3})},
    }


def _deltas(tool_call: dict[str, Any] | None) -> list[dict[str, Any]]:
    if tool_call is None:
        words = ANSWER.split(" ")
        return [{"role": "assistant", "content": ""}] + [
            {"content": w if i == 0 else " " + w} for i, w in enumerate(words)
        ]
    arguments = tool_call["function"]["arguments"]
    pieces = [arguments[i : i + 5] for i in range(0, len(arguments), 5)]
    first = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "index": 0,
                "id": tool_call["id"],
                "type": "function",
                "function": {"name": tool_call["function"]["name"], "arguments": ""},
            }
        ],
    }
    return [first] + [
        {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]} for piece in pieces
    ]


def _chunk(model: str, choices: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_001,
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def _frame(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    chunk = _chunk(model, [{"index": 0, "delta": delta, "finish_reason": finish}], None)
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


RICH_TEXT = "Paris is the capital of France."
RICH_ANNOTATIONS = [
    {
        "type": "url_citation",
        "url_citation": {
            "start_index": 0,
            "end_index": 5,
            "url": "https://en.wikipedia.org/wiki/Paris",
            "title": "Paris - Wikipedia",
        },
    }
]
RICH_USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 9,
    "total_tokens": 21,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 4,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
    "vendor_units": 7,
}
RICH_BODY: dict[str, Any] = {
    "id": "chatcmpl-rich",
    "object": "chat.completion",
    "created": 1_700_000_002,
    "model": "gpt-rich",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": RICH_TEXT,
                "refusal": None,
                "annotations": RICH_ANNOTATIONS,
                "audio": {
                    "id": "audio_abc",
                    "data": "UklGRg==",
                    "expires_at": 1_700_003_600,
                    "transcript": RICH_TEXT,
                },
                "vendor_message_note": "kept",
            },
            "finish_reason": "stop",
            "logprobs": None,
            "content_filter_results": {"hate": {"filtered": False, "severity": "safe"}},
        }
    ],
    "usage": RICH_USAGE,
    "service_tier": "default",
    "system_fingerprint": "fp_rich",
    "vendor_trace": {"region": "eu-west", "hops": [1, 2]},
}


def rich_frames(include_usage: bool) -> list[dict[str, Any]]:
    """The ``gpt-rich`` stream's chunks (usage last when asked), as JSON objects."""
    head = {
        "id": "chatcmpl-rich",
        "object": "chat.completion.chunk",
        "created": 1_700_000_002,
        "model": "gpt-rich",
        "service_tier": "default",
        "vendor_trace": {"region": "eu-west"},
    }
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "refusal": None},
        {"content": "Paris"},
        {"content": " is the capital of France."},
        {"annotations": RICH_ANNOTATIONS},
        {"audio": {"id": "audio_abc", "transcript": RICH_TEXT}},
    ]
    frames = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        for delta in deltas
    ]
    frames.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if include_usage:
        frames.append({**head, "choices": [], "usage": RICH_USAGE})
    return frames
