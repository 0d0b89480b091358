"""A fake Anthropic Messages upstream (``POST /v1/messages``), recorded-shape bodies and events.

Like the real API it rejects a request without ``x-api-key``/``anthropic-version`` (401/400),
without ``max_tokens``, or with a ``system`` role inside ``messages`` (400). Streams are named SSE
events: ``message_start``, ``content_block_start``/``_delta``/``_stop``, ``ping``,
``message_delta``, ``message_stop``; a streamed tool call comes after a text block, so the
content-block index differs from the tool-call index. A request asking for structured output
(``output_config.format.schema``) is answered with JSON built from the schema
(:func:`structured_answer`) instead of the text. ``POST /v1/messages/count_tokens`` answers
:data:`COUNTED_TOKENS` for any valid body (one without ``max_tokens``, as the API wants).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from proxy.core.canonical import Usage
from tests.proxy.providers.fakes.base import (
    CUT_MODEL,
    RETRY_AFTER,
    Received,
    RequestView,
    Turn,
    answer,
    receive,
    split,
    tool_arguments_text,
    wants_tool_call,
    word_pieces,
)

KEY = "sk-ant-fake-key-0123456789"
MESSAGE_ID = "msg_01XFDUDYJgAACzvnptvVoYEL"
TOOL_USE_ID = "toolu_01A09q90qw90lq917835lq9"
COUNTED_TOKENS = 1234
USAGE = {
    "input_tokens": 11,
    "cache_creation_input_tokens": 5,
    "cache_read_input_tokens": 7,
    "cache_creation": {"ephemeral_5m_input_tokens": 5, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 9,
    "service_tier": "standard",
}
_ERRORS: dict[str, tuple[int, str, str]] = {
    "fail-429": (
        429,
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 50,000 input tokens "
        "per minute. Please try again later.",
    ),
    "fail-500": (500, "api_error", "Internal server error"),
    "fail-503": (529, "overloaded_error", "Overloaded"),
    "fail-auth": (401, "authentication_error", "invalid x-api-key"),
    "fail-context": (
        400,
        "invalid_request_error",
        "prompt is too long: 208310 tokens > 200000 maximum",
    ),
    "fail-policy": (400, "invalid_request_error", "Output blocked by content filtering policy"),
}


def anthropic_view(body: Any) -> RequestView:
    """The neutral view of a Messages API request body."""
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "\n".join(block["text"] for block in system)
    turns = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        kinds = tuple(_KINDS.get(block["type"], block["type"]) for block in content)
        turns.append(Turn(message["role"], kinds, "".join(_text(block) for block in content)))
    tools = tuple(tool["name"] for tool in body.get("tools") or ())
    return RequestView(system, tuple(turns), tools)


_KINDS = {"tool_use": "tool_call"}


def _text(block: dict[str, Any]) -> str:
    if block["type"] == "text":
        return block["text"]
    if block["type"] == "tool_result":
        content = block.get("content") or ""
        if isinstance(content, list):
            return "".join(_text(inner) for inner in content)
        return content
    return ""


_SAMPLES: dict[str, Any] = {"string": "Paris", "integer": 3, "number": 1.5, "boolean": True}


def structured_answer(body: Any) -> str | None:
    """JSON text satisfying the request's output schema (flat objects of scalars), if it asked."""
    schema = ((body.get("output_config") or {}).get("format") or {}).get("schema")
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties") or {}
    return json.dumps({name: _SAMPLES.get(spec.get("type")) for name, spec in properties.items()})


def _error(status: int, kind: str, message: str, **headers: str) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}
    return web.json_response(body, status=status, headers=headers)


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


class AnthropicFake:
    """See :class:`tests.proxy.providers.fakes.base.ProviderFake`."""

    type = "anthropic"
    expected_usage = Usage(input=11, cache_read=7, cache_write=5, output=9)
    streams_tool_arguments = True

    def __init__(self) -> None:
        self.requests: list[Received] = []

    def config(self, base_url: str) -> dict[str, Any]:
        return {"type": "anthropic", "base_url": base_url, "api_key": KEY}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        return app

    def view(self, body: Any) -> RequestView:
        return anthropic_view(body)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        received = await receive(request, self.requests)
        body = received.body
        if request.headers.get("x-api-key") != KEY:
            return _error(401, "authentication_error", "invalid x-api-key")
        if "max_tokens" in body or "stream" in body:
            return _error(
                400, "invalid_request_error", "max_tokens: Extra inputs are not permitted"
            )
        if not body.get("messages") or not body.get("model"):
            return _error(400, "invalid_request_error", "messages: Field required")
        if body["model"] in _ERRORS:
            status, kind, message = _ERRORS[body["model"]]
            headers = {"retry-after": RETRY_AFTER} if status == 429 else {}
            return _error(status, kind, message, **headers)
        return web.json_response({"input_tokens": COUNTED_TOKENS})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        received = await receive(request, self.requests)
        body = received.body
        if request.headers.get("x-api-key") != KEY:
            return _error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        if not isinstance(body.get("max_tokens"), int):
            return _error(400, "invalid_request_error", "max_tokens: Field required")
        if any(message["role"] not in ("user", "assistant") for message in body["messages"]):
            return _error(400, "invalid_request_error", "messages: Unexpected role")
        model = body["model"]
        if model in _ERRORS:
            status, kind, message = _ERRORS[model]
            headers = {"retry-after": RETRY_AFTER} if status == 429 else {}
            return _error(status, kind, message, **headers)
        tool = body["tools"][0]["name"] if wants_tool_call(self.view(body)) else None
        text = structured_answer(body) or answer(self.type)
        if body.get("stream"):
            return await self._stream(request, model, tool, text)
        if tool is None:
            content: list[dict[str, Any]] = [{"type": "text", "text": text}]
            stop_reason = "end_turn"
        else:
            content = [
                {"type": "tool_use", "id": TOOL_USE_ID, "name": tool, "input": {"city": "Paris"}}
            ]
            stop_reason = "tool_use"
        return web.json_response(
            {
                "id": MESSAGE_ID,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": None,
                "usage": USAGE,
            }
        )

    async def _stream(
        self, request: web.Request, model: str, tool: str | None, answer_text: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        start = {
            "id": MESSAGE_ID,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**USAGE, "output_tokens": 1},
        }
        events = [
            _event("message_start", {"type": "message_start", "message": start}),
            _event("content_block_start", _block_start(0, {"type": "text", "text": ""})),
            _event("ping", {"type": "ping"}),
        ]
        text = answer_text if tool is None else "Let me check."
        events += [
            _event("content_block_delta", _text_delta(0, piece)) for piece in word_pieces(text)
        ]
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        if tool is not None:
            block = {"type": "tool_use", "id": TOOL_USE_ID, "name": tool, "input": {}}
            events.append(_event("content_block_start", _block_start(1, block)))
            pieces = ["", *split(tool_arguments_text(), 6)]
            events += [_event("content_block_delta", _json_delta(1, piece)) for piece in pieces]
            events.append(_event("content_block_stop", {"type": "content_block_stop", "index": 1}))
        for i, event in enumerate(events):
            if model == CUT_MODEL and i == 5:
                return response  # the body ends here: no message_delta, no message_stop
            await response.write(event)
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": "end_turn" if tool is None else "tool_use",
                "stop_sequence": None,
            },
            "usage": {"output_tokens": USAGE["output_tokens"]},
        }
        await response.write(_event("message_delta", delta))
        await response.write(_event("message_stop", {"type": "message_stop"}))
        return response


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _text_delta(index: int, text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def _json_delta(index: int, partial: str) -> dict[str, Any]:
    delta = {"type": "input_json_delta", "partial_json": partial}
    return {"type": "content_block_delta", "index": index, "delta": delta}
