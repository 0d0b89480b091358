"""A fake OpenAI chat-completions upstream (``POST /v1/chat/completions``).

Error bodies are OpenAI's real ones: ``{"error": {message, type, param, code}}`` with
``context_length_exceeded`` and ``content_policy_violation`` codes; streams are
``data: {chat.completion.chunk}`` frames ending with ``data: [DONE]``.
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

KEY = "sk-fake-openai-key-0123456789"
USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 9,
    "total_tokens": 21,
    "prompt_tokens_details": {"cached_tokens": 5, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 3, "audio_tokens": 0},
}
_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "fail-429": (
        429,
        {
            "message": "Rate limit reached for gpt-4o in organization org-x on requests per min "
            "(RPM): Limit 3, Used 3, Requested 1. Please try again in 3s.",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        },
    ),
    "fail-500": (
        500,
        {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        },
    ),
    "fail-503": (
        503,
        {
            "message": "The engine is currently overloaded, please try again later.",
            "type": "server_error",
            "param": None,
            "code": None,
        },
    ),
    "fail-auth": (
        401,
        {
            "message": "Incorrect API key provided: sk-fake-***6789. You can find your API key "
            "at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        },
    ),
    "fail-context": (
        400,
        {
            "message": "This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 130512 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        },
    ),
    "fail-policy": (
        400,
        {
            "message": "Your request was rejected as a result of our safety system. Your prompt "
            "may contain text that is not allowed by our safety system.",
            "type": "invalid_request_error",
            "param": None,
            "code": "content_policy_violation",
        },
    ),
}


def openai_view(body: Any) -> RequestView:
    """The neutral view of an OpenAI chat request body (shared by OpenAI-shaped fakes)."""
    system: list[str] = []
    turns: list[Turn] = []
    for message in body["messages"]:
        role = message["role"]
        kinds, text = _content(message.get("content"))
        if role in ("system", "developer"):
            system.append(text)
            continue
        if role == "tool":
            turns.append(Turn("tool", ("tool_result",), text))
            continue
        kinds += tuple("tool_call" for _ in message.get("tool_calls") or ())
        turns.append(Turn(role, kinds, text))
    tools = tuple(tool["function"]["name"] for tool in body.get("tools") or ())
    return RequestView("\n".join(system), tuple(turns), tools)


def _content(content: Any) -> tuple[tuple[str, ...], str]:
    if content is None:
        return (), ""
    if isinstance(content, str):
        return (("text",) if content else ()), content
    kinds = tuple("image" if part["type"] == "image_url" else part["type"] for part in content)
    text = "".join(part.get("text", "") for part in content)
    return kinds, text


class OpenAIFake:
    """See :class:`tests.proxy.providers.fakes.base.ProviderFake`."""

    type = "openai"
    expected_usage = Usage(input=7, cache_read=5, output=6, reasoning=3)
    streams_tool_arguments = True

    def __init__(self) -> None:
        self.requests: list[Received] = []

    def config(self, base_url: str) -> dict[str, Any]:
        return {"type": "openai", "base_url": f"{base_url}/v1", "api_key": KEY}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        return app

    def view(self, body: Any) -> RequestView:
        return openai_view(body)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = (await receive(request, self.requests)).body
        model = body["model"]
        if model in _ERRORS:
            status, error = _ERRORS[model]
            headers = {"retry-after": RETRY_AFTER} if status == 429 else {}
            return web.json_response({"error": error}, status=status, headers=headers)
        tool = body["tools"][0]["function"]["name"] if wants_tool_call(self.view(body)) else None
        if body.get("stream"):
            return await self._stream(request, body, tool)
        message: dict[str, Any] = {"role": "assistant", "content": answer(self.type)}
        finish = "stop"
        if tool is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [_tool_call(tool)]}
            finish = "tool_calls"
        message["refusal"] = None
        return web.json_response(
            _envelope(
                model,
                "chat.completion",
                [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                USAGE,
            )
        )

    async def _stream(
        self, request: web.Request, body: dict[str, Any], tool: str | None
    ) -> web.StreamResponse:
        model = body["model"]
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        first: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
        if tool is None:
            deltas = [{"content": piece} for piece in word_pieces(answer(self.type))]
        else:
            call = {**_tool_call(tool), "index": 0}
            call["function"] = {"name": tool, "arguments": ""}
            first = {"role": "assistant", "content": None, "tool_calls": [call]}
            deltas = [
                {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
                for piece in split(tool_arguments_text(), 6)
            ]
        frames = [first, *deltas]
        for i, delta in enumerate(frames):
            if model == CUT_MODEL and i == 2:
                return response  # the body ends here: no finish, no [DONE]
            await response.write(_frame(model, [_choice(delta, None)], None))
        finish = "stop" if tool is None else "tool_calls"
        await response.write(_frame(model, [_choice({}, finish)], None))
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(_frame(model, [], USAGE))
        await response.write(b"data: [DONE]\n\n")
        return response


def _tool_call(name: str) -> dict[str, Any]:
    return {
        "id": "call_fake_openai_1",
        "type": "function",
        "function": {"name": name, "arguments": tool_arguments_text()},
    }


def _choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


def _envelope(
    model: str, kind: str, choices: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake-openai",
        "object": kind,
        "created": 1_700_000_002,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": usage,
    }


def _frame(model: str, choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
    chunk = _envelope(model, "chat.completion.chunk", choices, usage)
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"
