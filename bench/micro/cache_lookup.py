"""``python -m bench.micro cache-lookup``: the response cache's work on a miss, for a 2 KB
conversation, in-process.

A request the cache has no answer for pays, before its upstream call, for reading its
directives, deriving its key (a deterministic encoding of the canonical call and a SHA-256) and
one lookup that finds nothing; after its answer has been handed on, for encoding the entry and
writing it. Both are measured here on the memory backend with the project's own code, as CPU
time (``time.process_time``) per request, the best of several repeats: the figure least
disturbed by other work on a shared machine. The conversation is decoded once, as the app
would, and is not part of the figure. The HTTP benchmark measures it too when a cache target
runs (``python -m bench --targets …,gateway-cache``), for its "cache miss lookup" check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from plugins.cache import CacheConfig
from proxy.cache.backends import MemoryBackend
from proxy.cache.control import directives
from proxy.cache.entry import Entry, encode_entry
from proxy.cache.key import cache_key
from proxy.cache.lru import ByteLRU
from proxy.core.canonical import Message, Usage
from proxy.core.reply import Choice, Response
from proxy.dialects.openai_chat import OpenAIChatDialect

CONVERSATION_BYTES = 2048
_ITERATIONS = 5_000
_REPEATS = 5


@dataclass(frozen=True)
class CacheLookup:
    """CPU µs per request: ``lookup_us`` before a miss's upstream call (directives, key, one
    lookup), ``store_us`` after its answer (entry encoding and write); the request's size."""

    lookup_us: float
    store_us: float
    request_bytes: int


def conversation(size: int = CONVERSATION_BYTES) -> bytes:
    """An OpenAI chat request of at least ``size`` bytes: a system prompt, alternating turns."""
    messages = [{"role": "system", "content": "You are a concise technical assistant."}]
    body: dict[str, object] = {"model": "upstream/bench-model", "messages": messages}
    while len(encoded := json.dumps(body, separators=(",", ":")).encode()) < size:
        role = "user" if len(messages) % 2 else "assistant"
        messages.append({"role": role, "content": f"Turn {len(messages)}: tell me about gateways."})
    return encoded


async def measure() -> CacheLookup:
    """Measure both figures (about a second of CPU, without yielding to the event loop)."""
    body = conversation()
    call = OpenAIChatDialect().decode(body, {}, "bench", 0.0)
    options = CacheConfig()
    backend = MemoryBackend(ByteLRU(options.max_bytes, time.time))
    answer = Response(
        id="chatcmpl-bench",
        model="bench-model",
        choices=[Choice(index=0, message=Message(role="assistant", content="x" * 300))],
        usage=Usage(input=500, output=64),
    )

    async def lookup() -> bytes | None:
        directives(
            call.client_headers,
            call.options,
            mode=options.mode,
            ttl=options.ttl,
            max_ttl=options.max_ttl,
        )
        return await backend.get(cache_key(call, options.scope))

    if await lookup() is not None:
        raise RuntimeError("the measured lookup must miss")
    lookups: list[float] = []
    stores: list[float] = []
    for repeat in range(_REPEATS):
        started = time.process_time()
        for _ in range(_ITERATIONS):
            await lookup()
        lookups.append(time.process_time() - started)
        started = time.process_time()
        for index in range(_ITERATIONS):
            now = time.time()
            data = encode_entry(
                Entry(now, now + 60, "upstream", "bench-model", answer, cost_nanos=1000)
            )
            await backend.set(f"{repeat}:{index}", data, 60)
        stores.append(time.process_time() - started)
    return CacheLookup(
        lookup_us=min(lookups) / _ITERATIONS * 1e6,
        store_us=min(stores) / _ITERATIONS * 1e6,
        request_bytes=len(body),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print both figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.micro cache-lookup", description=__doc__)
    parser.parse_args(argv)
    figures = asyncio.run(measure())
    print(
        f"cache miss, {figures.request_bytes} B request, CPU per request (best of {_REPEATS} "
        f"repeats of {_ITERATIONS}): lookup {figures.lookup_us:.2f} µs, "
        f"store {figures.store_us:.2f} µs"
    )
    return 0
