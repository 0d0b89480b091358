"""The semantic cache: find an earlier answer to the same question asked in other words.

The ``cache`` plugin calls :meth:`SemanticCache.probe` after a request missed the exact cache
(and no identical request was in flight to join): the request's query text
(:mod:`proxy.cache.semantic`) is embedded by ``embedding_model`` through the rest of the chain
(the links inside the cache: cost prices it, fallback, retry and balance apply; limits and auth,
outside the cache, do not see it again), and the scope's vectors (:mod:`proxy.cache.vector_index`)
are searched for the nearest earlier question. A match at or above ``threshold`` names the exact
cache key of its answer, which the plugin serves like an exact hit. Otherwise the plugin calls
the upstream and, once the answer is stored under its exact key, :meth:`SemanticCache.remember`
indexes the vector beside it (for the answer's TTL).

With a ``feed`` (the exact cache's ``backend: store``: the state store, Redis when shared), every
vector is also written to the store and each probe first reads what other processes wrote
(:mod:`proxy.cache.semantic_feed`), so that an answer cached by one instance is found by another.
Without one (``backend: memory``) the index is this process's only, like the answers.

Failure policy: the semantic cache never fails a request. An embedding that fails or takes more
than ``timeout`` seconds, an answer without one vector, or a store that cannot answer makes the
probe return None (the request goes on as an exact-only miss), reported to ``on_error`` with the
reason (``embedding`` or ``backend``). What the embedding cost is added to the request's charge
by :meth:`SemanticCache.finished` (the plugin's ``finished`` hook), which runs once the request
is over, whatever the cost plugin charged for the answer meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from proxy.cache.key import Scope
from proxy.cache.semantic import SemanticConfig, query_text, semantic_scope
from proxy.cache.semantic_feed import Record, SemanticFeed
from proxy.cache.vector_index import Match, VectorIndex
from proxy.core.canonical import Call, Deployment, EmbeddingRequest, Timings
from proxy.core.plugin import FinishedRequest, Next

Clock = Callable[[], float]
Resolve = Callable[[str], list[Deployment]]
OnError = Callable[[str, BaseException | None], None]


class Probe(NamedTuple):
    """A request's semantic lookup: its scope and vector (to remember with its answer), the
    nearest entry at or above the threshold (None: a miss) and what the embedding cost
    (nano-dollars; 0 when unknown)."""

    scope: str
    vector: list[float]
    match: Match | None
    cost_nanos: int


class SemanticCache:
    """See the module docstring. ``tenant`` is the cache's ``scope``; ``clock`` wall time."""

    def __init__(
        self,
        config: SemanticConfig,
        tenant: Scope,
        resolve: Resolve,
        on_error: OnError,
        *,
        feed: SemanticFeed | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.config = config
        self.index = VectorIndex(config.max_entries, config.max_vectors)
        self._tenant = tenant
        self._resolve = resolve
        self._on_error = on_error
        self._feed = feed
        self._clock = clock
        self._embedding_nanos: dict[str, int] = {}  # per request in flight

    def finished(self, request: FinishedRequest) -> None:
        """Add what ``request``'s embedding cost to what it is charged (a ``finished`` hook:
        it must run before the ``cost`` plugin's records the request)."""
        nanos = self._embedding_nanos.pop(request.request_id, None)
        if nanos is not None and request.call is not None:
            accounting = request.call.accounting
            accounting.cost_nanos = (accounting.cost_nanos or 0) + nanos

    async def probe(self, call: Call, next: Next) -> Probe | None:
        """Embed ``call``'s query text and search its scope; None when the call has no query
        text or the lookup failed (see the module docstring)."""
        config = self.config
        text = query_text(call, config.last_messages, config.max_chars)
        if text is None:
            return None
        vector, cost = await self._embed(call, text, next)
        if cost:
            pending = self._embedding_nanos
            pending[call.request_id] = pending.get(call.request_id, 0) + cost
        if vector is None:
            return None
        scope = semantic_scope(call, config, self._tenant)
        now = self._clock()
        if self._feed is not None:
            try:
                records = await self._feed.fetch(scope)
            except Exception as exc:  # the store cannot answer: search what is known here
                self._on_error("backend", exc)
                records = []
            for record in records:
                vector_of = np.frombuffer(record.vector, dtype="<f4")
                self.index.add(scope, record.key, vector_of, record.expires, now)
        match = self.index.nearest(scope, vector, now)
        if match is not None and match.similarity < config.threshold:
            match = None
        return Probe(scope, vector, match, cost)

    async def remember(self, probe: Probe, key: str, ttl: float) -> None:
        """Index ``probe``'s vector as the question answered by the entry under ``key``, for
        ``ttl`` seconds (and write it to the feed; a store that fails is reported)."""
        now = self._clock()
        expires = now + ttl
        self.index.add(probe.scope, key, probe.vector, expires, now)
        if self._feed is None:
            return
        vector = np.asarray(probe.vector, dtype="<f4").tobytes()
        try:
            await self._feed.publish(probe.scope, Record(key, expires, vector), ttl)
        except Exception as exc:
            self._on_error("backend", exc)

    async def _embed(self, call: Call, text: str, next: Next) -> tuple[list[float] | None, int]:
        model = self.config.embedding_model
        embedding = Call(
            request_id=f"{call.request_id}.semantic",
            dialect="openai_embeddings",
            model=model,
            messages=[],
            principal=call.principal,
            timings=Timings(start=time.perf_counter()),
            embedding=EmbeddingRequest(texts=[text]),
        )
        try:
            embedding.deployments = self._resolve(model)
            async with asyncio.timeout(self.config.timeout):
                reply = await next(embedding)
        except Exception as exc:  # a gateway error, a timeout, a broken link: exact only
            self._on_error("embedding", exc)
            return None, embedding.accounting.cost_nanos or 0
        finally:
            call.timings.upstream_wait += embedding.timings.upstream_wait
        cost = embedding.accounting.cost_nanos or 0
        vectors = reply.embeddings.vectors if reply.embeddings is not None else []
        if len(vectors) != 1:
            self._on_error("embedding", None)
            return None, cost
        return vectors[0], cost
