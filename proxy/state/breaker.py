"""Circuit breakers: after repeated failures, stop calling a Redis server until a probe says it is
back.

:class:`CircuitBreaker`: closed (the normal state), every call goes through. ``failures``
consecutive failures open it: calls then fail at once, costing no timeout, and the owner probes
the server every ``cooldown`` seconds (:meth:`CircuitBreaker.probe_due`); the first probe that
succeeds closes it. Any success resets the count. The breaker holds no lock and no task: its
owner runs the probes (:class:`Prober`). ``on_change(up)`` is called on every transition (the
``crossway_state_up`` gauge, a log line).

:class:`Guarded` is one server's connection behind its own breaker: a single Redis
(:class:`Standalone`, ``cluster: false``) is one, a Redis Cluster one per node
(:mod:`proxy.state.cluster`), so that a dead node makes only its own slots unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.state.config import BreakerConfig, RedisAddress
from proxy.state.resp import RespConnection
from proxy.state.store import StoreUnavailable

Clock = Callable[[], float]
Call = Callable[..., Awaitable[Any]]
Prepare = Callable[[Call], Awaitable[None]]
"""What makes a server ready for its store, given the server's ``call`` (the store's scripts
loaded); raises :class:`StoreUnavailable` when the server does not answer."""
OnUp = Callable[[str, bool], None]
"""Told ``(node, up)``: a server (``host:port``) serving the store answers again, or no more."""


class CircuitBreaker:
    """See the module docstring."""

    __slots__ = ("_clock", "_cooldown", "_failures", "_limit", "_next_probe", "_on_change", "open")

    def __init__(
        self,
        failures: int,
        cooldown: float,
        on_change: Callable[[bool], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if failures < 1 or cooldown <= 0:
            raise ValueError("failures must be at least 1 and cooldown positive")
        self._limit = failures
        self._cooldown = cooldown
        self._on_change = on_change
        self._clock = clock
        self._failures = 0
        self._next_probe = 0.0
        self.open = False
        """Whether calls are refused now."""

    def succeeded(self) -> None:
        """A call (or a probe) succeeded: reset the count, close the breaker."""
        self._failures = 0
        if self.open:
            self.open = False
            if self._on_change is not None:
                self._on_change(True)

    def failed(self) -> None:
        """A call failed; the ``failures``-th in a row opens the breaker."""
        self._failures += 1
        if not self.open and self._failures >= self._limit:
            self.trip()

    def trip(self) -> None:
        """Open now (the backend is known to be down, as at start-up)."""
        self._next_probe = self._clock() + self._cooldown
        if not self.open:
            self.open = True
            if self._on_change is not None:
                self._on_change(False)

    def probe_due(self) -> bool:
        """Whether an open breaker's next probe is due (and, if so, schedules the one after)."""
        if not self.open:
            return False
        now = self._clock()
        if now < self._next_probe:
            return False
        self._next_probe = now + self._cooldown
        return True

    @property
    def cooldown(self) -> float:
        """Seconds between probes."""
        return self._cooldown


def breaker_of(config: BreakerConfig, on_change: Callable[[bool], None]) -> CircuitBreaker:
    """A breaker as ``state.redis.breaker`` configures it."""
    return CircuitBreaker(config.failures, config.cooldown_ms / 1000, on_change)


class Guarded:
    """One Redis server, ``name`` (``host:port``), reached through ``connection`` behind
    ``breaker``."""

    __slots__ = ("breaker", "connection", "name")

    def __init__(self, name: str, connection: RespConnection, breaker: CircuitBreaker) -> None:
        self.name = name
        self.connection = connection
        self.breaker = breaker

    async def call(self, *args: Any, asking: bool = False) -> Any:
        """The server's reply to one command (``asking``: preceded by ``ASKING``), a
        :class:`~proxy.state.resp.ReplyError` for an error reply. Raises
        :class:`StoreUnavailable` at once while the breaker is open; a failure (the
        connection's :class:`StoreUnavailable`) counts towards opening it, a reply resets the
        count."""
        breaker = self.breaker
        if breaker.open:
            raise StoreUnavailable(f"Redis {self.name} is unavailable (circuit open)")
        connection = self.connection
        try:
            reply = await (connection.call_asking if asking else connection.call)(*args)
        except StoreUnavailable:
            breaker.failed()
            raise
        breaker.succeeded()
        return reply

    async def ready(self, prepare: Prepare) -> None:
        """``prepare`` the server, whatever the breaker says, then close the breaker. Raises
        :class:`StoreUnavailable` (the breaker left as it is) when the server does not answer."""
        await prepare(self.connection.call)
        self.breaker.succeeded()


class Prober:
    """Awaits ``probe()`` every ``cooldown`` seconds while ``down()`` holds, in one task of its
    own: :meth:`start` starts it unless it runs (call it when something goes down), it ends by
    itself once nothing is down, and :meth:`close` ends it for good. A probe that raises
    :class:`StoreUnavailable` is a failed try: the next comes a cooldown later."""

    def __init__(
        self, cooldown: float, down: Callable[[], bool], probe: Callable[[], Awaitable[None]]
    ) -> None:
        self._cooldown = cooldown
        self._down = down
        self._probe = probe
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        """Probe from now on while something is down (idempotent; nothing once closed)."""
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop probing (idempotent)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        try:
            while self._down():
                await asyncio.sleep(self._cooldown)
                with contextlib.suppress(StoreUnavailable):
                    await self._probe()
        finally:
            self._task = None


class Standalone:
    """A single Redis server (``cluster: false``) behind one breaker, :meth:`call` as
    :meth:`Guarded.call`. ``prepare`` readies it at :meth:`start` and in each probe;
    ``on_up(node, up)`` is told every change, the node named ``host:port`` (or the socket's
    path). Use it from one event loop."""

    def __init__(
        self,
        address: RedisAddress,
        timeout: float,
        breaker: BreakerConfig,
        prepare: Prepare,
        on_up: OnUp,
    ) -> None:
        self.name = address.node
        self._prepare = prepare
        self._on_up = on_up
        self._server = Guarded(
            self.name, RespConnection(address, timeout), breaker_of(breaker, self._changed)
        )
        self.call: Call = self._server.call
        self._prober = Prober(self._server.breaker.cooldown, lambda: not self.up, self._probe)

    @property
    def up(self) -> bool:
        """Whether commands are sent to the server now (its breaker is closed)."""
        return not self._server.breaker.open

    async def start(self) -> None:
        """Connect and prepare the server once (bounded by the timeout); with the server down,
        open the breaker and probe. Never raises."""
        try:
            await self._server.ready(self._prepare)
        except StoreUnavailable:
            self._server.breaker.trip()
            return
        self._on_up(self.name, True)

    async def close(self) -> None:
        """Stop probing and close the connection (idempotent)."""
        await self._prober.close()
        await self._server.connection.close()

    async def _probe(self) -> None:
        if self._server.breaker.probe_due():
            await self._server.ready(self._prepare)

    def _changed(self, up: bool) -> None:
        self._on_up(self.name, up)
        if not up:
            self._prober.start()
