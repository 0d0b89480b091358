"""Test-only subclasses of the reliability plugins, loaded by ``module:Class`` from a test config.

They are the built-in plugins with their injectable parts fixed for deterministic end-to-end
tests: waits are recorded instead of slept, clocks are :class:`~tests.faults.FakeClock` objects a
test can advance (and share with the fault upstream), and random choices are seeded. A test
reaches the instances through the running app's snapshot (``app[RUNTIME].snapshot.plugins``).
"""

from __future__ import annotations

import random

from plugins.balance import BalanceConfig, BalancePlugin
from plugins.retry import RetryConfig, RetryPlugin
from proxy.runtime.plugins import PluginContext
from proxy.state.memory_store import MemoryStore
from tests.faults import FakeClock


class RecordingRetry(RetryPlugin):
    """``retry`` whose waits are recorded in ``delays`` (not slept)."""

    def __init__(self, options: RetryConfig, context: PluginContext) -> None:
        self.delays: list[float] = []
        super().__init__(options, context, sleep=self._record, rng=random.Random(5))

    async def _record(self, seconds: float) -> None:
        self.delays.append(seconds)


class ClockedBalance(BalancePlugin):
    """``balance`` on ``clock`` (health cooldowns, limit windows, latency) with a seeded RNG;
    its health and limit counters in a store of its own on the same clock (the shared one
    expires keys on the real clock)."""

    def __init__(self, options: BalanceConfig, context: PluginContext) -> None:
        self.clock = FakeClock()
        super().__init__(
            options, context, store=MemoryStore(self.clock), clock=self.clock, rng=random.Random(5)
        )
