"""``python -m bench.micro dialects``: what a dialect's translation costs per request,
in-process.

For each dialect measured — OpenAI chat, Anthropic Messages, the Responses API, and the
Responses API with its conversation state (``store: true`` into the memory store, around a chain
that answers at once) — one request is: decode the client's body, then encode a whole reply
(``non-stream``) or a 20-chunk stream of canonical chunks and its end (``stream``). The dialects
run in interleaved rounds, each timing process CPU (``time.process_time``) over a batch of
requests (:mod:`bench.micro.harness`); the median per request and its ratio to OpenAI chat are
printed per mode.

Canonical chunks are encoded for every dialect (what an OpenAI client of a non-OpenAI upstream
costs); the chat dialect's verbatim relay of an OpenAI upstream's frames is cheaper still.
Everything is in one process and one event loop; nothing is sent over a network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from functools import partial

import structlog

from bench.micro.harness import USAGE, Request, cpu_per_request, interleaved
from proxy.core.canonical import Call, Message
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response, batched
from proxy.dialects.anthropic import AnthropicDialect
from proxy.dialects.base import Dialect
from proxy.dialects.openai_chat import OpenAIChatDialect
from proxy.dialects.responses import ResponsesDialect
from proxy.stored.response_state import ResponseState
from proxy.stored.response_store import MemoryResponseStore

WORDS = 20
PROMPT = "Summarise the plot of a short novel in three sentences, please."
BODIES = {
    "openai": {"model": "m", "messages": [{"role": "user", "content": PROMPT}]},
    "anthropic": {
        "model": "m",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": PROMPT}],
    },
    "responses": {"model": "m", "input": PROMPT},
}
MODES = ("non-stream", "stream")


def _response() -> Response:
    text = " ".join(["word"] * WORDS)
    message = Message(role="assistant", content=text)
    return Response(id="up-1", model="m", choices=[Choice(0, message, "stop")], usage=USAGE)


def _chunks() -> list[Chunk]:
    chunks = [
        Chunk(id="up-1", model="m", choices=[ChunkChoice(0, Delta(role="assistant", content=""))])
    ]
    chunks += [
        Chunk(id="up-1", model="m", choices=[ChunkChoice(0, Delta(content=" word"))])
        for _ in range(WORDS - 2)
    ]
    chunks.append(Chunk(id="up-1", model="m", choices=[ChunkChoice(0, Delta(), "stop")]))
    chunks.append(Chunk(id="up-1", model="m", choices=[], usage=USAGE))
    return chunks


async def _stream(chunks: list[Chunk]) -> AsyncIterator[Chunk]:
    for chunk in chunks:
        yield chunk


def translation(dialect: Dialect, body: bytes) -> Request:
    """One request through ``dialect`` alone."""
    response, chunks = _response(), _chunks()

    async def request(stream: bool) -> None:
        call = dialect.decode(body, {}, "req", time.perf_counter())
        if not stream:
            dialect.encode_response(call, Reply("p", "m", response=response))
            return
        encoder = dialect.stream_encoder(call, Reply("p", "m", stream=_stream(chunks)))
        for chunk in chunks:
            encoder.chunk(chunk)
        encoder.end()

    return request


def stateful(dialect: ResponsesDialect, body: bytes) -> Request:
    """One Responses request with its state: stored (memory) as the app stores it."""
    response, chunks = _response(), _chunks()
    store = MemoryResponseStore(ttl=3600, max_entries=1000, max_bytes=64 * 1024 * 1024)
    state = ResponseState(store, structlog.get_logger)

    async def anonymous(headers: object) -> object:
        raise AssertionError("no previous response is continued")

    async def request(stream: bool) -> None:
        raw = body if not stream else body[:-1] + b',"stream":true}'
        call = dialect.decode(raw, {}, "req", time.perf_counter())

        async def chain(call: Call) -> Reply:
            if call.stream:
                return Reply("p", "m", stream=_stream(chunks))
            return Reply("p", "m", response=response)

        reply = await state.run(call, chain, anonymous)  # type: ignore[arg-type]
        if not stream:
            dialect.encode_response(call, reply)
            return
        encoder = dialect.stream_encoder(call, reply)
        source = batched(reply.stream)  # type: ignore[arg-type]
        while batch := await source.next_batch(False):
            for item in batch:
                encoder.chunk(item)  # type: ignore[arg-type]
        encoder.end()

    return request


async def measure(rounds: int, count: int) -> dict[str, dict[str, float]]:
    """Median CPU µs per request, by mode then dialect."""
    encoded = {name: json.dumps(body).encode() for name, body in BODIES.items()}
    responses = ResponsesDialect()
    requests: dict[str, Request] = {
        "openai": translation(OpenAIChatDialect(), encoded["openai"]),
        "anthropic": translation(AnthropicDialect(), encoded["anthropic"]),
        "responses": translation(responses, encoded["responses"]),
        "responses+store": stateful(responses, encoded["responses"]),
    }
    results: dict[str, dict[str, float]] = {}
    for mode in MODES:
        timers = {
            name: partial(cpu_per_request, request, mode == "stream")
            for name, request in requests.items()
        }
        samples = await interleaved(timers, count, rounds)
        results[mode] = {name: statistics.median(values) for name, values in samples.items()}
    return results


def report(results: dict[str, dict[str, float]]) -> str:
    """The table: µs per request and the ratio to OpenAI chat, per mode."""
    lines = ["mode       dialect           cpu_us/req  x openai"]
    for mode, by_dialect in results.items():
        base = by_dialect["openai"]
        for name, micros in by_dialect.items():
            lines.append(f"{mode:<10} {name:<17} {micros:>10.1f}  {micros / base:>8.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.micro dialects", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (median)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    arguments = parser.parse_args(argv)
    print(report(asyncio.run(measure(arguments.rounds, arguments.requests))))
    return 0
