"""proxy/state/memory_store.py: the memory backend keeps Redis semantics for keys, counters and
expiry."""

from __future__ import annotations

import random

import msgspec
import pytest

from proxy.state.memory_store import MemoryStore
from proxy.state.policy import UseStore
from proxy.state.store import (
    Admission,
    AnswersNow,
    LimitPlan,
    RateBucket,
    RateState,
    summarise,
)
from tests.faults import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock)


async def test_set_get_delete(store: MemoryStore):
    assert await store.get("k") is None
    await store.set("k", b"v")
    assert await store.get("k") == b"v"
    await store.set("k", b"w")
    assert await store.get("k") == b"w"
    await store.delete("k")
    await store.delete("k")
    assert await store.get("k") is None


async def test_keys_expire_on_the_clock(store: MemoryStore, clock: FakeClock):
    await store.set("k", b"v", ttl=10)
    assert await store.ttl("k") == pytest.approx(10)
    clock.advance(9.5)
    assert await store.get("k") == b"v"
    assert await store.ttl("k") == pytest.approx(0.5)
    clock.advance(0.5)
    assert await store.get("k") is None
    assert await store.ttl("k") is None


async def test_set_replaces_the_expiry(store: MemoryStore, clock: FakeClock):
    await store.set("k", b"v", ttl=1)
    await store.set("k", b"v")
    clock.advance(5)
    assert await store.get("k") == b"v"
    assert await store.ttl("k") is None


async def test_incr_creates_counts_and_reads_as_text(store: MemoryStore):
    assert await store.incr("c") == 1
    assert await store.incr("c", 5) == 6
    assert await store.incr("c", -2) == 4
    assert await store.get("c") == b"4"


async def test_incr_ttl_applies_only_when_the_counter_is_created(
    store: MemoryStore, clock: FakeClock
):
    await store.incr("window", ttl=60)
    clock.advance(50)
    await store.incr("window", ttl=60)  # a fixed window: the expiry does not move
    assert await store.ttl("window") == pytest.approx(10)
    clock.advance(10)
    assert await store.get("window") is None
    assert await store.incr("window", ttl=60) == 1


async def test_incr_accepts_integer_text_and_refuses_other_values(store: MemoryStore):
    await store.set("n", b"41")
    assert await store.incr("n") == 42
    await store.set("s", b"abc")
    with pytest.raises(ValueError, match="integer"):
        await store.incr("s")


async def test_ttl_must_be_positive(store: MemoryStore):
    with pytest.raises(ValueError, match="positive"):
        await store.set("k", b"v", ttl=0)
    with pytest.raises(ValueError, match="positive"):
        await store.incr("k", ttl=-1)


async def test_expired_keys_are_swept_in_bulk(clock: FakeClock):
    store = MemoryStore(clock, sweep_every=4)
    for i in range(3):
        await store.set(f"old{i}", b"v", ttl=1)
    clock.advance(2)
    assert len(store) == 3  # expired, not yet swept
    await store.set("new", b"v")  # the 4th write sweeps
    assert len(store) == 1
    assert await store.get("new") == b"v"


async def test_max_keys_evicts_the_oldest_written(clock: FakeClock):
    store = MemoryStore(clock, max_keys=2)
    await store.set("a", b"1")
    await store.set("b", b"2")
    await store.set("a", b"3")  # rewriting makes "a" the newest
    await store.set("c", b"4")
    assert await store.get("b") is None
    assert await store.get("a") == b"3"
    assert await store.get("c") == b"4"


def test_bounds_are_validated():
    with pytest.raises(ValueError, match="at least 1"):
        MemoryStore(max_keys=0)
    with pytest.raises(ValueError, match="at least 1"):
        MemoryStore(sweep_every=0)


async def test_ttl_of_a_live_key_is_positive_even_when_the_clock_moves_while_reading():
    # A clock read twice (once to judge expiry, once for the remainder) could report a live key
    # with a negative remainder; the health plugin would then see an ended cooldown as running.
    times = iter([0.0, 10.0, 10.5])  # set, then the ttl call's reads
    store = MemoryStore(lambda: next(times))
    await store.set("k", b"v", ttl=10.25)
    assert await store.ttl("k") == pytest.approx(0.25)  # judged and measured at the same 10.0
    remaining = await store.ttl("k")
    assert remaining is None or remaining > 0


# ---------------------------------------------------------------------------------------------
# GCRA rate buckets
# ---------------------------------------------------------------------------------------------


def bucket(key: str = "b", cost: int = 1, limit: int = 10, period: float = 60.0) -> RateBucket:
    return RateBucket(key=key, cost=cost, limit=limit, period=period)


async def test_a_burst_gets_exactly_the_limit(store: MemoryStore):
    states = [(await store.rate_take([bucket(limit=7)]))[0] for _ in range(10)]
    assert [s.allowed for s in states] == [True] * 7 + [False] * 3
    assert [s.remaining for s in states[:7]] == [6, 5, 4, 3, 2, 1, 0]
    assert states[-1].retry_after == pytest.approx(60 / 7)


async def test_the_bucket_refills_at_the_limit_rate(store: MemoryStore, clock: FakeClock):
    for _ in range(10):
        await store.rate_take([bucket()])
    assert not (await store.rate_take([bucket()]))[0].allowed
    clock.advance(5.9)
    assert not (await store.rate_take([bucket()]))[0].allowed
    clock.advance(0.1)  # one unit per 6 s
    state = (await store.rate_take([bucket()]))[0]
    assert state.allowed
    assert state.reset_after == pytest.approx(60)
    clock.advance(60)
    assert (await store.rate_take([bucket()]))[0].remaining == 9
    assert await store.ttl("b") == pytest.approx(6)  # an idle bucket expires once full


async def test_a_take_is_all_or_nothing(store: MemoryStore):
    tight, loose = bucket("tight", limit=1), bucket("loose", limit=100)
    first = await store.rate_take([loose, tight])
    assert [s.allowed for s in first] == [True, True]
    second = await store.rate_take([loose, tight])
    assert [s.allowed for s in second] == [True, False]  # only the tight one had no room
    assert second[0].retry_after == 0
    assert second[1].retry_after == pytest.approx(60)
    assert second[0].remaining == 99  # the refused take charged nothing


async def test_weighted_costs_and_adjustments(store: MemoryStore):
    tokens = bucket("t", cost=400, limit=1000)
    assert (await store.rate_take([tokens]))[0].remaining == 600
    await store.rate_adjust([bucket("t", cost=-300, limit=1000)])  # the call used 100
    assert (await store.rate_take([bucket("t", cost=0, limit=1000)]))[0].remaining == 900
    await store.rate_adjust([bucket("t", cost=5000, limit=1000)])  # far over: later takes wait
    refused = (await store.rate_take([bucket("t", cost=1, limit=1000)]))[0]
    assert not refused.allowed
    assert refused.remaining == 0
    await store.rate_adjust([bucket("t", cost=-10_000, limit=1000)])  # never below empty
    assert await store.get("t") is None
    assert (await store.rate_take([tokens]))[0].remaining == 600


async def test_rate_buckets_and_counters_do_not_mix(store: MemoryStore):
    await store.rate_take([bucket("b")])
    with pytest.raises(ValueError, match="rate bucket"):
        await store.incr("b")
    await store.set("s", b"text")
    with pytest.raises(ValueError, match="rate bucket"):
        await store.rate_take([bucket("s")])


async def test_slots_are_held_all_or_nothing(store: MemoryStore):
    keys, limits = ["key", "team"], [2, 1]
    assert await store.hold(keys, limits) is None
    assert await store.hold(keys, limits) == 1  # the team's one slot is taken
    assert await store.get("key") == b"1"  # nothing changed for the key
    await store.release(keys)
    assert await store.get("team") is None  # at zero a counter is gone
    assert await store.hold(keys, limits) is None
    assert await store.hold(["key"], [2]) is None
    assert await store.hold(["key"], [2]) == 0
    await store.release(["key", "key", "key"])  # never below zero
    assert await store.get("key") is None
    await store.set("text", b"x")
    with pytest.raises(ValueError, match="in-flight counter"):
        await store.hold(["text"], [1])


async def test_admit_holds_slots_only_when_every_bucket_takes(store: MemoryStore):
    plan = LimitPlan(slots=[("s:key", 2), ("s:team", 5)], requests=[("b", 1)])
    admission = await store.admit(plan, 0)
    assert (admission.full, admission.refused) == (None, None)
    assert admission.requests == RateState(True, 0, 60.0)
    assert await store.get("s:key") == b"1"
    admission = await store.admit(plan, 0)
    assert (admission.full, admission.refused) == (None, 0)  # the bucket is empty
    assert admission.retry_after == pytest.approx(60)
    assert await store.get("s:key") == b"1", "a refused take holds no slot"
    await store.hold(["s:key"], [2])
    other = LimitPlan(slots=[("s:key", 2)], requests=[("c", 9)])
    assert await store.admit(other, 0) == Admission(full=0)
    assert await store.get("c") is None, "a full slot charges no bucket"


async def test_a_full_later_slot_or_a_refusing_later_bucket_takes_back_what_admit_wrote(
    store: MemoryStore,
):
    await store.hold(["s:team"], [1])  # the team's one slot is taken
    plan = LimitPlan(slots=[("s:key", 5), ("s:team", 1)], requests=[("rk", 100)])
    assert await store.admit(plan, 0) == Admission(full=1)
    assert await store.get("s:key") is None, "the key's slot, held first, is given back"
    await store.release(["s:team"])
    plan = LimitPlan(slots=[("s:key", 5)], requests=[("rk", 100), ("rt", 1)], tokens=[("tk", 1000)])
    assert (await store.admit(plan, 10)).refused is None
    refused = await store.admit(plan, 10)  # the team's one request a minute is spent
    assert refused.refused == 1
    assert await store.get("s:key") == b"1", "only the first admission holds its slot"
    left = await store.rate_take([RateBucket("rk", 0, 100), RateBucket("tk", 0, 1000)])
    assert [state.remaining for state in left] == [99, 990], "the refusal charged nothing"


async def test_admit_reports_the_tightest_bucket_of_each_kind(store: MemoryStore):
    plan = LimitPlan(
        requests=[("rk", 100), ("rt", 10)], tokens=[("tk", 1000), ("tt", 5000)], period=60.0
    )
    admission = await store.admit(plan, 400)
    assert admission.requests == RateState(True, 9, pytest.approx(6.0))
    assert admission.requests_bucket == 1  # the team's 10 rpm
    assert admission.tokens == RateState(True, 600, pytest.approx(24.0))
    assert admission.tokens_bucket == 2  # the key's 1,000 tpm
    refused = await store.admit(plan, 700)  # the key's tokens: 600 left
    assert (refused.refused, refused.tokens_bucket) == (2, 2)
    assert refused.tokens is not None
    assert not refused.tokens.allowed
    assert await store.get("rk") is not None
    assert (await store.admit(plan, 0)).requests == RateState(True, 8, pytest.approx(12.0))


async def test_a_token_cost_above_a_limit_is_capped(store: MemoryStore):
    plan = LimitPlan(tokens=[("small", 100), ("large", 10_000)])
    admission = await store.admit(plan, 5_000)
    assert admission.refused is None
    assert admission.tokens == RateState(True, 0, pytest.approx(60.0))
    assert plan.corrections(5_000, 50) == [
        RateBucket("small", -50, 100),
        RateBucket("large", -4_950, 10_000),
    ]


async def test_settle_releases_and_corrects_the_tokens(store: MemoryStore):
    plan = LimitPlan(slots=[("s", 1)], tokens=[("t", 10)])
    store.settle(await store.admit(plan, 8), 0)
    assert await store.get("s") is None
    assert await store.get("t") is None  # every token given back
    store.settle(await store.admit(plan, 8), 20)  # used more than reserved: later takes wait
    assert (await store.admit(plan, 1)).refused == 0
    with pytest.raises(ValueError, match="held and took"):
        store.settle(Admission(full=0), 0)


async def test_admit_and_settle_answer_as_hold_take_and_adjust(clock: FakeClock):
    # The fused fast path against the general operations it stands for, on random plans.
    fused, general = MemoryStore(clock), MemoryStore(clock)
    rng = random.Random(12)
    plans = [
        LimitPlan(
            slots=[(f"p{i}", rng.randrange(1, 4)) for i in range(rng.randrange(3))],
            requests=[(f"r{i}", rng.randrange(1, 6)) for i in range(rng.randrange(3))],
            tokens=[(f"t{i}", rng.randrange(5, 60)) for i in range(rng.randrange(3))],
            period=10.0,
        )
        for _ in range(8)
    ]
    admitted: list[tuple[Admission, int]] = []
    outcomes = {"full": 0, "refused": 0, "admitted": 0}
    for step in range(400):
        clock.advance(rng.random())
        if admitted and rng.random() < 0.4:
            admission, tokens = admitted.pop(rng.randrange(len(admitted)))
            assert admission.plan is not None
            used = rng.randrange(0, 80)
            fused.settle(admission, used)
            await general.release(admission.plan.slots)
            await general.rate_adjust(admission.plan.corrections(tokens, used))
            continue
        plan, tokens = rng.choice(plans), rng.randrange(1, 80)
        got = await fused.admit(plan, tokens)
        full = general._full_slot(plan.slots, plan.slot_limits)
        if full is not None:
            assert got == Admission(full=full), step
            outcomes["full"] += 1
            continue
        states = await general.rate_take(plan.buckets(tokens))
        want = summarise(plan, tokens, states)
        if want.refused is None:
            await general.hold(plan.slots, plan.slot_limits)
            admitted.append((got, tokens))
        outcomes["admitted" if want.refused is None else "refused"] += 1
        # The fused path names a holder for the leases it took (the general one holds
        # anonymously): one when it took slots, else none.
        assert bool(got.holder) == (want.refused is None and bool(plan.slots)), step
        assert got == msgspec.structs.replace(want, holder=got.holder), step
    assert min(outcomes.values()) >= 20, outcomes  # every path was taken


async def test_incr_within_adds_to_every_counter_under_its_limit(
    store: MemoryStore, clock: FakeClock
):
    keys, ttls = ["spend:key", "spend:team"], [100.0, None]
    assert await store.incr_within(keys, 5, [10, 20], ttls) == (None, [5, 5])
    assert await store.incr_within(keys, 5, [10, 20], ttls) == (None, [10, 10])
    assert await store.ttl("spend:key") == pytest.approx(100)  # set when it was created
    assert await store.ttl("spend:team") is None
    clock.advance(50)
    await store.incr_within(keys, 1, None, [5.0, 5.0])  # an existing counter keeps its expiry
    assert await store.ttl("spend:key") == pytest.approx(50)


async def test_incr_within_is_all_or_nothing(store: MemoryStore):
    keys, ttls = ["spend:key", "spend:team"], [None, None]
    await store.incr_within(keys, 10, None, ttls)
    # The team is at its limit: nothing is added anywhere, and the values are as they were.
    assert await store.incr_within(keys, 3, [100, 10], ttls) == (1, [10, 10])
    assert (await store.get("spend:key"), await store.get("spend:team")) == (b"10", b"10")
    assert await store.incr_within(keys, 3, [10, 100], ttls) == (0, [10, 10])
    # Without limits it adds whatever the counters hold, negative amounts too.
    assert await store.incr_within(keys, -4, None, ttls) == (None, [6, 6])


def test_incr_within_now_is_incr_within_without_a_wait(store: MemoryStore):
    keys, ttls = ["a", "b"], [None, 60.0]
    assert store.incr_within_now(keys, 4, [10, 10], ttls) == (None, [4, 4])  # created
    assert store.incr_within_now(keys, 4, [10, 4], ttls) == (1, [4, 4])  # b is at its limit
    assert store.incr_within_now(keys, -1, None, ttls) == (None, [3, 3])
    # What it carries is added too, the limits checked as if it had been added first.
    assert store.incr_within_now(keys, 1, [10, 20], ttls, 7) == (0, [3, 3])  # 3 + 7 >= 10
    assert store.incr_within_now(keys, 1, [10, 20], ttls, 6) == (None, [10, 10])


async def test_incr_within_refuses_values_that_are_not_counters(store: MemoryStore):
    await store.set("text", b"abc")
    await store.rate_take([RateBucket("bucket", 1, 5)])
    for other in ("text", "bucket"):
        with pytest.raises(ValueError, match=other):
            await store.incr_within(["counter", other], 1, None, [None, None])
        assert await store.get("counter") is None, "nothing changed"
    await store.set("digits", b"41")
    assert await store.incr_within(["digits"], 1, [100], [None]) == (None, [42])


def test_incr_later_adds_at_once_as_incr_within_does(store: MemoryStore, clock: FakeClock):
    keys = ["spend:key", "spend:team"]
    store.incr_later(keys, 5, [100.0, None])  # created, with the TTL
    store.incr_later(keys, -2, [5.0, 5.0])  # an existing counter keeps its expiry
    assert store._data["spend:key"] == (3, pytest.approx(clock() + 100))
    assert store._data["spend:team"] == (3, None)
    clock.advance(100)  # the key's counter expired: it starts again from 0
    store.incr_later(keys, 1, [None, None])
    assert (store._data["spend:key"][0], store._data["spend:team"][0]) == (1, 4)


async def test_incr_later_leaves_values_that_are_not_counters(store: MemoryStore):
    await store.set("text", b"abc")
    store.incr_later(["counter", "text"], 1, [None, None])
    assert (await store.get("counter"), await store.get("text")) == (None, b"abc")


async def test_incr_within_treats_an_expired_counter_as_missing(
    store: MemoryStore, clock: FakeClock
):
    await store.incr_within(["c"], 7, None, [10.0])
    clock.advance(10)
    assert await store.incr_within(["c"], 1, [5], [10.0]) == (None, [1])
    with pytest.raises(ValueError, match="ttl"):
        await store.incr_within(["new"], 1, None, [0.0])


def test_the_memory_store_answers_now_and_a_shared_view_does_not(store: MemoryStore):
    # The hot paths check this once, where they take the store (the limits plugin, the spend
    # counters); a view of a shared store awaits every step, even with a local fallback.
    assert isinstance(store, AnswersNow)
    assert not isinstance(UseStore(store, MemoryStore(), lambda: None), AnswersNow)
