"""The multi-key counter operations of :class:`~proxy.state.memory_store.MemoryStore`.

``incr_within`` and ``incr_later`` (see :class:`~proxy.state.store.Store`), and ``incr_within_now``,
the same step without awaiting it, for the budgets' hot path. They live in a base class of the
store, over its values table, so that the store's module keeps one job per part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from proxy.state.store import Clock


class MemoryCounters:
    """A base of :class:`~proxy.state.memory_store.MemoryStore`: its counter operations over many
    keys at once. They read and write the store's values table (``_data``: key → ``(value,
    expiry)``, integer counters as ints) on its clock, and use its helpers (``_not_a``,
    ``_write``, ``_sweep``), which the store defines."""

    _clock: Clock
    _data: dict[str, tuple[bytes | int, float | None]]
    _writes: int
    _sweep_every: int
    _max_keys: int
    _not_a: Callable[[str, str], None]
    _write: Callable[[str, bytes | int, float | None], None]
    _sweep: Callable[[], None]

    async def incr_within(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
    ) -> tuple[int | None, list[int]]:
        """See :meth:`Store.incr_within` (:meth:`incr_within_now`)."""
        return self.incr_within_now(keys, amount, limits, ttls)

    def incr_later(self, keys: Sequence[str], amount: int, ttls: Sequence[float | None]) -> None:
        """See :meth:`Store.incr_later`: applied at once, as :meth:`incr_within` without limits
        (nothing changes when a key holds a value that is not a counter)."""
        try:
            entries = self._counters(keys, list(map(self._data.get, keys)), ttls, self._clock())
        except ValueError:
            return
        for key, (value, expires) in zip(keys, entries, strict=True):
            self._write(key, value + amount, expires)

    def incr_within_now(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
        carried: int = 0,
    ) -> tuple[int | None, list[int]]:
        """:meth:`incr_within` as one synchronous call (what it awaits), for a caller that
        would otherwise await it on its hot path
        (:meth:`proxy.governance.budgets.counters.SpendCounters.reserve_now`): half of
        :class:`~proxy.state.store.AnswersNow`. Not part of :class:`Store`: remote stores cannot
        answer at once.

        ``carried`` is added with ``amount`` and the limits are checked as if it had been added
        first: ``incr_within(keys, amount + carried, [limit - carried, …], ttls)``, without
        building the lowered limits (the budgets' corrections riding in a reservation)."""
        clock = self._clock  # (an attribute, then a call: a method load would not specialise)
        now = clock()
        data = self._data
        # Plain loops with a running index: zip(), enumerate() and list(map()) each cost more
        # than these two- or three-key loops.
        entries: list[tuple[int, float | None]] = []
        for key in keys:  # the common case: live integer counters
            entry = data.get(key)
            if (
                entry is None
                or type(entry[0]) is not int
                or (entry[1] is not None and entry[1] <= now)
            ):
                entries = self._counters(keys, [data.get(key) for key in keys], ttls, now)
                break
            entries.append(entry)  # type: ignore[arg-type]
        if limits is not None:
            index = 0
            for entry in entries:
                if entry[0] + carried >= limits[index]:
                    return index, [entry[0] for entry in entries]
                index += 1  # noqa: SIM113 (enumerate() costs more: see above)
        amount += carried
        values: list[int] = []
        index = 0
        for value, expires in entries:
            value += amount
            key = keys[index]
            index += 1  # noqa: SIM113
            data.pop(key, None)  # re-inserted: dict order is write order
            data[key] = (value, expires)
            values.append(value)
        writes = self._writes + len(values)  # _wrote(), without its call
        if writes >= self._sweep_every:
            self._writes = 0
            self._sweep()
        else:
            self._writes = writes
        while len(data) > self._max_keys:
            del data[next(iter(data))]
        return None, values

    def _counters(
        self,
        keys: Sequence[str],
        entries: list[tuple[bytes | int, float | None] | None],
        ttls: Sequence[float | None],
        now: float,
    ) -> list[tuple[int, float | None]]:
        """``entries`` of ``keys`` as counters: a missing or expired one at 0 with the expiry its
        TTL gives, text parsed; ValueError for anything else."""
        counters: list[tuple[int, float | None]] = []
        for index, entry in enumerate(entries):
            if entry is None or (entry[1] is not None and entry[1] <= now):
                self._not_a(keys[index], "a counter")
                ttl = ttls[index]
                if ttl is not None and ttl <= 0:
                    raise ValueError("ttl must be positive")
                counters.append((0, None if ttl is None else now + ttl))
            else:
                value = entry[0]
                counters.append(
                    (value if isinstance(value, int) else _integer(keys[index], value), entry[1])
                )
        return counters


def _integer(key: str, value: bytes) -> int:
    """The counter ``value`` of ``key`` held as text; ValueError if it is not an integer."""
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"key {key!r} does not hold an integer") from None
