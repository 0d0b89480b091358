"""``python -m bench.micro semantic``: what the semantic cache costs, in its parts.

- **search** — :meth:`~proxy.cache.vector_index.VectorIndex.nearest` over 10,000 cached
  vectors of 256, 768, 1,024 and 1,536 dimensions, as CPU time per lookup
  (``time.process_time``, the best of several repeats: the figure least disturbed by other
  work on a shared machine), with wall time beside it. The target is ≤ 2 ms per lookup. Every
  query is a noisy copy of a cached vector, and the search must find that vector (its recall
  is reported: the share of queries answered with their own vector).
- **embedding call** — what the gateway adds around one embedding (the semantic probe's
  embedding through the upstream link: translation, the HTTP round trip to an
  OpenAI-compatible fake on 127.0.0.1 answering a 1,536-dimension vector at once, decoding),
  reported apart from the search, as wall-clock p50 / p99 over sequential calls. A real
  provider adds its own latency (tens to hundreds of milliseconds) on top.

When ``cache.semantic`` is not configured, none of this runs: the cache plugin tests one
attribute per request (see ``bench/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from aiohttp import web

from proxy.cache.semantic import SemanticConfig
from proxy.cache.semantic_cache import SemanticCache
from proxy.cache.vector_index import VectorIndex
from proxy.core.canonical import Call, Deployment, Message
from proxy.core.redact import Redactor
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider
from proxy.upstream.call import Upstream
from proxy.upstream.transport import HttpTransport

DIMENSIONS = (256, 768, 1024, 1536)
ENTRIES = 10_000
TARGET_MS = 2.0
_QUERIES = 50
_REPEATS = 5


@dataclass(frozen=True)
class SearchFigure:
    """One index size: CPU and wall ms per lookup (best repeat), recall of the noisy copies."""

    dimensions: int
    entries: int
    cpu_ms: float
    wall_ms: float
    recall: float


@dataclass(frozen=True)
class EmbeddingFigure:
    """Sequential embedding calls through the upstream link: wall-clock percentiles (ms)."""

    dimensions: int
    calls: int
    p50_ms: float
    p99_ms: float


def measure_search(dimensions: int, entries: int = ENTRIES, seed: int = 1) -> SearchFigure:
    """Fill an index with ``entries`` random unit vectors and time lookups of noisy copies."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((entries, dimensions), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex(max_entries=entries, max_vectors=entries)
    for number in range(entries):
        index.add("bench", str(number), vectors[number], expires=1e12, now=0.0)
    targets = rng.integers(0, entries, _QUERIES)
    noise = rng.standard_normal((_QUERIES, dimensions), dtype=np.float32)
    queries = vectors[targets] + 0.3 * noise / np.float32(np.sqrt(dimensions))
    found = sum(
        index.nearest("bench", query, 0.0).entry == str(target)  # type: ignore[union-attr]
        for query, target in zip(queries, targets, strict=True)
    )
    cpu = wall = float("inf")
    for _ in range(_REPEATS):
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        for query in queries:
            index.nearest("bench", query, 0.0)
        cpu = min(cpu, (time.process_time() - started_cpu) / _QUERIES * 1000)
        wall = min(wall, (time.perf_counter() - started_wall) / _QUERIES * 1000)
    return SearchFigure(dimensions, entries, cpu, wall, found / _QUERIES)


async def measure_embedding(dimensions: int = 1536, calls: int = 200) -> EmbeddingFigure:
    """Time ``calls`` sequential semantic-probe embeddings against a local fake upstream."""
    vector = [0.01] * dimensions
    answer = {"data": [{"index": 0, "embedding": vector}], "model": "m", "usage": {}}

    async def embeddings(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    provider = OpenAIProvider("up", OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1"))
    transport = HttpTransport({"up": provider})
    upstream = Upstream({"up": provider}, transport, Redactor([]), lambda *_: None)
    deployment = Deployment("up", "embed")
    semantic = SemanticCache(
        SemanticConfig(embedding_model="embed"),
        "team",
        lambda model: [deployment],
        lambda reason, error: None,
    )
    question = Message(role="user", content="What is the capital of France?")
    timings: list[float] = []
    try:
        for number in range(calls + 10):
            call = Call(request_id=str(number), dialect="openai", model="m", messages=[question])
            started = time.perf_counter()
            probe = await semantic.probe(call, upstream)
            if probe is None:
                raise RuntimeError("the embedding call failed")
            if number >= 10:  # warm-up: connections, caches
                timings.append((time.perf_counter() - started) * 1000)
    finally:
        await transport.close()
        await runner.cleanup()
    timings.sort()
    return EmbeddingFigure(
        dimensions, calls, statistics.median(timings), timings[int(len(timings) * 0.99) - 1]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the figures; exit 1 when a search misses the 2 ms target."""
    parser = argparse.ArgumentParser(prog="python -m bench.micro semantic", description=__doc__)
    parser.add_argument("--entries", type=int, default=ENTRIES)
    parser.add_argument("--embedding-calls", type=int, default=200)
    options = parser.parse_args(argv)
    failed = False
    print(f"semantic search over {options.entries} vectors (CPU ms per lookup, best of repeats)")
    for dimensions in DIMENSIONS:
        figure = measure_search(dimensions, options.entries)
        verdict = "PASS" if figure.cpu_ms <= TARGET_MS else "FAIL"
        failed |= verdict == "FAIL"
        print(
            f"  {dimensions:5d} dims: {figure.cpu_ms:6.3f} ms CPU, {figure.wall_ms:6.3f} ms wall,"
            f" recall {figure.recall:.0%}  [{verdict} <= {TARGET_MS} ms]"
        )
    embedding = asyncio.run(measure_embedding(calls=options.embedding_calls))
    print(
        f"embedding call (probe through the upstream link, {embedding.dimensions} dims, local "
        f"fake): p50 {embedding.p50_ms:.3f} ms, p99 {embedding.p99_ms:.3f} ms wall"
    )
    return 1 if failed else 0
