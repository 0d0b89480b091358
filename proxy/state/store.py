"""The state store interface: counters and keys with a time to live, shared by the plugins.

Anything that should be shared between workers or instances — deployment health, per-deployment
request and token counters, later cache entries and rate limits — goes through :class:`Store`.
The interface is the small subset of Redis a gateway needs, with Redis semantics, so that a
Redis backend can implement it one command per method.
:class:`~proxy.state.memory_store.MemoryStore` is the in-process backend (the embedded default):
nothing to install, state lost on restart, not shared between worker processes.

Every method is a coroutine. A backend raises :class:`StoreUnavailable` when it cannot answer
(a Redis outage); each caller decides its own failure policy (fail open or closed). The memory
backend never raises it. A :meth:`Store.hold`, :meth:`Store.admit` or :meth:`Store.incr_within`
that fails that way, or is cancelled, holds no slot and adds nothing, now or later: a remote
backend voids it (an operation whose answer timed out may have been applied, or may still be
when a stalled server resumes), so that a caller may repeat it. (A voided admission's take from
its rate buckets may stand: a bucket drains within its period.) A backend that can answer the
hot paths' steps without awaiting them (the memory one) also offers :class:`AnswersNow`, which a
caller checks once, when it takes the store (``isinstance``), never per request.

In-flight slots (:meth:`Store.hold`, :meth:`Store.admit`) are leases: a count of holders, each
holding one lease that the backend keeps while the holder's request runs and that ends when it
is released (:meth:`Store.settle`). A remote backend's leases also end on their own a short
time after their holder stops renewing them — its process died, or lost the store — so that no
slot is held for good by a request nobody will release; the memory backend's live as long as
their process.

Rate limits (:meth:`Store.rate_take`, :meth:`Store.rate_adjust`) use GCRA, the generic cell
rate algorithm, which is a token bucket kept as one number per bucket: its *theoretical arrival
time* (TAT). A bucket of ``limit`` units per ``period`` seconds refills one unit every
``period / limit`` seconds and holds at most ``limit``; ``debt = max(TAT - now, 0)`` is how far
the bucket is from full, in seconds. Taking ``cost`` units adds ``cost * period / limit`` to the
debt and is allowed while the debt stays within ``period``. Accuracy: a burst gets exactly
``limit`` units, and over any ``n`` consecutive periods at most ``(n + 1) * limit`` (a full
bucket, then its refill); the long-run rate is exact, and there is no boundary burst of the
kind fixed windows allow. A Redis backend implements each call as one Lua script over GET/SET
with ``PX`` expiry at the TAT (so an idle bucket costs nothing), with the server's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import msgspec

Clock = Callable[[], float]


class StoreUnavailable(Exception):
    """The store's backend cannot be reached; the caller applies its failure policy."""


class RateBucket(msgspec.Struct, frozen=True):
    """One GCRA bucket: ``cost`` units to take from a bucket of ``limit`` per ``period`` s."""

    key: str
    cost: int
    limit: int
    period: float = 60.0


class RateState(msgspec.Struct, frozen=True):
    """A bucket after :meth:`Store.rate_take`: whether it ``allowed`` the take (had room for
    it; the take happened only if every bucket did), the units it has left (``remaining``),
    seconds until it is full again (``reset_after``) and, when it refused, seconds until the
    take would fit (``retry_after``; 0 when allowed)."""

    allowed: bool
    remaining: int
    reset_after: float
    retry_after: float = 0.0


class LimitPlan:
    """One principal's limits as the store takes them, built once per principal and never
    changed: in-flight counters (``slots``, each with its limit in ``slot_limits``), then GCRA
    buckets of ``period`` seconds (``keys`` with their ``limits``) — the first ``requests`` take
    one unit per call, the others (token buckets) a call's tokens, capped at each bucket's limit
    (a cost above the limit would never fit)."""

    __slots__ = (
        "keys",
        "limits",
        "period",
        "request_rates",
        "requests",
        "slot_limits",
        "slot_pairs",
        "slots",
        "token_rates",
    )

    def __init__(
        self,
        slots: Sequence[tuple[str, int]] = (),
        requests: Sequence[tuple[str, int]] = (),
        tokens: Sequence[tuple[str, int]] = (),
        period: float = 60.0,
    ) -> None:
        self.slots = tuple(key for key, _ in slots)
        self.slot_limits = tuple(limit for _, limit in slots)
        self.keys = tuple(key for key, _ in (*requests, *tokens))
        self.limits = tuple(limit for _, limit in (*requests, *tokens))
        self.requests = len(requests)
        self.period = period
        self.slot_pairs = tuple(slots)
        """``(key, limit)`` of each in-flight counter."""
        rates = [
            (index, key, period / limit, limit)
            for index, (key, limit) in enumerate(zip(self.keys, self.limits, strict=True))
        ]
        self.request_rates = tuple(rate[:3] for rate in rates[: self.requests])
        """``(index, key, interval)`` of each request bucket — ``interval`` the seconds one
        unit weighs (a call takes one): what an admission reads, in one tuple per bucket."""
        self.token_rates = tuple(rates[self.requests :])
        """``(index, key, interval, limit)`` of each token bucket (a call takes its tokens,
        capped at ``limit``): what an admission and a settlement read."""

    def buckets(self, tokens: int) -> list[RateBucket]:
        """Every bucket with what a call of ``tokens`` tokens takes from it."""
        requests = self.requests
        return [
            RateBucket(key, 1 if index < requests else min(tokens, limit), limit, self.period)
            for index, (key, limit) in enumerate(zip(self.keys, self.limits, strict=True))
        ]

    def corrections(self, reserved: int, used: int) -> list[RateBucket]:
        """What correcting a reservation of ``reserved`` tokens to ``used`` charges each token
        bucket (negative: given back); buckets already right are left out."""
        corrections = []
        for index in range(self.requests, len(self.keys)):
            limit = self.limits[index]
            delta = used - min(reserved, limit)
            if delta:
                corrections.append(RateBucket(self.keys[index], delta, limit, self.period))
        return corrections


class Admission(msgspec.Struct, frozen=True):
    """:meth:`Store.admit`'s answer. ``full``: the index of a slot with no room (then nothing
    else is known). Otherwise ``refused``: the index of the first bucket that refused (then no
    slot is held and nothing charged) and ``retry_after``, seconds until every refusing bucket
    would fit; ``requests`` and ``tokens``: the state of the request bucket, and of the token
    bucket, with the least left (None when the plan has none of that kind), and their
    indexes among the plan's buckets (``requests_bucket``, ``tokens_bucket``).

    An admission that held and took (neither full nor refused) is ended by
    :meth:`Store.settle`: it names its ``plan``, the tokens it ``reserved``, the ``holder`` of its
    slots' leases (0 when the plan has no slots), and whether a policy answered it from a
    ``local`` store while the shared one was unavailable (then it is settled there)."""

    full: int | None = None
    refused: int | None = None
    retry_after: float = 0.0
    requests: RateState | None = None
    tokens: RateState | None = None
    requests_bucket: int = 0
    tokens_bucket: int = 0
    plan: LimitPlan | None = None
    reserved: int = 0
    local: bool = False
    holder: int = 0


def summarise(
    plan: LimitPlan, tokens: int, states: Sequence[RateState], holder: int = 0
) -> Admission:
    """The :class:`Admission` of ``plan`` for a call of ``tokens`` from
    :meth:`Store.rate_take`'s ``states`` (one per bucket of the plan, in order); ``holder``: the
    holder of its leases, kept when the take happened."""
    refused = next((index for index, state in enumerate(states) if not state.allowed), None)
    retry = max((s.retry_after for s in states if not s.allowed), default=0.0)
    split = plan.requests
    requests = _least(states, 0, split)
    least_tokens = _least(states, split, len(states))
    return Admission(
        refused=refused,
        retry_after=retry,
        requests=None if requests is None else states[requests],
        tokens=None if least_tokens is None else states[least_tokens],
        requests_bucket=requests or 0,
        tokens_bucket=least_tokens or 0,
        plan=plan,
        reserved=tokens,
        holder=holder if refused is None else 0,
    )


def _least(states: Sequence[RateState], first: int, last: int) -> int | None:
    """The index of the first of ``states[first:last]`` with the least left; None if empty."""
    if first == last:
        return None
    return min(range(first, last), key=lambda index: states[index].remaining)


class Store(Protocol):
    """Keys with optional expiry, and atomic integer counters.

    ``ttl`` arguments are seconds (> 0); ``None`` means the key never expires. A counter is a
    key whose value is an integer: ``get`` returns its decimal text.
    """

    async def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None when it is missing or expired."""
        ...

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key`` (replacing any value and expiry)."""
        ...

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """Add ``amount`` to the counter ``key`` (created at 0) and return the new value.

        ``ttl`` is applied only when the key is created, so that a counter keyed by a time
        window expires with its window however often it is incremented (Redis ``INCRBY`` then
        ``EXPIRE ... NX``). Raises :class:`ValueError` if ``key`` holds a non-integer value.
        """
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key`` (nothing happens if it is missing)."""
        ...

    async def ttl(self, key: str) -> float | None:
        """Seconds until ``key`` expires; None when it is missing or never expires."""
        ...

    async def rate_take(self, buckets: Sequence[RateBucket]) -> list[RateState]:
        """Take from every bucket, or from none: atomically, all or nothing (module docstring).

        Returns one state per bucket, in order. When any bucket refuses (``allowed`` False),
        none is charged, and each refusing bucket's state says when the take would fit. A
        ``cost`` above a bucket's ``limit`` never fits: callers cap it.
        """
        ...

    async def rate_adjust(self, buckets: Sequence[RateBucket]) -> None:
        """Charge each bucket's ``cost`` without a check (negative: give units back).

        Used to correct reservations once the real cost is known: a debt may exceed the period
        (later takes wait until it drains) and never goes below zero.
        """
        ...

    async def hold(self, keys: Sequence[str], limits: Sequence[int]) -> int | None:
        """Take a lease in every in-flight slot of ``keys`` (its count: its live leases) unless
        one already counts its limit (the same index of ``limits``): atomically, all or nothing.

        Returns None when every slot took the lease, else the index of the first slot at its
        limit (nothing changed). ``get`` reads a slot as its count. An anonymous lease: a
        remote backend ends it on its own after an idle time (``max_idle``'s role for
        counters), unless :meth:`release` ends one first.
        """
        ...

    async def release(self, keys: Sequence[str]) -> None:
        """End one lease of every slot of ``keys`` — the one that would end first — if it has
        any (a count never goes below zero)."""
        ...

    async def admit(self, plan: LimitPlan, tokens: int) -> Admission:
        """Take a lease for one holder (:attr:`Admission.holder`) in every slot of ``plan``
        and take from every bucket (``tokens`` from its token buckets), as one atomic step,
        all or nothing: one round trip for a remote backend. A full slot or a refusing bucket
        changes nothing (see :class:`Admission`). The backend keeps the leases of an admission
        that held and took until it is :meth:`settle`-d (a remote one renews them); an
        admission that raises or is cancelled holds none (module docstring)."""
        ...

    def settle(self, admission: Admission, used: int) -> None:
        """The call of ``admission`` (one that held and took) is over: end its holder's
        leases — once: settling it again ends no other lease — and correct its token
        reservation to ``used`` tokens (:meth:`LimitPlan.corrections`), as one step. Never
        waits and never raises :class:`StoreUnavailable`: the memory backend applies it at
        once; a remote one sends it within this process's next :meth:`admit` (applied before
        that admission: one round trip for both) or a few loop turns later, retries the release
        until it lands or the leases have ended on their own, and drops the correction when it
        cannot be sent (a bucket drains within its period)."""
        ...

    async def incr_within(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
    ) -> tuple[int | None, list[int]]:
        """Add ``amount`` to every counter of ``keys`` — unless, with ``limits``, one of them
        already holds at least its limit (the same index): atomically, all or nothing.

        ``limits`` None adds unconditionally. ``ttls`` (one per key) apply as :meth:`incr`'s:
        only to a counter the call creates. Returns ``(None, values)`` with the counters' new
        values when the amount was added, else ``(index, values)``: the first counter at its
        limit and every counter's value as it is (nothing changed). Raises :class:`ValueError`
        (nothing changed) if a key holds a non-integer value. One that raises
        :class:`StoreUnavailable` or is cancelled added nothing and never will (module
        docstring): a caller that must not lose the add repeats it.
        """
        ...

    def incr_later(self, keys: Sequence[str], amount: int, ttls: Sequence[float | None]) -> None:
        """Add ``amount`` to every counter of ``keys`` (``ttls`` as :meth:`incr_within`'s)
        without waiting for it: a correction whose outcome the caller does not read. Never
        waits and never raises :class:`StoreUnavailable`: the memory backend applies it at
        once, a remote one sends it as one :meth:`incr_within` a loop turn later, and drops it
        when it cannot be sent (never applying it: a failed add is voided). A caller that must
        not lose a correction awaits :meth:`incr_within` and repeats it instead (the budgets:
        :mod:`proxy.governance.budgets.counters`)."""
        ...


@runtime_checkable
class AnswersNow(Protocol):
    """A :class:`Store` that answers two hot-path steps synchronously: what its coroutine would
    return, without an await (and so without a task switch) — the memory store, whose every
    step is in-process. A remote store cannot, and does not offer it.

    A caller checks for it once, when it takes the store (``isinstance(store, AnswersNow)``,
    keeping the bound method), and otherwise awaits the :class:`Store` method. Each raises
    what its coroutine would (a :class:`ValueError` for a key of another kind) and never
    :class:`StoreUnavailable`.
    """

    def admit_now(self, plan: LimitPlan, tokens: int) -> Admission:
        """:meth:`Store.admit`, answered at once (the limits plugin's hot path)."""
        ...

    def incr_within_now(
        self,
        keys: Sequence[str],
        amount: int,
        limits: Sequence[int] | None,
        ttls: Sequence[float | None],
        carried: int = 0,
    ) -> tuple[int | None, list[int]]:
        """:meth:`Store.incr_within`, answered at once (the budgets' hot path). ``carried`` is
        added with ``amount`` and the limits are checked as if it had been added first:
        ``incr_within(keys, amount + carried, [limit - carried, ...], ttls)``, without building
        the lowered limits."""
        ...
