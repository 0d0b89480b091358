"""A fake Azure OpenAI upstream: ``POST /openai/deployments/{deployment}/chat/completions``.

Like the real service it requires ``api-version`` in the query (404 without, as Azure answers)
and the ``api-key`` header (401 otherwise); the behaviour follows the *deployment* in the path,
not the body's ``model``, and the config maps the model ``text`` to the deployment
``prod-text`` to prove the mapping. Bodies carry Azure's content-filter annotations
(``prompt_filter_results``, ``content_filter_results``); a stream opens with a
prompt-annotation event that has no choices, and ends with ``data: [DONE]``. Error bodies are
Azure's, e.g. ``code: content_filter`` with ``innererror`` for a filtered prompt.
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
    answer,
    receive,
    split,
    tool_arguments_text,
    wants_tool_call,
    word_pieces,
)
from tests.proxy.providers.fakes.openai import openai_view

KEY = "0123456789abcdef0123456789abcdef"
API_VERSION = "2024-10-21"
DEPLOYMENTS = {"text": "prod-text"}
MODEL = "gpt-4o-2024-08-06"
USAGE = {
    "prompt_tokens": 20,
    "completion_tokens": 8,
    "total_tokens": 28,
    "prompt_tokens_details": {"cached_tokens": 12, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 2, "audio_tokens": 0},
}
_SAFE = {"filtered": False, "severity": "safe"}
_FILTER_RESULTS = {"hate": _SAFE, "self_harm": _SAFE, "sexual": _SAFE, "violence": _SAFE}
_PROMPT_FILTER = [{"prompt_index": 0, "content_filter_results": _FILTER_RESULTS}]
_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "fail-429": (
        429,
        {
            "code": "429",
            "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API "
            "version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing "
            "tier. Please retry after 3 seconds.",
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
            "code": "ServiceUnavailable",
            "message": "The service is temporarily unable to process your request. "
            "Please try again later.",
        },
    ),
    "fail-auth": (
        401,
        {
            "code": "401",
            "message": "Access denied due to invalid subscription key or wrong API endpoint. "
            "Make sure to provide a valid key for an active subscription and use a correct "
            "regional API endpoint for your resource.",
        },
    ),
    "fail-context": (
        400,
        {
            "message": "This model's maximum context length is 128000 tokens. However, your "
            "messages resulted in 131072 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        },
    ),
    "fail-policy": (
        400,
        {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
            "content management policy. Please modify your prompt and retry.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {
                    **_FILTER_RESULTS,
                    "violence": {"filtered": True, "severity": "high"},
                },
            },
        },
    ),
}


class AzureFake:
    """See :class:`tests.proxy.providers.fakes.base.ProviderFake`."""

    type = "azure"
    expected_usage = Usage(input=8, cache_read=12, output=6, reasoning=2)
    streams_tool_arguments = True

    def __init__(self) -> None:
        self.requests: list[Received] = []

    def config(self, base_url: str) -> dict[str, Any]:
        return {
            "type": "azure",
            "endpoint": base_url,
            "api_key": KEY,
            "api_version": API_VERSION,
            "deployments": dict(DEPLOYMENTS),
        }

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._chat)
        return app

    def view(self, body: Any) -> RequestView:
        return openai_view(body)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        received = await receive(request, self.requests)
        if received.query.get("api-version") != API_VERSION:
            return web.json_response(
                {"error": {"code": "404", "message": "Resource not found"}}, status=404
            )
        if received.headers.get("api-key") != KEY:
            return web.json_response({"error": _ERRORS["fail-auth"][1]}, status=401)
        deployment = request.match_info["deployment"]
        behaviour = {v: k for k, v in DEPLOYMENTS.items()}.get(deployment, deployment)
        if behaviour in _ERRORS:
            status, error = _ERRORS[behaviour]
            headers = {"retry-after": RETRY_AFTER} if status == 429 else {}
            return web.json_response({"error": error}, status=status, headers=headers)
        body = received.body
        tool = body["tools"][0]["function"]["name"] if wants_tool_call(self.view(body)) else None
        if body.get("stream"):
            return await self._stream(request, body, behaviour, tool)
        message: dict[str, Any] = {"role": "assistant", "content": answer(self.type)}
        finish = "stop"
        if tool is not None:
            message = {"role": "assistant", "content": None, "tool_calls": [_tool_call(tool)]}
            finish = "tool_calls"
        choice = {
            "index": 0,
            "message": {**message, "refusal": None},
            "logprobs": None,
            "finish_reason": finish,
            "content_filter_results": _FILTER_RESULTS,
        }
        return web.json_response(
            {
                **_envelope("chat.completion", [choice], USAGE),
                "prompt_filter_results": _PROMPT_FILTER,
            }
        )

    async def _stream(
        self, request: web.Request, body: dict[str, Any], behaviour: str, tool: str | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        opening = {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": _PROMPT_FILTER,
        }
        await response.write(_data(opening))
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
        for i, delta in enumerate([first, *deltas]):
            if behaviour == CUT_MODEL and i == 2:
                return response  # the body ends here: no finish, no [DONE]
            await response.write(_chunk([_choice(delta, None)], None))
        finish = "stop" if tool is None else "tool_calls"
        await response.write(_chunk([_choice({}, finish)], None))
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(_chunk([], USAGE))
        await response.write(b"data: [DONE]\n\n")
        return response


def _tool_call(name: str) -> dict[str, Any]:
    return {
        "id": "call_fake_azure_1",
        "type": "function",
        "function": {"name": name, "arguments": tool_arguments_text()},
    }


def _choice(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "delta": delta,
        "logprobs": None,
        "finish_reason": finish,
    }
    if delta:
        choice["content_filter_results"] = _FILTER_RESULTS
    return choice


def _envelope(
    kind: str, choices: list[dict[str, Any]], usage: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake-azure",
        "object": kind,
        "created": 1_700_000_003,
        "model": MODEL,
        "system_fingerprint": "fp_fake_azure",
        "choices": choices,
        "usage": usage,
    }


def _chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None) -> bytes:
    return _data(_envelope("chat.completion.chunk", choices, usage))


def _data(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"
