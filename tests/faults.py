"""A fault-injecting OpenAI-compatible upstream for reliability tests, on 127.0.0.1.

It speaks the real chat-completions wire format (JSON answers, ``data:`` SSE frames ending with
``data: [DONE]``, OpenAI error bodies) and follows a per-model script: each request for a model
consumes the next :class:`Fault` of its script, and once the script is spent every request gets
the model's ``then`` fault (an answer by default). Faults:

- ``ok()``: a normal answer (streamed one word per chunk when asked).
- ``status(code, retry_after=…, retry_after_ms=…, code_text=…)``: an OpenAI error body with that
  HTTP status and hints; ``burst(code, n)`` is n of them.
- ``reset()``: the connection is closed before any byte of the answer.
- ``hang()``: no answer, ever.
- ``slow(seconds)``: the answer after that real delay.
- ``cut(n)``: a stream sends ``n`` chunks, then the connection drops (a non-streamed answer
  sends its headers and ``n`` bytes of the body, then drops).
- ``held(code)``: an error with that status once the test opens the gate the request waits at
  (:meth:`FaultUpstream.release` opens it and sets up the next one), so that a test controls
  which requests are in flight together; ``held`` counts requests in flight through held
  faults, ``waiting`` those at the gate not yet opened.

Every request is recorded in ``calls`` (model names, in order). ``latency[model]`` is a
*virtual* time to first byte: each answer from that model advances ``clock`` (a
:class:`FakeClock` a test shares with a plugin) by that many seconds, so latency-aware routing is
tested deterministically, without sleeping.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

ANSWER_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
USAGE = {"prompt_tokens": 7, "completion_tokens": 6, "total_tokens": 13}


def answer_text(model: str) -> str:
    """The text every successful answer from ``model`` carries."""
    return " ".join((model, *ANSWER_WORDS))


class FakeClock:
    """A clock that moves only when told to (seconds)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class Fault:
    """One scripted behaviour of the upstream; build them with the functions below."""

    kind: Literal["ok", "status", "reset", "hang", "slow", "cut", "held"]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None
    seconds: float = 0.0
    after: int = 0


def ok() -> Fault:
    return Fault("ok")


def status(
    code: int,
    *,
    retry_after: str | None = None,
    retry_after_ms: str | None = None,
    code_text: str | None = None,
) -> Fault:
    headers = {}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    if retry_after_ms is not None:
        headers["retry-after-ms"] = retry_after_ms
    return Fault("status", status=code, headers=headers, code=code_text)


def burst(code: int, n: int) -> list[Fault]:
    return [status(code) for _ in range(n)]


def reset() -> Fault:
    return Fault("reset")


def hang() -> Fault:
    return Fault("hang")


def slow(seconds: float) -> Fault:
    return Fault("slow", seconds=seconds)


def cut(after: int) -> Fault:
    return Fault("cut", after=after)


def held(code: int) -> Fault:
    return Fault("held", status=code)


class FaultUpstream:
    """The upstream's scripts, records and handlers."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.latency: dict[str, float] = {}
        self.clock = FakeClock()
        self._scripts: dict[str, collections.deque[Fault]] = {}
        self._then: dict[str, Fault] = {}
        self._gate = asyncio.Event()
        self.held = 0
        self.waiting = 0

    def release(self) -> None:
        """Let the requests held at the current gate answer; later ones wait at a new gate."""
        gate, self._gate = self._gate, asyncio.Event()
        self.waiting = 0
        gate.set()

    def script(self, model: str, faults: Iterable[Fault] = (), then: Fault | None = None) -> None:
        """Requests for ``model`` get ``faults`` in order, then ``then`` (an answer) forever."""
        self._scripts[model] = collections.deque(faults)
        self._then[model] = then or ok()

    def count(self, model: str) -> int:
        """Requests received for ``model``."""
        return self.calls.count(model)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    def _next_fault(self, model: str) -> Fault:
        script = self._scripts.get(model)
        if script:
            return script.popleft()
        return self._then.get(model) or ok()

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model = body["model"]
        self.calls.append(model)
        self.bodies.append(body)
        fault = self._next_fault(model)
        if fault.kind == "status":
            return _error(fault)
        if fault.kind == "reset":
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if fault.kind == "hang":
            await asyncio.Event().wait()
        if fault.kind == "held":
            self.held += 1
            self.waiting += 1
            try:
                await self._gate.wait()
            finally:
                self.held -= 1
            return _error(fault)
        if fault.kind == "slow":
            await asyncio.sleep(fault.seconds)
        self.clock.advance(self.latency.get(model, 0.0))
        cut_after = fault.after if fault.kind == "cut" else None
        if body.get("stream"):
            return await _stream(request, model, cut_after)
        return await _whole(request, model, cut_after)


def _error(fault: Fault) -> web.Response:
    error = {
        "message": f"scripted failure {fault.status}",
        "type": "invalid_request_error" if fault.status < 500 else "server_error",
        "param": None,
        "code": fault.code,
    }
    return web.json_response({"error": error}, status=fault.status, headers=fault.headers)


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    chunk = {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "created": 1_700_000_002,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def _stream(request: web.Request, model: str, cut_after: int | None) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    words = answer_text(model).split(" ")
    deltas = [{"role": "assistant", "content": ""}]
    deltas += [{"content": word if i == 0 else " " + word} for i, word in enumerate(words)]
    for sent, delta in enumerate(deltas):
        if cut_after is not None and sent >= cut_after:
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write(_chunk(model, delta, None))
    await response.write(_chunk(model, {}, "stop"))
    usage = {"id": "chatcmpl-fault", "object": "chat.completion.chunk", "created": 1_700_000_002}
    usage |= {"model": model, "choices": [], "usage": USAGE}
    await response.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def _whole(request: web.Request, model: str, cut_after: int | None) -> web.StreamResponse:
    body = json.dumps(
        {
            "id": "chatcmpl-fault",
            "object": "chat.completion",
            "created": 1_700_000_002,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer_text(model)},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": USAGE,
        }
    ).encode()
    if cut_after is None:
        return web.Response(body=body, content_type="application/json")
    response = web.StreamResponse(
        headers={"content-type": "application/json", "content-length": str(len(body))}
    )
    await response.prepare(request)
    await response.write(body[:cut_after])
    assert request.transport is not None
    request.transport.close()
    return response
