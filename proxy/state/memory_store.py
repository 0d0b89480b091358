"""``MemoryStore``: the in-process :class:`~proxy.state.store.Store`, the embedded default.

Nothing to install, state lost on restart, not shared between worker processes. It keeps
Redis's semantics (see :mod:`proxy.state.store`), so that the Redis backend's tests compare the two.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from proxy.state.memory_counters import MemoryCounters
from proxy.state.store import Admission, Clock, LimitPlan, RateBucket, RateState, summarise

# Slack for float arithmetic: 7 units of a 7-per-minute bucket add up to 60.000000000000007 s.
_SLACK = 1e-6
_MORE_THAN_ANY = 1 << 63  # more units than any bucket holds


class MemoryStore(MemoryCounters):
    """The in-process :class:`Store`: dicts with lazy expiry on ``clock`` (seconds). It also
    answers the hot paths' steps at once (:class:`~proxy.state.store.AnswersNow`:
    :meth:`admit_now`, and :meth:`incr_within_now` of its counters' base).

    Values and integer counters live in one dict, GCRA buckets (their TAT, a float) and
    in-flight slots (their count of leases, an int, gone at zero) in one each, so that the
    limits' hot path reads and writes a number, not an entry. An admission's holder (a number)
    is kept with its slots until it is settled, so that settling it again releases nothing;
    leases live as long as the process (nothing here can lose a settlement). Keys never mix
    kinds: a key holds one kind at a time, as in Redis (``set`` and ``delete`` clear it of any
    kind; using a key of one kind as another raises :class:`ValueError`).

    Expired values are dropped when read; expired values, full buckets and in-flight counters
    back at zero (all of which read as missing) are dropped every ``sweep_every`` writes. When
    more than ``max_keys`` values are live the oldest written is evicted; past ``max_keys``
    buckets the oldest made are evicted at the next sweep. So memory is bounded whatever keys
    callers make up; in-flight counters are bounded by the requests in flight plus those idle
    since the last sweep.
    Not thread-safe: use it from one event loop.
    """

    def __init__(
        self, clock: Clock = time.monotonic, *, max_keys: int = 100_000, sweep_every: int = 1024
    ) -> None:
        if max_keys < 1 or sweep_every < 1:
            raise ValueError("max_keys and sweep_every must be at least 1")
        self._clock = clock
        self._max_keys = max_keys
        self._sweep_every = sweep_every
        self._writes = 0
        self._data: dict[str, tuple[bytes | int, float | None]] = {}
        self._tats: dict[str, float] = {}
        self._slots: dict[str, int] = {}
        self._held: dict[int, tuple[str, ...]] = {}  # holder -> its slots, until settled
        self._holders = 0  # the last holder given out

    async def get(self, key: str) -> bytes | None:
        """See :meth:`Store.get`. A bucket reads as its TAT, a slot counter as its count."""
        entry = self._live(key)
        if entry is not None:
            value = entry[0]
            return value if isinstance(value, bytes) else str(value).encode()
        count = self._slots.get(key)
        if count:  # a counter at zero is gone, as in Redis
            return str(count).encode()
        tat = self._tats.get(key)
        if tat is not None and tat > self._clock():
            return repr(tat).encode()
        return None

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """See :meth:`Store.set`."""
        self._forget_kinds(key)
        self._write(key, value, self._expiry(ttl))

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """See :meth:`Store.incr`."""
        entry = self._live(key)
        if entry is None:
            self._not_a(key, "a counter")
            count, expires = amount, self._expiry(ttl)
        else:
            current, expires = entry
            if not isinstance(current, int):
                try:
                    current = int(current)
                except ValueError:
                    raise ValueError(f"key {key!r} does not hold an integer") from None
            count = current + amount
        self._write(key, count, expires)
        return count

    async def delete(self, key: str) -> None:
        """See :meth:`Store.delete`."""
        self._data.pop(key, None)
        self._forget_kinds(key)

    async def ttl(self, key: str) -> float | None:
        """See :meth:`Store.ttl`. A bucket expires when it is full again (at its TAT)."""
        now = self._clock()
        entry = self._live(key, now)
        if entry is not None:
            return None if entry[1] is None else entry[1] - now
        tat = self._tats.get(key)
        return tat - now if tat is not None and tat > now else None

    async def rate_take(self, buckets: Sequence[RateBucket]) -> list[RateState]:
        """See :meth:`Store.rate_take`."""
        return self._take(buckets, self._clock())[0]

    async def rate_adjust(self, buckets: Sequence[RateBucket]) -> None:
        """See :meth:`Store.rate_adjust`."""
        self._adjust(buckets)

    async def hold(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """See :meth:`Store.hold`."""
        full = self._full_slot(keys, limits)
        if full is None:
            self._hold(keys)
        return full

    async def release(self, keys: Sequence[str]) -> None:
        """See :meth:`Store.release`."""
        self._release(keys)

    async def admit(self, plan: LimitPlan, tokens: int) -> Admission:
        """See :meth:`Store.admit` (:meth:`admit_now`)."""
        return self.admit_now(plan, tokens)

    def admit_now(self, plan: LimitPlan, tokens: int) -> Admission:
        """:meth:`admit` as one synchronous call, for the limits plugin's hot path
        (:class:`~proxy.state.store.AnswersNow`; not part of :class:`Store`: remote stores
        cannot answer at once). The common case (room
        everywhere) in one pass that writes as it goes; a slot or bucket without room puts
        back what that pass wrote (:meth:`_full`, :meth:`_refuse`), and a refusal is worked
        out again by :meth:`_take`, which charges nothing."""
        slots, tats, data = self._slots, self._tats, self._data
        for index, (key, limit) in enumerate(plan.slot_pairs):
            count = slots.get(key)
            if count is None:
                if key in data or key in tats:
                    self._not_a(key, "an in-flight counter")
                count = 0
            elif count >= limit:
                return self._full(plan, index)
            slots[key] = count + 1
        now = self._clock()
        period = plan.period
        ceiling = period + _SLACK
        # Per kind, the bucket with the least left (the first of equals): its index, units left
        # and seconds to full.
        least_requests = least_tokens = -1
        left_requests = left_tokens = _MORE_THAN_ANY
        reset_requests = reset_tokens = 0.0
        for index, key, interval in plan.request_rates:
            tat = tats.get(key)
            new = interval
            if tat is None:
                if key in data or key in slots:
                    self._not_a(key, "a rate bucket")
            elif tat > now:  # else the bucket is full: this call is all it holds
                new += tat - now
                if new > ceiling:
                    return self._refuse(plan, tokens, index, now)
            tats[key] = now + new
            left = int((period - new) / interval + _SLACK)
            if left < left_requests:
                least_requests, left_requests, reset_requests = index, left, new
        for index, key, interval, limit in plan.token_rates:
            tat = tats.get(key)
            new = interval * (tokens if tokens < limit else limit)
            if tat is None:
                if key in data or key in slots:
                    self._not_a(key, "a rate bucket")
            elif tat > now:
                new += tat - now
                if new > ceiling:
                    return self._refuse(plan, tokens, index, now)
            tats[key] = now + new
            left = int((period - new) / interval + _SLACK)
            if left < left_tokens:
                least_tokens, left_tokens, reset_tokens = index, left, new
        writes = self._writes + len(plan.keys)  # _wrote(), without its call
        if writes >= self._sweep_every:
            self._writes = 0
            self._sweep()
        else:
            self._writes = writes
        holder = 0
        if plan.slots:
            holder = self._holders = self._holders + 1
            self._held[holder] = plan.slots
        return Admission(
            requests=None if least_requests < 0 else RateState(True, left_requests, reset_requests),
            tokens=None if least_tokens < 0 else RateState(True, left_tokens, reset_tokens),
            requests_bucket=least_requests if least_requests > 0 else 0,
            tokens_bucket=least_tokens if least_tokens > 0 else 0,
            plan=plan,
            reserved=tokens,
            holder=holder,
        )

    def _full(self, plan: LimitPlan, index: int) -> Admission:
        """:meth:`admit_now` found slot ``index`` full: give back the slots it held before."""
        slots = self._slots
        for key in plan.slots[:index]:
            slots[key] -= 1
        return Admission(full=index)

    def _refuse(self, plan: LimitPlan, tokens: int, index: int, now: float) -> Admission:
        """:meth:`admit_now` found bucket ``index`` without room: give back its slots and what
        it took from the buckets before ``index`` (a bucket it created stays, full, for the
        sweep), and answer the refusal."""
        slots, tats = self._slots, self._tats
        for key in plan.slots:
            slots[key] -= 1
        for _, key, interval in plan.request_rates[:index]:
            tats[key] -= interval
        for before, key, interval, limit in plan.token_rates:
            if before < index:
                tats[key] -= interval * (tokens if tokens < limit else limit)
        return summarise(plan, tokens, self._take(plan.buckets(tokens), now)[0])

    def settle(self, admission: Admission, used: int) -> None:
        """See :meth:`Store.settle`: :meth:`_release` (of its holder's leases, once; an
        admission without a holder: as :meth:`release`) and :meth:`_adjust` in one pass."""
        plan = admission.plan
        if plan is None:
            raise ValueError("only an admission that held and took is settled")
        slots = self._slots
        holder = admission.holder
        if not holder or self._held.pop(holder, None) is not None:
            for key in plan.slots:
                count = slots.get(key)
                if count is None:
                    self._not_a(key, "an in-flight counter")
                elif count > 0:
                    slots[key] = count - 1  # kept at zero until the next sweep
        reserved = admission.reserved
        if used == reserved:
            return
        now = self._clock()
        tats = self._tats
        for _, key, interval, limit in plan.token_rates:
            delta = used - (reserved if reserved < limit else limit)
            if not delta:
                continue
            tat = tats.get(key)
            if tat is None:
                self._not_a(key, "a rate bucket")
                debt = 0.0
            else:
                debt = tat - now if tat > now else 0.0
            new = debt + delta * interval
            tats[key] = now + new if new > 0 else now  # at most full (swept later)
        self._wrote(len(plan.slots) + len(plan.token_rates))

    # The rate and slot operations below run synchronously (one event-loop step per store
    # call) on the limits' hot path: each reads and writes its own table directly.

    def _take(self, buckets: Sequence[RateBucket], now: float) -> tuple[list[RateState], bool]:
        """:meth:`rate_take`'s states, and whether the take happened."""
        tats = self._tats
        debts: list[float] = []
        allowed = True
        for bucket in buckets:
            tat = tats.get(bucket.key)
            if tat is None:
                self._not_a(bucket.key, "a rate bucket")
                debt = 0.0
            else:
                debt = tat - now if tat > now else 0.0
            debts.append(debt)
            period = bucket.period
            if debt + bucket.cost * period / bucket.limit > period + _SLACK:
                allowed = False
        states: list[RateState] = []
        for bucket, debt in zip(buckets, debts, strict=True):
            period = bucket.period
            interval = period / bucket.limit
            new = debt + bucket.cost * interval
            if allowed:
                if new > 0:
                    tats[bucket.key] = now + new
                remaining = int((period - new) / interval + _SLACK)
                states.append(RateState(True, remaining if remaining > 0 else 0, new))
            else:
                remaining = int((period - debt) / interval + _SLACK)
                fits = new <= period + _SLACK
                retry = 0.0 if fits else new - period
                states.append(RateState(fits, remaining if remaining > 0 else 0, debt, retry))
        if allowed:
            self._wrote(len(buckets))
        return states, allowed

    def _adjust(self, buckets: Sequence[RateBucket]) -> None:
        now = self._clock()
        tats = self._tats
        for bucket in buckets:
            key = bucket.key
            tat = tats.get(key)
            if tat is None:
                self._not_a(key, "a rate bucket")
                debt = 0.0
            else:
                debt = tat - now if tat > now else 0.0
            new = debt + bucket.cost * bucket.period / bucket.limit
            if new > 0:
                tats[key] = now + new
            elif tat is not None:
                tats[key] = now  # full again (swept later)
        self._wrote(len(buckets))

    def _full_slot(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """The index of the first counter of ``keys`` at its limit; None when none is."""
        slots = self._slots
        for index, key in enumerate(keys):
            count = slots.get(key)
            if count is None:
                self._not_a(key, "an in-flight counter")
            elif count >= limits[index]:
                return index
        return None

    def _hold(self, keys: Sequence[str]) -> None:
        slots = self._slots
        for key in keys:
            slots[key] = slots.get(key, 0) + 1

    def _release(self, keys: Sequence[str]) -> None:
        slots = self._slots
        for key in keys:
            count = slots.get(key)
            if count is None:
                self._not_a(key, "an in-flight counter")
            elif count > 0:
                slots[key] = count - 1  # kept at zero until the next sweep
        self._wrote(len(keys))

    def _not_a(self, key: str, kind: str) -> None:
        """Raise :class:`ValueError` unless ``key`` is free to become ``kind`` (it holds
        nothing of another kind); called only when ``key`` is missing from ``kind``'s table."""
        held = None
        if kind != "a counter" and self._live(key) is not None:
            held = "a value"
        elif kind != "a rate bucket" and self._tats.get(key, 0.0) > self._clock():
            held = "a rate bucket"
        elif kind != "an in-flight counter" and self._slots.get(key):
            held = "an in-flight counter"
        if held is not None:
            raise ValueError(f"key {key!r} holds {held}, not {kind}")

    def _forget_kinds(self, key: str) -> None:
        """Drop ``key`` from the bucket and slot tables (it becomes a plain value)."""
        self._tats.pop(key, None)
        self._slots.pop(key, None)

    def __len__(self) -> int:
        """The number of keys held, expired ones not yet swept included."""
        return len(self._data) + len(self._tats) + sum(1 for count in self._slots.values() if count)

    def _expiry(self, ttl: float | None) -> float | None:
        if ttl is None:
            return None
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        return self._clock() + ttl

    def _live(self, key: str, now: float | None = None) -> tuple[bytes | int, float | None] | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires = entry[1]
        if expires is not None and expires <= (self._clock() if now is None else now):
            del self._data[key]
            return None
        return entry

    def _write(self, key: str, value: bytes | int, expires: float | None) -> None:
        data = self._data
        data.pop(key, None)  # re-insert so that dict order is write order (oldest first)
        data[key] = (value, expires)
        self._wrote(1)
        while len(data) > self._max_keys:
            del data[next(iter(data))]

    def _wrote(self, writes: int) -> None:
        """Account for ``writes`` writes: every ``sweep_every``, sweep (:meth:`_sweep`)."""
        self._writes += writes
        if self._writes >= self._sweep_every:
            self._writes = 0
            self._sweep()

    def _sweep(self) -> None:
        """Drop expired values, full buckets and idle in-flight counters; past ``max_keys``
        buckets, the oldest made."""
        now = self._clock()
        data = self._data
        for key in [
            k for k, (_, expires) in data.items() if expires is not None and expires <= now
        ]:
            del data[key]
        tats = self._tats
        for key in [k for k, tat in tats.items() if tat <= now]:
            del tats[key]
        slots = self._slots
        for key in [k for k, count in slots.items() if not count]:
            del slots[key]
        excess = len(tats) - self._max_keys
        if excess > 0:
            for key in list(itertools.islice(tats, excess)):
                del tats[key]
