"""Request coalescing: the identical calls in flight, by cache key, and what a request joining one
receives.

A :class:`Coalescer` holds one :class:`~proxy.cache.flight.Flight` per key while a miss for that
key is being answered (:meth:`Coalescer.lead`), with the request that leads it and the streamed
requests that joined it. An identical request arriving meanwhile :meth:`~Coalescer.join`\\ s it
and is served as a hit of age 0 — the leader's whole answer, or its stream as it arrives (read to
its end first for a whole request) — or is told to call on its own (None) when the leader failed
before it had an answer or the stream could no longer be shared. A joined request's accounting
is set through the ``record`` hook (a hit that saved what the leader's answer cost; for a
stream, known only when it ends: :meth:`~Coalescer.settle`).

Coalescing is per process (one event loop); the cache plugin owns one coalescer.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.cache.entry import CorruptEntry, decode_entry
from proxy.cache.flight import Flight, FlightReader
from proxy.cache.replay import CACHE_HEADER, hit_reply
from proxy.core.canonical import Accounting, Call
from proxy.core.errors import GatewayError
from proxy.core.reply import Reply, Response

Record = Callable[[Accounting, int | None], None]
"""Told of each joined request: its accounting and what the answer saved (None: not known)."""
Saved = Callable[[int], None]
"""Told of each saving known only once a shared stream ended (nano-dollars, above 0)."""


class Shared:
    """A flight as the coalescer tracks it: who leads it, and the streamed joiners whose saving
    is set when its stream ends."""

    __slots__ = ("flight", "joiners", "leader")

    def __init__(self, flight: Flight, leader: Accounting) -> None:
        self.flight = flight
        self.leader = leader
        self.joiners: list[Accounting] = []


class Coalescer:
    """See the module docstring. ``buffer_limit`` bounds each flight's kept stream (bytes)."""

    __slots__ = ("_buffer_limit", "_flights", "_record")

    def __init__(self, buffer_limit: int, record: Record) -> None:
        self._buffer_limit = buffer_limit
        self._record = record
        self._flights: dict[str, Shared] = {}

    def __len__(self) -> int:
        """Keys with a flight that requests may still join or that is still being stored."""
        return len(self._flights)

    @property
    def waiting(self) -> int:
        """Requests now waiting for an identical call in flight to answer."""
        return sum(shared.flight.waiting for shared in self._flights.values())

    def joinable(self, key: str) -> Shared | None:
        """The flight under ``key`` that a request arriving now may join, if any."""
        shared = self._flights.get(key)
        return shared if shared is not None and shared.flight.joinable else None

    def lead(self, key: str, leader: Accounting, *, share: bool) -> tuple[Flight, Shared | None]:
        """A flight for a miss under ``key``, and its entry here when others may join it
        (``share``, and no flight under ``key`` yet). The caller must :meth:`forget` it once
        its answer is stored or refused."""
        share = share and key not in self._flights
        flight = Flight(joinable=share, buffer_limit=self._buffer_limit)
        if not share:
            return flight, None
        shared = self._flights[key] = Shared(flight, leader)
        return flight, shared

    def forget(self, key: str, flight: Flight) -> None:
        """``flight`` takes no more joiners (nothing happens if another one holds ``key``)."""
        shared = self._flights.get(key)
        if shared is not None and shared.flight is flight:
            del self._flights[key]

    def settle(self, shared: Shared, cost: int | None, saved: Saved) -> None:
        """A shared stream ended normally, its answer having cost ``cost``: every streamed
        joiner saved that much (each saving above 0 is told to ``saved``)."""
        for joiner in shared.joiners:
            joiner.saved_nanos = cost
            if cost:
                saved(cost)

    async def join(self, call: Call, shared: Shared) -> Reply | None:
        """``call``'s reply from the identical call in flight, or None to call on its own."""
        joined = await shared.flight.join(call.timings)
        if joined is None:
            return None
        leader = joined.reply
        if joined.entry is not None:
            try:
                entry = decode_entry(joined.entry)
            except CorruptEntry:  # cannot happen for an entry just encoded; stay correct anyway
                return None
            self._record(call.accounting, entry.cost_nanos)
            return hit_reply(call, leader.provider, leader.model, entry.response, 0.0)
        reader = joined.stream
        assert reader is not None
        if not call.stream:
            response = await _drain(shared.flight, reader)
            if response is None:
                return None
            self._record(call.accounting, shared.leader.cost_nanos)
            return hit_reply(call, leader.provider, leader.model, response, 0.0)
        self._record(call.accounting, None)
        shared.joiners.append(call.accounting)  # its saving is known when the stream ends
        return Reply(
            provider=leader.provider,
            model=leader.model,
            stream=reader,
            headers={CACHE_HEADER: "hit", "age": "0"},
            attempts=0,
        )


async def _drain(flight: Flight, reader: FlightReader) -> Response | None:
    """Read a shared stream to its end for a whole request: its answer, None on failure."""
    try:
        while await reader.next_batch(True):
            pass
    except GatewayError:
        return None
    finally:
        await reader.aclose()
    return flight.answer()
