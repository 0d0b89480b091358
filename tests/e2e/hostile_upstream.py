"""A hostile OpenAI-compatible upstream on 127.0.0.1: it leaks the key it was sent and floods.

Its behaviour is chosen by the requested model name:

- ``leak-<status>``: that status with an OpenAI error body whose every field (``message``,
  ``type``, ``code``, ``param``, a nested object) echoes the caller's Bearer key, and whose
  ``code`` is :data:`HUGE` characters long.
- ``leak-stream``: a 200 stream with one ordinary chunk, then an in-band error frame shaped the
  same way.
- ``gzip-bomb``: a whole answer gzip-compressed, its JSON padded with :data:`BOMB_BYTES` of
  spaces (a small download that decompresses past any sane limit).
- ``huge``: a whole answer padded to :data:`HUGE_BODY_BYTES` (plain).
- ``huge-event`` / ``gzip-huge-event``: a stream with one ordinary chunk, then a ``data:``
  line of :data:`HUGE_EVENT_BYTES` that never ends (plain, or gzip-compressed).
- anything else: an ordinary answer (streamed when asked).

Pieces are written in 64 KiB slices so that the gateway, not the test, decides when to stop
reading; ``aborted`` counts answers whose reader went away before the end. The compressed
payloads are made once per upstream (compressing 64 MiB takes a while) and sent again as made.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from typing import Any

from aiohttp import web

HUGE = 200_000
BOMB_BYTES = 64 * 1024 * 1024
HUGE_BODY_BYTES = 8 * 1024 * 1024
HUGE_EVENT_BYTES = 8 * 1024 * 1024
_SLICE = 64 * 1024


def _answer(model: str, padding: int = 0) -> bytes:
    body = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1_700_000_001,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "fine"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return json.dumps(body).encode()[:-1] + b" " * padding + b"}"


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1_700_000_001,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def leaky_error(key: str) -> dict[str, Any]:
    """An OpenAI error object that carries ``key`` in every field, with a huge ``code``."""
    return {
        "message": f"Incorrect API key provided: {key}",
        "type": f"invalid_request_error {key}",
        "param": f"messages {key}",
        "code": key + "x" * HUGE,
        "details": {"echo": key, "list": [key, {"deeper": key}]},
    }


class HostileUpstream:
    """State and handler of the hostile upstream."""

    def __init__(self) -> None:
        self.aborted = 0
        self._compressed: dict[str, bytes] = {}

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model: str = body["model"]
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        if model.startswith("leak-") and model != "leak-stream":
            status = int(model.removeprefix("leak-"))
            return web.json_response({"error": leaky_error(key)}, status=status)
        if model == "gzip-bomb":
            payload = self._once(model, lambda: gzip.compress(_answer(model, BOMB_BYTES), 9))
            return await self._write(request, payload, {"content-encoding": "gzip"})
        if model == "huge":
            return await self._write(request, _answer(model, HUGE_BODY_BYTES), {})
        if not body.get("stream"):
            return web.Response(body=_answer(model), content_type="application/json")
        first = _chunk(model, {"role": "assistant", "content": "fine"})
        if model == "leak-stream":
            error = b"data: " + json.dumps({"error": leaky_error(key)}).encode() + b"\n\n"
            return await self._write(request, first + error, _SSE)
        if model in ("huge-event", "gzip-huge-event"):
            endless = first + b'data: {"x": "' + b"y" * HUGE_EVENT_BYTES
            if model == "huge-event":
                return await self._write(request, endless, _SSE)
            payload = self._once(model, lambda: _gzip_unfinished(endless))
            return await self._write(request, payload, {**_SSE, "content-encoding": "gzip"})
        frames = first + _chunk(model, {}, "stop") + b"data: [DONE]\n\n"
        return await self._write(request, frames, _SSE)

    def _once(self, name: str, make: Callable[[], bytes]) -> bytes:
        """The payload ``name``, made by ``make`` the first time it is asked for."""
        payload = self._compressed.get(name)
        if payload is None:
            payload = self._compressed[name] = make()
        return payload

    async def _write(
        self, request: web.Request, payload: bytes, headers: dict[str, str]
    ) -> web.StreamResponse:
        """Send ``payload`` in slices; a reader that goes away is counted in ``aborted``."""
        response = web.StreamResponse(headers={"content-type": "application/json", **headers})
        await response.prepare(request)
        try:
            for start in range(0, len(payload), _SLICE):
                await response.write(payload[start : start + _SLICE])
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            self.aborted += 1
        return response


_SSE = {"content-type": "text/event-stream"}


def _gzip_unfinished(data: bytes) -> bytes:
    """``data`` gzip-compressed and flushed, without the end of the gzip stream."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
