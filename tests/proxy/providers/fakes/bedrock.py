"""A fake Amazon Bedrock runtime: ``POST /model/{modelId}/converse`` and ``/converse-stream``.

Like the real service it checks the request's SigV4 signature — recomputed with botocore from
the request exactly as it arrived (raw path, headers, body) — and answers a bad one with
``403 InvalidSignatureException``. Errors carry the ``x-amzn-ErrorType`` header and a
``{"message": …}`` body. Streams are AWS event-stream frames (``:message-type: event``,
``:event-type``, ``:content-type: application/json``), each payload padded with Bedrock's
``p`` field: ``messageStart``, ``contentBlockStart`` (tool use), ``contentBlockDelta``,
``contentBlockStop``, ``messageStop``, ``metadata``. A streamed tool call comes after a text
block, so its content-block index (1) differs from its tool-call index (0).
"""

from __future__ import annotations

import json
import struct
import zlib
from datetime import datetime
from typing import Any
from unittest import mock

from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

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

ACCESS_KEY_ID = "AKIA" + "FAKEBEDROCK00001"  # split so that secret scanners do not flag it
SECRET_ACCESS_KEY = "fakeBedrockSecretKey0123456789abcdefghij"
REGION = "us-west-2"
TOOL_USE_ID = "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"
PREFACE = "Let me check. "
USAGE = {
    "inputTokens": 11,
    "outputTokens": 7,
    "totalTokens": 28,
    "cacheReadInputTokens": 4,
    "cacheWriteInputTokens": 6,
}
_ERROR_TYPE_SUFFIX = ":http://internal.amazon.com/coral/com.amazon.bedrock/"
_ERRORS: dict[str, tuple[int, str, str]] = {
    "fail-429": (429, "ThrottlingException", "Too many requests, please wait before trying again."),
    "fail-500": (
        500,
        "InternalServerException",
        "The system encountered an unexpected error during processing. Try your request again.",
    ),
    "fail-503": (503, "ServiceUnavailableException", "Bedrock is unable to process your request."),
    "fail-auth": (
        403,
        "UnrecognizedClientException",
        "The security token included in the request is invalid.",
    ),
    "fail-context": (400, "ValidationException", "Input is too long for requested model."),
    "fail-policy": (
        400,
        "ValidationException",
        "This request has been blocked by our content filters.",
    ),
}


def bedrock_view(body: Any) -> RequestView:
    """The neutral view of a Converse request body."""
    system = "\n".join(block["text"] for block in body.get("system") or ())
    turns = []
    for message in body["messages"]:
        kinds: list[str] = []
        texts: list[str] = []
        for block in message["content"]:
            if "text" in block:
                kinds.append("text")
                texts.append(block["text"])
            elif "image" in block:
                kinds.append("image")
            elif "toolUse" in block:
                kinds.append("tool_call")
            elif "toolResult" in block:
                kinds.append("tool_result")
                texts += [part["text"] for part in block["toolResult"]["content"] if "text" in part]
        turns.append(Turn(message["role"], tuple(kinds), "".join(texts)))
    tools = tuple(
        tool["toolSpec"]["name"] for tool in (body.get("toolConfig") or {}).get("tools", ())
    )
    return RequestView(system, tuple(turns), tools)


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers (type 7), CRCs included."""
    encoded = b""
    for name, value in headers.items():
        name_bytes, value_bytes = name.encode(), value.encode()
        encoded += bytes([len(name_bytes)]) + name_bytes + b"\x07"
        encoded += struct.pack(">H", len(value_bytes)) + value_bytes
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(name: str, payload: dict[str, Any]) -> bytes:
    """A Converse stream event frame, padded as Bedrock pads them."""
    body = json.dumps({**payload, "p": "abcdefghijklmnopqrstuvwxyzABCDEF"[: 7 + len(name)]})
    headers = {":event-type": name, ":content-type": "application/json", ":message-type": "event"}
    return encode_message(headers, body.encode())


def signature_is_valid(request: web.Request, body: bytes) -> bool:
    """Recompute the request's SigV4 signature with botocore and compare."""
    authorization = request.headers.get("authorization", "")
    if not authorization.startswith("AWS4-HMAC-SHA256 Credential="):
        return False
    scope, signed, signature = (part.split("=", 1)[1] for part in authorization[17:].split(", "))
    key_id, date, region, service, _ = scope.split("/")
    if (key_id, region, service) != (ACCESS_KEY_ID, REGION, "bedrock"):
        return False
    names = signed.split(";")
    headers = {name: request.headers[name] for name in names if name != "host"}
    url = f"http://{request.headers['host']}{request.raw_path}"
    signing = AWSRequest(method=request.method, url=url, data=body, headers=headers)
    when = datetime.strptime(request.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        SigV4Auth(Credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY), "bedrock", REGION).add_auth(
            signing
        )
    expected = signing.headers["Authorization"]
    return date == when.strftime("%Y%m%d") and expected.endswith(f"Signature={signature}")


class BedrockFake:
    """See :class:`tests.proxy.providers.fakes.base.ProviderFake`."""

    type = "bedrock"
    expected_usage = Usage(input=11, cache_read=4, cache_write=6, output=7)
    streams_tool_arguments = True

    def __init__(self) -> None:
        self.requests: list[Received] = []

    def config(self, base_url: str) -> dict[str, Any]:
        return {
            "type": "bedrock",
            "region": REGION,
            "access_key_id": ACCESS_KEY_ID,
            "secret_access_key": SECRET_ACCESS_KEY,
            "endpoint_url": base_url,
        }

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/model/{model}/converse", self._converse)
        app.router.add_post("/model/{model}/converse-stream", self._converse)
        return app

    def view(self, body: Any) -> RequestView:
        return bedrock_view(body)

    async def _converse(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        received = await receive(request, self.requests)
        if not signature_is_valid(request, raw):
            return _error(
                403,
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.",
            )
        model = request.match_info["model"]
        if model in _ERRORS:
            status, kind, message = _ERRORS[model]
            headers = {"retry-after": RETRY_AFTER} if status == 429 else {}
            return _error(status, kind, message, **headers)
        body = received.body
        tool = None
        if wants_tool_call(self.view(body)):
            tool = body["toolConfig"]["tools"][0]["toolSpec"]["name"]
        if request.path.endswith("/converse-stream"):
            return await self._stream(request, model, tool)
        content: list[dict[str, Any]] = [{"text": answer(self.type)}]
        stop = "end_turn"
        if tool is not None:
            tool_use = {"toolUseId": TOOL_USE_ID, "name": tool, "input": {"city": "Paris"}}
            content, stop = [{"toolUse": tool_use}], "tool_use"
        return web.json_response(
            {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop,
                "usage": USAGE,
                "metrics": {"latencyMs": 412},
            },
            headers={"x-amzn-requestid": "6f1a2c3e-0000-4000-8000-fakebedrock01"},
        )

    async def _stream(
        self, request: web.Request, model: str, tool: str | None
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"content-type": "application/vnd.amazon.eventstream"}
        )
        await response.prepare(request)
        frames = [event("messageStart", {"role": "assistant"})]
        if tool is None:
            frames += [
                event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}})
                for piece in word_pieces(answer(self.type))
            ]
            frames.append(event("contentBlockStop", {"contentBlockIndex": 0}))
            stop = "end_turn"
        else:
            start = {"toolUse": {"toolUseId": TOOL_USE_ID, "name": tool}}
            frames += [
                event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": PREFACE}}),
                event("contentBlockStop", {"contentBlockIndex": 0}),
                event("contentBlockStart", {"contentBlockIndex": 1, "start": start}),
            ]
            frames += [
                event(
                    "contentBlockDelta",
                    {"contentBlockIndex": 1, "delta": {"toolUse": {"input": piece}}},
                )
                for piece in split(tool_arguments_text(), 6)
            ]
            frames.append(event("contentBlockStop", {"contentBlockIndex": 1}))
            stop = "tool_use"
        frames.append(event("messageStop", {"stopReason": stop}))
        frames.append(event("metadata", {"usage": USAGE, "metrics": {"latencyMs": 388}}))
        for i, frame in enumerate(frames):
            if model == CUT_MODEL and i == 3:
                return response  # the body ends here: no messageStop, no metadata
            await response.write(frame)
        return response


def _error(status: int, kind: str, message: str, **headers: str) -> web.Response:
    return web.json_response(
        {"message": message},
        status=status,
        headers={"x-amzn-ErrorType": kind + _ERROR_TYPE_SUFFIX, **headers},
    )
