"""``python -m bench.masking_cpu``: the CPU the masking plugin adds per request, in-process.

The HTTP benchmark's ``gateway-masking`` target compares the gateway with and without the
plugin, but on a shared machine it cannot resolve microseconds in requests of several hundred.
This runs the chain alone, in one event loop: the same call through ``[]`` and through
``[masking]`` (every built-in entity) in front of an in-process upstream that echoes the prompt,
in interleaved rounds, timing process CPU per request. Prompts: the HTTP benchmark's (no PII)
and one with an e-mail address and a phone number (masked, and restored in the echoed reply).
Modes: a whole reply; a 20-chunk stream of decoded chunks; the same stream as verbatim frames,
five per read (an OpenAI-compatible upstream). Streams are read by batches to their end, as the
app reads them. The median difference over the rounds is what the plugin costs.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import time
from collections.abc import AsyncIterator, Sequence

import msgspec

from plugins.masking import MaskingConfig, MaskingPlugin
from proxy.canonical import (
    Call,
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    Message,
    RawFrames,
    Reply,
    Response,
    batched,
)
from proxy.chain import Next, PluginContext, compose
from proxy.logs import make_logger
from proxy.metrics import Metrics
from proxy.redact import Redactor

PROMPTS = {
    "no PII": (
        "Summarise in one sentence what an LLM gateway does, for a reader who has never "
        "heard the term. Keep it short and avoid jargon."
    ),
    "2 values": (
        "Summarise in one sentence what an LLM gateway does, then mail it to "
        "jane.doe@example.com or text +44 20 7946 0958. Keep it short and avoid jargon."
    ),
}
MODES = {"whole": (False, False), "stream": (True, False), "relay": (True, True)}
_CHUNKS = 20
_FRAMES_PER_READ = 5
_CHUNK_DECODER = msgspec.json.Decoder(Chunk)
_ENCODER = msgspec.json.Encoder()


class _Reads:
    """A stream read by batches, one batch per (simulated) network read."""

    def __init__(self, batches: list[list[Chunk | RawFrames]]) -> None:
        self._batches = batches
        self.ended = False

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        if not self._batches:
            self.ended = True
            return []
        batch = self._batches.pop(0)
        self.ended = not self._batches
        return batch

    def __aiter__(self) -> AsyncIterator[Chunk]:
        raise NotImplementedError("read by batches")

    async def aclose(self) -> None:
        self.ended = True


class _Echo:
    """An in-process upstream answering with the last user text, whole or streamed."""

    def __init__(self, relay: bool) -> None:
        self._relay = relay

    async def __call__(self, call: Call) -> Reply:
        text = call.messages[-1].text()
        if not call.stream:
            message = Message(role="assistant", content=text)
            response = Response(id="x", model="m", choices=[Choice(index=0, message=message)])
            return Reply(provider="upstream", model="m", response=response)
        size = -(-len(text) // _CHUNKS)
        chunks = [
            Chunk(id="x", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=piece))])
            for piece in (text[i : i + size] for i in range(0, len(text), size))
        ]
        if not self._relay:
            reads: list[list[Chunk | RawFrames]] = [[chunk] for chunk in chunks]
        else:
            reads = []
            for i in range(0, len(chunks), _FRAMES_PER_READ):
                group = chunks[i : i + _FRAMES_PER_READ]
                data = b"".join(b"data: " + _ENCODER.encode(c) + b"\n\n" for c in group)
                reads.append([RawFrames(data, _CHUNK_DECODER.decode, len(group))])
        return Reply(provider="upstream", model="m", stream=_Reads(reads))  # type: ignore[arg-type]


def chains(relay: bool) -> dict[str, Next]:
    """The chains compared: ``empty`` and ``masking``."""
    upstream = _Echo(relay)
    entities = {e: "mask" for e in ("email", "phone", "iban", "credit_card", "us_ssn")}
    options = msgspec.convert(
        {"entities": {**entities, "ip_address": "redact", "secret": "block"}}, MaskingConfig
    )
    # The gateway's own JSON logger (its pii_detected line is part of the cost), into memory.
    logger = make_logger(Redactor(), stream=io.StringIO())
    context = PluginContext(lambda *a, **k: [], Metrics(), logger)
    masking = MaskingPlugin(options, context)
    return {"empty": compose([], upstream), "masking": compose([masking], upstream)}


async def _one(chain: Next, prompt: str, stream: bool) -> None:
    call = Call(
        request_id="bench",
        dialect="openai",
        model="m",
        messages=[
            Message(role="system", content="You are a concise technical assistant."),
            Message(role="user", content=prompt),
        ],
        stream=stream,
    )
    reply = await chain(call)
    if reply.stream is not None:
        source = batched(reply.stream)
        while await source.next_batch(True):
            pass
        await reply.stream.aclose()  # type: ignore[attr-defined]


async def _cpu_per_request(chain: Next, prompt: str, stream: bool, requests: int) -> float:
    started = time.process_time()
    for _ in range(requests):
        await _one(chain, prompt, stream)
    return (time.process_time() - started) / requests * 1e6


async def measure(requests: int, rounds: int) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Per (prompt, mode) and chain, the CPU per request (µs) of each round."""
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    for prompt_name, prompt in PROMPTS.items():
        for mode, (stream, relay) in MODES.items():
            compared = chains(relay)
            cell = results[prompt_name, mode] = {name: [] for name in compared}
            for chain in compared.values():  # warm-up
                await _cpu_per_request(chain, prompt, stream, requests // 10 or 1)
            for _ in range(rounds):
                for name, chain in compared.items():
                    cell[name].append(await _cpu_per_request(chain, prompt, stream, requests))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurement and print one line per prompt and mode."""
    parser = argparse.ArgumentParser(prog="python -m bench.masking_cpu", description=__doc__)
    parser.add_argument("--requests", type=int, default=5_000, help="per round and chain")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args(argv)
    results = asyncio.run(measure(args.requests, args.rounds))
    print(f"CPU per request, median of {args.rounds} interleaved rounds of {args.requests}:")
    for (prompt, mode), by_chain in results.items():
        empty = statistics.median(by_chain["empty"])
        masked = statistics.median(by_chain["masking"])
        deltas = [m - e for m, e in zip(by_chain["masking"], by_chain["empty"], strict=True)]
        print(
            f"  {prompt:<8} {mode:<6}  empty chain {empty:6.2f} µs   with masking {masked:6.2f} µs"
            f"   plugin {statistics.median(deltas):6.2f} µs ({masked / empty:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
