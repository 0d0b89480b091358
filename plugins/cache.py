"""``cache``: answer identical requests from stored answers, and share identical calls in flight.

A request's key (:mod:`proxy.cache.key`) covers its scope, the model it named and everything that
changes the answer, computed on the call as the chain left it (after masking). What one request
may do is read from its headers and gateway options (:mod:`proxy.cache.control`). Then:

- **hit** — a live entry, young enough for the client's ``max-age``: the answer is served from it,
  whole or replayed as a stream in the client's dialect (:mod:`proxy.cache.replay`), whichever way
  it was stored. No upstream call; the reply carries ``age`` (seconds since the answer was made).
  An OpenAI chat client's first streamed hit of a memory entry gives it its replay's frames,
  which the next streamed hits write as they are, and its first whole hit checks once that the
  answer's ``raw`` body is verbatim, which the next whole hits send as they are
  (:meth:`CachePlugin._prepare_for_openai`).
- **coalesced** — no entry, but an identical request is being answered right now: this one waits
  for that answer instead of calling the upstream (:mod:`proxy.cache.coalesce`), and is served as a
  hit of age 0. If that call fails before it has an answer, this request calls on its own.
- **miss** — the upstream is called; a complete answer (a whole 200, or a stream that ended
  normally with its finish reason and usage) of at most ``max_entry_bytes`` is stored for its TTL.
  Errors, cut or cancelled streams are never stored. ``Cache-Control: no-cache`` is a miss that
  does not look up (and so refreshes the entry).
- **bypass** — ``no-store``, or a request that did not ask in ``opt_in`` mode: the cache plays no
  part.

Replies carry ``x-crossway-cache: hit | miss | bypass`` (coalesced requests say ``hit``). The
request's :class:`~proxy.core.canonical.Accounting` gets the verdict; a hit costs 0 and records what
the stored answer cost as ``saved_nanos`` (the ``cost`` plugin, inside this one, prices misses).

Failure policy: the cache never fails a request. A backend that cannot answer is a miss, and a
write that fails is dropped, both counted in ``crossway_cache_errors_total{reason="backend"}``;
an entry that cannot be decoded is deleted and missed (``reason="corrupt"``). Writes run after
the reply has been handed on, off the request's path, and are awaited by :meth:`close`.

**semantic** (``semantic: {embedding_model, threshold, scope_by, last_messages}``, off unless
configured) — after an exact miss with no identical call in flight, the request's last user
message(s) are embedded and compared with the questions already answered in the same scope
(:mod:`proxy.cache.semantic_cache`); a match at or above ``threshold`` is served like a hit, with
``x-crossway-cache: semantic`` and ``x-crossway-cache-similarity``. A miss stores its vector with
its answer. The embedding's cost is added to the request's (by this plugin's ``finished`` hook,
before the ``cost`` plugin's records it: list ``cache`` before ``cost``). Embeddings calls
themselves, and media calls (audio, images, moderations, rerank), pass by the cache.

``backend: memory`` keeps entries in this process: one LRU bounded by ``max_bytes`` (each entry
kept decoded too once read, so that hits decode nothing), kept across config reloads (a reloaded
config's ``max_bytes`` applies once it serves, evicting what no longer fits), lost on restart, not
shared between workers. ``backend: store`` keeps them in the process's state store (shared once
that store is Redis). Coalescing is per process. ``clock`` (wall time, seconds) is injectable;
entries expire on it whatever the backend.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta

from proxy.cache.backends import Backend, MemoryBackend, StoreBackend
from proxy.cache.coalesce import Coalescer, Shared
from proxy.cache.control import Directives, Mode, directives, plain_directives
from proxy.cache.entry import (
    CorruptEntry,
    Entry,
    decode_entry,
    encode_entry,
    with_frames,
    with_verbatim,
)
from proxy.cache.flight import Flight
from proxy.cache.key import Scope, cache_key
from proxy.cache.lru import ByteLRU
from proxy.cache.replay import CACHE_HEADER, OPENAI, hit_reply
from proxy.cache.semantic import SemanticConfig
from proxy.cache.semantic_feed import SemanticFeed
from proxy.core.canonical import Accounting, Call
from proxy.core.errors import GatewayError, NoReadyDeployment
from proxy.core.plugin import Next
from proxy.core.reply import Reply, Response
from proxy.runtime.plugins import PluginContext
from proxy.state.store import StoreUnavailable

if TYPE_CHECKING:  # imported when configured: numpy is not loaded for the exact cache alone
    from proxy.cache.semantic_cache import Probe, SemanticCache

Clock = Callable[[], float]
SIMILARITY_HEADER = "x-crossway-cache-similarity"
_BUFFER_FACTOR = 32
"""A stream is kept for the cache (and joiners) until its frames pass this many entries' bound."""
_MEMORY = "cache:memory"
"""The name of the memory backend's map among the process's kept objects."""


class CacheConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The ``cache`` plugin's options (seconds and bytes); see the module docstring."""

    backend: Literal["memory", "store"] = "memory"
    ttl: Annotated[int, Meta(ge=1)] = 1800
    max_ttl: Annotated[int, Meta(ge=1)] = 259_200
    max_bytes: Annotated[int, Meta(ge=1)] = 268_435_456
    max_entry_bytes: Annotated[int, Meta(ge=1)] = 1_048_576
    scope: Scope = "team"
    mode: Mode = "always"
    coalesce: bool = True
    semantic: SemanticConfig | None = None


class CachePlugin:
    """See the module docstring."""

    Options = CacheConfig

    def __init__(
        self, options: CacheConfig, context: PluginContext, *, clock: Clock = time.time
    ) -> None:
        if options.ttl > options.max_ttl:
            raise ValueError(f"ttl ({options.ttl}) must not exceed max_ttl ({options.max_ttl})")
        if options.max_entry_bytes > options.max_bytes and options.backend == "memory":
            raise ValueError("max_entry_bytes must not exceed max_bytes")
        self._options = options
        self._plain = plain_directives(options.ttl, options.max_ttl)
        self._clock = clock
        self._state = context.state
        self._lru: ByteLRU | None = None
        self._backend: Backend
        if options.backend == "memory":  # the process's one map (see the module docstring)
            self._lru = context.state.keep(_MEMORY, lambda: ByteLRU(options.max_bytes, clock))
            self._backend = MemoryBackend(self._lru)
        else:
            self._backend = StoreBackend(context.state.store_for("cache"))
        metrics = context.metrics
        self._results = {
            result: metrics.cache_requests(result)
            for result in ("hit", "miss", "bypass", "coalesced")
        }
        self._errors = {reason: metrics.cache_errors(reason) for reason in ("backend", "corrupt")}
        self._saved_usd = metrics.cache_saved_usd()
        self._bytes_gauge = metrics.cache_bytes() if options.backend == "memory" else None
        self._flights = Coalescer(_BUFFER_FACTOR * options.max_entry_bytes, self._joined)
        self._tasks: set[asyncio.Task[None]] = set()
        self._semantic: SemanticCache | None = None
        if options.semantic is not None:
            self._start_semantic(options.semantic, context, clock)

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Answer ``call`` from the cache, a call in flight, or ``next`` (see the module
        docstring). Raises :class:`~proxy.core.errors.BadRequest` for a malformed
        ``x-crossway-cache-ttl``; otherwise only what ``next`` raises."""
        if call.embedding is not None or call.media is not None:  # see the module docstring
            return await next(call)
        options = self._options
        rules = directives(
            call.client_headers,
            call.options,
            mode=options.mode,
            ttl=options.ttl,
            max_ttl=options.max_ttl,
            plain=self._plain,
        )
        if rules.bypass:
            self._results["bypass"].inc()
            call.accounting.cache = "bypass"
            reply = await next(call)
            reply.headers[CACHE_HEADER] = "bypass"
            return reply
        key = cache_key(call, options.scope)
        if rules.read:
            if self._lru is not None:  # no coroutine for what memory answers at once
                found = self._recall(key, rules)
            else:
                found = await self._read(key, rules)
            if found is not None:
                return self._hit(call, key, *found)
            shared = self._flights.joinable(key)
            if shared is not None:
                joined = await self._flights.join(call, shared)
                if joined is not None:
                    return joined
                return await self._miss(call, key, rules, next, share=False)
            if self._semantic is not None:
                probe = await self._semantic.probe(call, next)
                if probe is not None:
                    hit = await self._semantic_hit(call, probe, rules)
                    if hit is not None:
                        return hit
                    return await self._miss(
                        call, key, rules, next, share=options.coalesce, probe=probe
                    )
        return await self._miss(call, key, rules, next, share=options.coalesce)

    def _start_semantic(self, config: SemanticConfig, context: PluginContext, clock: Clock) -> None:
        from proxy.cache.semantic_cache import SemanticCache  # numpy, only when configured

        try:  # a model nothing can route is a config error; one not ready now is not
            context.resolve(config.embedding_model)
        except NoReadyDeployment:
            pass
        except GatewayError as exc:
            raise ValueError(f"semantic.embedding_model: {exc.message}") from None
        options = self._options
        store = context.state.store_for("cache") if options.backend == "store" else None
        semantic = self._semantic = SemanticCache(
            config,
            options.scope,
            context.resolve,
            self._semantic_failed,
            feed=None if store is None else SemanticFeed(store, ttl=options.max_ttl),
            clock=clock,
        )
        self._results["semantic"] = context.metrics.cache_requests("semantic")
        self._errors["embedding"] = context.metrics.cache_errors("embedding")
        self.finished = semantic.finished

    def span_attributes(self, call: Call) -> dict[str, str]:
        """``crossway.cache`` on the plugin's span when tracing is on: ``hit``, ``miss`` or
        ``bypass`` (nothing when the request ended before the cache decided)."""
        result = call.accounting.cache
        return {} if result is None else {"crossway.cache": result}

    async def start(self) -> None:
        """Apply this config's ``max_bytes`` to the process's memory map (once this config
        serves: a reload that fails leaves the serving one's bound)."""
        if self._lru is not None:
            self._lru.resize(self._options.max_bytes)
            self._export_bytes()

    @property
    def waiting(self) -> int:
        """Requests now waiting for an identical call in flight to answer."""
        return self._flights.waiting

    async def close(self) -> None:
        """Wait for the entry writes still running."""
        while self._tasks:
            await asyncio.wait(tuple(self._tasks))

    # -- hits ----------------------------------------------------------------------------------

    def _hit(self, call: Call, key: str, entry: Entry, age: float) -> Reply:
        self._results["hit"].inc()
        self._record_hit(call.accounting, entry.cost_nanos)
        if call.dialect == OPENAI and self._lru is not None:
            self._prepare_for_openai(call, key, entry)
        return _served(call, entry, age)

    def _prepare_for_openai(self, call: Call, key: str, entry: Entry) -> None:
        """On the first streamed hit of an OpenAI chat client (the dialect that writes frames and
        ``raw`` bodies as they are), give a memory entry its replay's frames; on the first whole
        one, check once that its ``raw`` body is verbatim. This hit and the next ones use them.
        The entry is rewritten at once, with nothing run since it was read (no newer answer is
        replaced); the store backend's entries are left as they were stored."""
        lru = self._lru
        assert lru is not None
        if call.stream:
            if entry.frames is not None:
                return
            data = with_frames(entry, self._options.max_entry_bytes)
        else:
            if entry.verbatim or entry.response.raw is None:
                return
            data = with_verbatim(entry)
        if data is not None and len(data) <= self._options.max_entry_bytes:
            lru.set(key, data, entry.expires - self._clock())
            self._export_bytes()

    async def _semantic_hit(self, call: Call, probe: Probe, rules: Directives) -> Reply | None:
        """The answer a semantic match names, served like a hit; None if it is gone."""
        match = probe.match
        if match is None:
            return None
        found = await self._read(match.entry, rules)
        if found is None:
            return None
        entry, age = found
        self._results["semantic"].inc()
        self._record_hit(call.accounting, entry.cost_nanos)
        reply = _served(call, entry, age)
        reply.headers[CACHE_HEADER] = "semantic"
        reply.headers[SIMILARITY_HEADER] = f"{match.similarity:.4f}"
        return reply

    def _semantic_failed(self, reason: str, error: BaseException | None) -> None:
        self._errors["embedding" if reason == "embedding" else "backend"].inc()
        if isinstance(error, StoreUnavailable):
            self._state.degraded("cache", "miss")

    async def _read(self, key: str, rules: Directives) -> tuple[Entry, float] | None:
        """The live entry under ``key`` young enough for ``rules``, with its age; None when
        there is none (a backend failure or a corrupt entry, counted, is none too)."""
        if self._lru is not None:
            return self._recall(key, rules)
        try:
            data = await self._backend.get(key)
        except Exception as exc:  # any backend failure is a miss
            self._errors["backend"].inc()
            if isinstance(exc, StoreUnavailable):
                self._state.degraded("cache", "miss")
            return None
        if data is None:
            return None
        try:
            entry = decode_entry(data)
        except CorruptEntry:
            self._errors["corrupt"].inc()
            await self._delete(key)
            return None
        return self._usable(entry, rules)

    def _recall(self, key: str, rules: Directives) -> tuple[Entry, float] | None:
        """:meth:`_read` from the memory backend, which answers at once: each entry is decoded
        on its first read only and kept decoded (:meth:`ByteLRU.get_decoded`), so hits share
        one :class:`Entry` and its answer, which nothing changes in place (see
        :class:`~proxy.core.reply.Reply`)."""
        lru = self._lru
        assert lru is not None
        try:
            entry = lru.get_decoded(key, decode_entry)
        except CorruptEntry:
            self._errors["corrupt"].inc()
            lru.delete(key)
            self._export_bytes()
            return None
        return None if entry is None else self._usable(entry, rules)

    def _usable(self, entry: Entry, rules: Directives) -> tuple[Entry, float] | None:
        """``entry`` with its age, if it is live and young enough for ``rules``; else None."""
        now = self._clock()
        if entry.expires <= now:
            return None
        age = entry.age(now)
        if rules.max_age is not None and age > rules.max_age:
            return None
        return entry, age

    def _record_hit(self, accounting: Accounting, saved_nanos: int | None) -> None:
        accounting.cache = "hit"
        accounting.cost_nanos = 0
        accounting.saved_nanos = saved_nanos
        if saved_nanos:
            self._saved(saved_nanos)

    def _joined(self, accounting: Accounting, saved_nanos: int | None) -> None:
        """A request served by an identical call in flight (see :mod:`proxy.cache.coalesce`)."""
        self._results["coalesced"].inc()
        self._record_hit(accounting, saved_nanos)

    def _saved(self, nanos: int) -> None:
        self._saved_usd.inc(nanos / 1e9)

    # -- misses --------------------------------------------------------------------------------

    async def _miss(
        self,
        call: Call,
        key: str,
        rules: Directives,
        next: Next,
        *,
        share: bool,
        probe: Probe | None = None,
    ) -> Reply:
        self._results["miss"].inc()
        accounting = call.accounting
        accounting.cache = "miss"
        flight, shared = self._flights.lead(key, accounting, share=share)
        try:
            reply = await next(call)
        except BaseException:
            flight.fail()
            self._flights.forget(key, flight)
            raise
        reply.headers[CACHE_HEADER] = "miss"
        if reply.response is None:
            on_end = functools.partial(
                self._stream_ended, key, rules.ttl, flight, reply, accounting, shared, probe
            )
            reply.stream = flight.start_stream(reply, on_end)
            return reply
        entry = self._entry(reply, reply.response, rules.ttl, accounting.cost_nanos)
        data = encode_entry(entry)
        flight.finish_whole(reply, data)
        if len(data) <= self._options.max_entry_bytes:
            self._spawn(self._write(key, data, rules.ttl, flight, probe))
        else:
            self._flights.forget(key, flight)
        return reply

    def _stream_ended(
        self,
        key: str,
        ttl: int,
        flight: Flight,
        reply: Reply,
        leader: Accounting,
        shared: Shared | None,
        probe: Probe | None,
        complete: bool,
    ) -> None:
        """A miss's stream is over (see :meth:`Flight.start_stream`)."""
        if not complete:
            self._flights.forget(key, flight)
            return
        cost = leader.cost_nanos
        if shared is not None:
            self._flights.settle(shared, cost, self._saved)
        self._spawn(self._store_stream(key, ttl, flight, reply, cost, probe))

    async def _store_stream(
        self,
        key: str,
        ttl: int,
        flight: Flight,
        reply: Reply,
        cost: int | None,
        probe: Probe | None,
    ) -> None:
        """Fold a stream that ended normally into an entry and store it (off the stream's
        path: it runs once the last chunks have been handed on)."""
        response = flight.answer()
        if response is None:
            self._flights.forget(key, flight)
            return
        entry = self._entry(reply, response, ttl, cost)
        data = encode_entry(entry)
        if len(data) > self._options.max_entry_bytes:
            self._flights.forget(key, flight)
            return
        await self._write(key, data, ttl, flight, probe)

    async def _write(
        self, key: str, data: bytes, ttl: int, flight: Flight, probe: Probe | None = None
    ) -> None:
        """Store an entry; then index its question's vector, when it had one."""
        try:
            await self._backend.set(key, data, ttl)
        except Exception:  # a failed write only loses the entry
            self._errors["backend"].inc()
            return
        finally:
            self._flights.forget(key, flight)
            self._export_bytes()
        if probe is not None and self._semantic is not None:
            await self._semantic.remember(probe, key, ttl)

    def _entry(self, reply: Reply, response: Response, ttl: int, cost: int | None) -> Entry:
        now = self._clock()
        return Entry(now, now + ttl, reply.provider, reply.model, response, cost_nanos=cost)

    async def _delete(self, key: str) -> None:
        try:
            await self._backend.delete(key)
        except Exception:
            self._errors["backend"].inc()
        self._export_bytes()

    def _export_bytes(self) -> None:
        gauge = self._bytes_gauge
        if gauge is not None:
            gauge.set(self._backend.bytes or 0)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _served(call: Call, entry: Entry, age: float) -> Reply:
    """The reply that serves ``call`` from ``entry`` (:func:`~proxy.cache.replay.hit_reply`)."""
    return hit_reply(
        call,
        entry.provider,
        entry.model,
        entry.response,
        age,
        entry.frames,
        entry.verbatim,
        entry.usage_json,
    )
