"""An OpenAI-compatible upstream on 127.0.0.1 that answers every request with the most usage
its worst case allows, for the budget-bound tests.

The worst case is the gateway's documented one (:func:`proxy.core.token_estimate.expected_tokens`),
computed here from the body the upstream receives: ``prompt_tokens`` is its messages' text at
four UTF-8 bytes a token (rounded up) plus four a message, ``completion_tokens`` is ``n`` times
the larger of ``max_tokens`` and ``max_completion_tokens`` (``default_output`` when neither is
set), all of it reported as reasoning (the dearer output bucket at the tests' prices). A
whole answer carries ``limit`` tokens of text in each of its ``n`` choices; a stream carries,
per choice, a role frame, up to three content frames of one token and a finish frame, then its
usage when the gateway asked for it. A token is a long word (:data:`TOKEN`, twelve characters:
three tokens to the gateway's character estimate, which charges a reply without usage) when
the call set a limit, which caps that estimate; else four characters, so that even the text of
a call without a limit stays within its worst case as the gateway estimates it.

The first word of the last message is the request's marker (kept in :attr:`seen`); the words
``hold`` (answer nothing more — a whole answer nothing at all, a stream nothing after its
content — until the client goes away) and ``bare`` (report no usage) change the answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

HOLD = "hold"
BARE = "bare"
TOKEN = "w" * 12
SHORT_TOKEN = "w" * 4


class WorstCaseUpstream:
    """State and handler of the upstream (see the module docstring)."""

    def __init__(self, default_output: int) -> None:
        self.default_output = default_output
        self.seen: set[str] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        words = _text(body["messages"][-1]).split()
        self.seen.add(words[0])
        n = body.get("n") or 1
        limits = [body.get(name) or 0 for name in ("max_tokens", "max_completion_tokens")]
        limit = max(limits) or self.default_output
        token = TOKEN if max(limits) else SHORT_TOKEN
        usage = None
        if BARE not in words:
            completion = n * limit
            prompt = prompt_tokens(body["messages"])
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "completion_tokens_details": {"reasoning_tokens": completion},
            }
        if body.get("stream"):
            return await self._stream(request, body, (n, limit, token), usage, HOLD in words)
        if HOLD in words:
            await asyncio.Event().wait()  # until the gateway gives up on it
        choices = [
            {
                "index": index,
                "message": {"role": "assistant", "content": token * limit},
                "finish_reason": "length",
            }
            for index in range(n)
        ]
        answer = {"id": "worst", "object": "chat.completion", "model": body["model"]}
        return web.json_response({**answer, "choices": choices, "usage": usage})

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        shape: tuple[int, int, str],
        usage: dict[str, Any] | None,
        hold: bool,
    ) -> web.StreamResponse:
        n, limit, token = shape
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        model = body["model"]
        for index in range(n):
            await response.write(_frame(model, index, {"role": "assistant", "content": ""}))
            for _ in range(min(limit, 3)):
                await response.write(_frame(model, index, {"content": token}))
        if hold:
            await asyncio.Event().wait()  # until the gateway gives up on it
        for index in range(n):
            await response.write(_frame(model, index, {}, "length"))
        if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            chunk = {"id": "worst", "object": "chat.completion.chunk", "model": model}
            await response.write(_data({**chunk, "choices": [], "usage": usage}))
        await response.write(b"data: [DONE]\n\n")
        return response


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """The gateway's estimate of ``messages`` (text only): four UTF-8 bytes a token, rounded up,
    plus four a message."""
    size = sum(len(_text(message).encode()) for message in messages)
    return -(-size // 4) + 4 * len(messages)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def _frame(model: str, index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    chunk = {"id": "worst", "object": "chat.completion.chunk", "model": model}
    return _data({**chunk, "choices": [choice]})


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
