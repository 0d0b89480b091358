"""Echoing upstreams for the masking end-to-end tests, on 127.0.0.1: whatever the model was sent
comes back, so a test sees the placeholders the upstream received come back restored.

- ``POST /v1/chat/completions`` (OpenAI-compatible): model ``echo`` answers with the last user
  turn's text; ``tool`` calls the first tool offered with ``{"note": <that text>}``. Streams go
  out in 3-character pieces, one frame and one write each, so every placeholder is split across
  chunks (tool arguments across fragments).
- ``POST /v1/messages`` (Anthropic): streams the echo as two text deltas cut inside the
  placeholder, and writes the body in three pieces — the first ends inside the first delta's
  event and inside a two-byte UTF-8 character, the second ends inside the placeholder — each
  written only once the client has seen what the one before it produced (``seen``, set by the
  test as its events arrive), so each piece is a separate network read of the gateway: LiteLLM
  #22821's three splits.

Every request body is recorded in ``requests``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

PIECE = 3
GATE_TIMEOUT = 10.0


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message["role"] == "user":
            content = message["content"]
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


class EchoUpstream:
    """State and handlers of the echoing upstreams (see the module docstring)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.seen = [asyncio.Event(), asyncio.Event()]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        return app

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        text = _last_user_text(body["messages"])
        tool = body["tools"][0]["function"]["name"] if body.get("tools") else None
        arguments = json.dumps({"note": text})
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if tool is not None:
                call = {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments},
                }
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
            return web.json_response(
                {
                    "id": "chatcmpl-echo",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if tool else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
                }
            )
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if tool is None:
            deltas += [{"content": text[i : i + PIECE]} for i in range(0, len(text), PIECE)]
        else:
            start = {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": tool, "arguments": ""},
            }
            deltas.append({"tool_calls": [start]})
            deltas += [
                {"tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + PIECE]}}]}
                for i in range(0, len(arguments), PIECE)
            ]
        for delta in deltas:
            await response.write(_chunk(body["model"], delta, None))
        await response.write(_chunk(body["model"], {}, "tool_calls" if tool else "stop"))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        text = _last_user_text(body["messages"])
        cut = text.index("<") + 4  # inside the placeholder: "<EMA" | "IL_1>"
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        head = _event(
            "message_start", {"type": "message_start", "message": _message(body["model"])}
        )
        head += _event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        first = _event("content_block_delta", _text_delta(text[:cut]))
        rest = _event("content_block_delta", _text_delta(text[cut:]))
        rest += _event("content_block_stop", {"type": "content_block_stop", "index": 0})
        rest += _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        )
        rest += _event("message_stop", {"type": "message_stop"})
        inside = first.index("ü".encode()) + 1  # between the two bytes of ü
        await response.write(head + first[:inside])
        await asyncio.wait_for(self.seen[0].wait(), GATE_TIMEOUT)
        await response.write(first[inside:])
        await asyncio.wait_for(self.seen[1].wait(), GATE_TIMEOUT)
        await response.write(rest)
        return response


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    chunk = {
        "id": "chatcmpl-echo",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _text_delta(text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }


def _message(model: str) -> dict[str, Any]:
    return {
        "id": "msg_echo",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
