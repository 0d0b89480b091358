"""A fake Gemini API upstream (v1beta ``generateContent`` / ``streamGenerateContent?alt=sse``).

Like the real API it answers a bad key with 400 ``API_KEY_INVALID``, rejects roles other than
``user``/``model``, and — like Gemini 3 — rejects a function call sent back in the history
without the ``thoughtSignature`` it came with. Streams are unnamed ``data:`` events, each a whole
``GenerateContentResponse`` with only the new parts, and no end marker; a function call arrives
whole. A 429 says when to retry in a ``google.rpc.RetryInfo`` detail, not a header; a blocked
prompt is a 200 with ``promptFeedback.blockReason`` and no candidates.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from proxy.core.canonical import Usage
from tests.proxy.providers.fakes.base import (
    CUT_MODEL,
    TOOL_ARGUMENTS,
    Received,
    RequestView,
    Turn,
    answer,
    receive,
    wants_tool_call,
    word_pieces,
)

KEY = "AIzaSyFakeGeminiKey0123456789"
RESPONSE_ID = "mZ3bZ8fJBbPH1MkP4qW5sQc"
SIGNATURE = "CiQBcsjafF1n3mHh5xX0kVFakeSignature=="
USAGE = {
    "promptTokenCount": 20,
    "candidatesTokenCount": 9,
    "totalTokenCount": 33,
    "cachedContentTokenCount": 6,
    "thoughtsTokenCount": 4,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 20}],
    "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 6}],
}
_ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "fail-429": (
        429,
        {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing "
            "details. Please retry in 3s.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                    "violations": [
                        {
                            "quotaMetric": "generativelanguage.googleapis.com/"
                            "generate_content_free_tier_requests",
                            "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                        }
                    ],
                },
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"},
            ],
        },
    ),
    "fail-500": (
        500,
        {
            "code": 500,
            "message": "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting",
            "status": "INTERNAL",
        },
    ),
    "fail-503": (
        503,
        {
            "code": 503,
            "message": "The model is overloaded. Please try again later.",
            "status": "UNAVAILABLE",
        },
    ),
    "fail-context": (
        400,
        {
            "code": 400,
            "message": "The input token count (1193289) exceeds the maximum number of tokens "
            "allowed (1048576).",
            "status": "INVALID_ARGUMENT",
        },
    ),
}
_BAD_KEY = {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT",
    "details": [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "API_KEY_INVALID",
            "domain": "googleapis.com",
            "metadata": {"service": "generativelanguage.googleapis.com"},
        }
    ],
}
_BLOCKED = {
    "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
    "usageMetadata": {"promptTokenCount": 20, "totalTokenCount": 20},
    "modelVersion": "fail-policy",
    "responseId": RESPONSE_ID,
}


def gemini_view(body: Any) -> RequestView:
    """The neutral view of a ``GenerateContentRequest`` body."""
    instruction = body.get("systemInstruction") or {"parts": []}
    system = "\n".join(part.get("text", "") for part in instruction["parts"])
    turns = []
    for content in body["contents"]:
        role = "assistant" if content.get("role") == "model" else "user"
        kinds = tuple(_kind(part) for part in content["parts"])
        turns.append(Turn(role, kinds, "".join(_text(part) for part in content["parts"])))
    tools = tuple(
        declaration["name"]
        for tool in body.get("tools") or ()
        for declaration in tool.get("functionDeclarations") or ()
    )
    return RequestView(system, tuple(turns), tools)


def _kind(part: dict[str, Any]) -> str:
    if "functionCall" in part:
        return "tool_call"
    if "functionResponse" in part:
        return "tool_result"
    if "inlineData" in part or "fileData" in part:
        return "image"
    return "text"


def _text(part: dict[str, Any]) -> str:
    if "functionResponse" in part:
        return json.dumps(part["functionResponse"]["response"])
    return part.get("text", "")


def _error(status: int, error: dict[str, Any]) -> web.Response:
    return web.json_response({"error": error}, status=status)


def _unsigned_call(body: dict[str, Any]) -> str | None:
    """The name of a function call in the history sent back without its thought signature."""
    for content in body["contents"]:
        for part in content["parts"]:
            if "functionCall" in part and part.get("thoughtSignature") != SIGNATURE:
                return str(part["functionCall"]["name"])
    return None


class GeminiFake:
    """See :class:`tests.proxy.providers.fakes.base.ProviderFake`."""

    type = "gemini"
    expected_usage = Usage(input=14, cache_read=6, output=9, reasoning=4)
    streams_tool_arguments = False

    def __init__(self) -> None:
        self.requests: list[Received] = []

    def config(self, base_url: str) -> dict[str, Any]:
        return {"type": "gemini", "base_url": f"{base_url}/v1beta", "api_key": KEY}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1beta/models/{call}", self._generate)
        return app

    def view(self, body: Any) -> RequestView:
        return gemini_view(body)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        received = await receive(request, self.requests)
        body = received.body
        model, _, method = request.match_info["call"].partition(":")
        if request.headers.get("x-goog-api-key") != KEY or model == "fail-auth":
            return _error(400, _BAD_KEY)
        if any(content.get("role") not in ("user", "model") for content in body["contents"]):
            return _error(
                400,
                {
                    "code": 400,
                    "message": "Please use a valid role: user, model.",
                    "status": "INVALID_ARGUMENT",
                },
            )
        unsigned = _unsigned_call(body)
        if unsigned is not None:
            message = f"Function call `{unsigned}` is missing a `thought_signature`."
            return _error(400, {"code": 400, "message": message, "status": "INVALID_ARGUMENT"})
        if model in _ERRORS:
            status, error = _ERRORS[model]
            return _error(status, error)
        if method == "streamGenerateContent" and request.query.get("alt") == "sse":
            return await self._stream(request, model, body)
        if method != "generateContent":
            return _error(404, {"code": 404, "message": "Not found", "status": "NOT_FOUND"})
        if model == "fail-policy":
            return web.json_response(_BLOCKED)
        return web.json_response(self._answer(model, self._parts(body), USAGE))

    def _parts(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        if wants_tool_call(self.view(body)):
            name = body["tools"][0]["functionDeclarations"][0]["name"]
            call = {"functionCall": {"name": name, "args": TOOL_ARGUMENTS}}
            return [{**call, "thoughtSignature": SIGNATURE}]
        return [{"text": answer(self.type)}]

    def _answer(
        self,
        model: str,
        parts: list[dict[str, Any]],
        usage: dict[str, Any],
        finish: str | None = "STOP",
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
        if finish is not None:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": RESPONSE_ID,
        }

    async def _stream(
        self, request: web.Request, model: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if model == "fail-policy":
            await response.write(_frame(_BLOCKED))
            return response
        parts = self._parts(body)
        partial = {"promptTokenCount": 20, "totalTokenCount": 20}
        if "functionCall" in parts[0]:
            events = [self._answer(model, parts, USAGE)]
        else:
            pieces = word_pieces(answer(self.type))
            events = [self._answer(model, [{"text": p}], partial, None) for p in pieces[:-1]]
            events.append(self._answer(model, [{"text": pieces[-1]}], USAGE))
        for i, event in enumerate(events):
            if model == CUT_MODEL and i == 2:
                return response  # the body ends here, before any finishReason
            await response.write(_frame(event))
        return response


def _frame(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\r\n\r\n"
