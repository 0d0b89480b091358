"""Mock OpenAI upstream: ``POST /v1/chat/completions`` with canned answers.

Contract:

* non-streaming requests get a fixed ``chat.completion`` JSON body with ``usage``;
* requests with ``"stream": true`` get ``text/event-stream``: 20 ``chat.completion.chunk``
  frames, then (when ``stream_options.include_usage`` is true) a final chunk with
  ``usage``, then ``data: [DONE]``; each frame is written separately, as a real upstream
  emits tokens;
* every answer is delayed by the current artificial latency before its first byte;
  ``POST /bench/latency?ms=N`` sets that latency (204), ``GET /health`` answers 200.

Run as ``python -m bench.upstream --port N``.
"""

import argparse
import asyncio
from dataclasses import dataclass

import msgspec
from aiohttp import web

from bench.aio import run
from bench.serving import serve_until_signalled

MODEL = "bench-model"
_CREATED = 1_700_000_000
_COMPLETION_ID = "chatcmpl-bench0000000000000000000000"
_FINGERPRINT = "fp_bench"
_WORDS = (
    "Crossway",
    " forwards",
    " each",
    " request",
    " to",
    " the",
    " selected",
    " provider",
    " and",
    " streams",
    " the",
    " answer",
    " back",
    " without",
    " adding",
    " noticeable",
    " latency",
    ".",
)
_USAGE = {
    "prompt_tokens": 31,
    "completion_tokens": len(_WORDS),
    "total_tokens": 31 + len(_WORDS),
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


class _StreamOptions(msgspec.Struct):
    include_usage: bool | None = None


class _RequestShape(msgspec.Struct):
    """The only request fields the mock looks at; all others are skipped unparsed."""

    stream: bool | None = None
    stream_options: _StreamOptions | None = None


@dataclass(frozen=True)
class _Canned:
    """Pre-encoded answers, built once per server."""

    completion: bytes
    frames: tuple[bytes, ...]
    frames_with_usage: tuple[bytes, ...]


@dataclass
class _Latency:
    """Delay applied before the first byte of every answer; changed via the control route."""

    seconds: float = 0.0


_CANNED = web.AppKey("canned", _Canned)
_LATENCY = web.AppKey("latency", _Latency)
_DECODER = msgspec.json.Decoder(_RequestShape)
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _completion_body() -> bytes:
    return msgspec.json.encode(
        {
            "id": _COMPLETION_ID,
            "object": "chat.completion",
            "created": _CREATED,
            "model": MODEL,
            "system_fingerprint": _FINGERPRINT,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "".join(_WORDS),
                        "refusal": None,
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": _USAGE,
            "service_tier": "default",
        }
    )


def _chunk(delta: dict[str, str], finish_reason: str | None, with_usage: bool) -> bytes:
    chunk: dict[str, object] = {
        "id": _COMPLETION_ID,
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": MODEL,
        "system_fingerprint": _FINGERPRINT,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if with_usage:
        chunk["usage"] = None
    return b"data: " + msgspec.json.encode(chunk) + b"\n\n"


def _stream_frames(with_usage: bool) -> tuple[bytes, ...]:
    """Role frame, one frame per word, finish frame, [usage frame], [DONE] frame."""
    frames = [_chunk({"role": "assistant", "content": ""}, None, with_usage)]
    frames += [_chunk({"content": word}, None, with_usage) for word in _WORDS]
    frames.append(_chunk({}, "stop", with_usage))
    if with_usage:
        usage_chunk = {
            "id": _COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": _CREATED,
            "model": MODEL,
            "system_fingerprint": _FINGERPRINT,
            "choices": [],
            "usage": _USAGE,
        }
        frames.append(b"data: " + msgspec.json.encode(usage_chunk) + b"\n\n")
    frames.append(b"data: [DONE]\n\n")
    return tuple(frames)


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    try:
        shape = _DECODER.decode(await request.read())
    except msgspec.DecodeError:
        return web.json_response({"error": {"message": "invalid JSON body"}}, status=400)
    delay = request.app[_LATENCY].seconds
    if delay > 0:
        await asyncio.sleep(delay)
    canned = request.app[_CANNED]
    if not shape.stream:
        return web.Response(body=canned.completion, content_type="application/json")
    include_usage = shape.stream_options is not None and bool(shape.stream_options.include_usage)
    response = web.StreamResponse(headers=_SSE_HEADERS)
    await response.prepare(request)
    for frame in canned.frames_with_usage if include_usage else canned.frames:
        await response.write(frame)
    await response.write_eof()
    return response


async def _set_latency(request: web.Request) -> web.Response:
    try:
        milliseconds = float(request.query["ms"])
    except (KeyError, ValueError):
        return web.Response(status=400, text="expected ?ms=<number>")
    request.app[_LATENCY].seconds = max(milliseconds, 0.0) / 1000.0
    return web.Response(status=204)


async def _health(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _traces(request: web.Request) -> web.Response:
    """An OTLP/HTTP trace sink for the ``gateway-traced`` target: reads the export and keeps
    nothing (an empty ``ExportTraceServiceResponse`` is an empty protobuf body)."""
    await request.read()
    return web.Response(body=b"", content_type="application/x-protobuf")


def create_app(latency_ms: float = 0.0) -> web.Application:
    """Build the mock upstream application with an initial latency of ``latency_ms``."""
    app = web.Application()
    app[_CANNED] = _Canned(
        completion=_completion_body(),
        frames=_stream_frames(with_usage=False),
        frames_with_usage=_stream_frames(with_usage=True),
    )
    app[_LATENCY] = _Latency(seconds=latency_ms / 1000.0)
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_post("/bench/latency", _set_latency)
    app.router.add_get("/health", _health)
    app.router.add_post("/v1/traces", _traces)
    return app


def main() -> None:
    """Command-line entry point: serve the mock upstream until SIGTERM."""
    parser = argparse.ArgumentParser(description="Mock OpenAI upstream for the benchmark.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    run(serve_until_signalled(create_app(args.latency_ms), args.host, args.port))


if __name__ == "__main__":
    main()
