"""A circuit breaker: after repeated failures, stop calling a backend until a probe says it is back.

Closed (the normal state), every call goes through. ``failures`` consecutive failures open it:
calls then fail at once, costing no timeout, and the owner probes the backend every
``cooldown`` seconds (:meth:`CircuitBreaker.probe_due`); the first probe that succeeds closes it.
Any success resets the count. The breaker holds no lock and no task: the store that owns it
runs the probes. ``on_change(up)`` is called on every transition (the ``crossway_state_up``
gauge, a log line).
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]


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
