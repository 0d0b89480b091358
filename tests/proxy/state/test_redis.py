"""proxy/state/redis.py against a real redis-server: the Store semantics of the memory backend,
namespaced keys that always expire, one round trip per operation, and the circuit breaker."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import AsyncIterator

import pytest

from proxy.core.metrics import Metrics
from proxy.state.config import BreakerConfig, RedisConfig
from proxy.state.memory_store import MemoryStore
from proxy.state.redis import RedisStore
from proxy.state.store import Admission, LimitPlan, RateBucket, StoreUnavailable
from tests.engines import RedisServer
from tests.engines.plugin import redis_command
from tests.waiting import until


def config(url: str, **overrides) -> RedisConfig:
    return RedisConfig(url=url, **overrides)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisStore]:
    redis = RedisStore(config(redis_url, timeout_ms=2000))
    await redis.start()
    yield redis
    await redis.close()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def ttl_ms(url: str, key: str) -> int:
    reply = redis_command(port_of(url), "PTTL", key)
    return int(reply[1:].split(b"\r\n")[0])


def sent_commands(store: RedisStore) -> list[tuple[object, ...]]:
    """Every command ``store`` sends from now on (its arguments), in order."""
    sent: list[tuple[object, ...]] = []
    connection = store._connection
    call = connection.call

    async def counting(*args):
        sent.append(args)
        return await call(*args)

    connection.call = counting  # type: ignore[method-assign]
    return sent


async def test_set_get_delete_and_ttl(store: RedisStore):
    assert await store.get("k") is None
    await store.set("k", b"v\x00\xff")
    assert await store.get("k") == b"v\x00\xff"
    await store.set("k", b"w", ttl=10)
    assert await store.get("k") == b"w"
    assert 9 < (await store.ttl("k") or 0) <= 10
    await store.delete("k")
    await store.delete("k")
    assert await store.get("k") is None
    assert await store.ttl("k") is None


async def test_keys_are_namespaced_and_always_expire(store: RedisStore, redis_url: str):
    await store.set("plain", b"1")
    await store.set("crossway:already", b"1")
    await store.incr("counter")
    await store.hold(["crossway:inflight"], [5])
    await store.rate_take([RateBucket("crossway:bucket", 1, 10)])
    keys = redis_command(port_of(redis_url), "KEYS", "*").decode()
    for key in ("crossway:plain", "crossway:already", "crossway:counter", "crossway:inflight"):
        assert key in keys
        assert ttl_ms(redis_url, key) > 0, f"{key} has no TTL"
    assert "crossway:crossway:" not in keys
    assert ttl_ms(redis_url, "crossway:bucket") > 0


async def test_incr_applies_its_ttl_when_it_creates_the_key(store: RedisStore, redis_url: str):
    assert await store.incr("c", 5, ttl=100) == 5
    assert await store.incr("c", -2, ttl=5) == 3  # the TTL of an existing key stays
    assert ttl_ms(redis_url, "crossway:c") > 90_000
    await store.set("text", b"abc")
    with pytest.raises(ValueError, match="incr"):
        await store.incr("text")


async def test_gcra_burst_refusal_and_all_or_nothing(store: RedisStore):
    buckets = [RateBucket("a", 1, 3, 60.0), RateBucket("b", 1, 5, 60.0)]
    results = [await store.rate_take(buckets) for _ in range(4)]
    assert [all(s.allowed for s in states) for states in results] == [True, True, True, False]
    assert [s.remaining for s in results[2]] == [0, 2]
    refused = results[3]
    assert not refused[0].allowed
    assert refused[1].allowed
    assert 19 < refused[0].retry_after <= 20
    # The refused take charged nothing: "b" still has 2 units.
    states = await store.rate_take([RateBucket("b", 2, 5, 60.0)])
    assert states[0].allowed
    assert states[0].remaining == 0


async def test_rate_adjust_gives_units_back_and_charges_past_the_period(store: RedisStore):
    bucket = RateBucket("t", 8, 10, 60.0)
    assert (await store.rate_take([bucket]))[0].remaining == 2
    await store.rate_adjust([RateBucket("t", -8, 10, 60.0)])
    assert (await store.rate_take([RateBucket("t", 10, 10, 60.0)]))[0].allowed
    await store.rate_adjust([RateBucket("t", 5, 10, 60.0)])  # over the limit: a debt
    (state,) = await store.rate_take([RateBucket("t", 1, 10, 60.0)])
    assert not state.allowed
    assert 35 < state.retry_after <= 36


async def test_hold_and_release_are_all_or_nothing(store: RedisStore, redis_url: str):
    keys = ["p:key", "p:team"]
    assert await store.hold(keys, [2, 3]) is None
    assert await store.hold(keys, [2, 3]) is None
    assert await store.hold(keys, [2, 3]) == 0  # the key is full; the team unchanged
    assert await store.get("p:team") == b"2"
    await store.release(keys)
    await store.release(keys)
    await store.release(keys)  # never below zero
    assert await store.get("p:key") is None
    assert await store.hold(keys, [1, 1]) is None


async def test_the_same_answers_as_the_memory_store(store: RedisStore):
    # Random operations against both backends; periods are long, so the milliseconds between
    # the two calls do not change an answer.
    memory = MemoryStore(time.time)
    rng = random.Random(16)
    for step in range(300):
        key = f"k{rng.randrange(4)}"
        operation = rng.randrange(7)
        if operation == 0:
            buckets = [RateBucket(f"r{i}", rng.randrange(1, 4), 10, 3600.0) for i in range(2)]
            got = await store.rate_take(buckets)
            want = await memory.rate_take(buckets)
            assert [(s.allowed, s.remaining) for s in got] == [
                (s.allowed, s.remaining) for s in want
            ], step
            for g, w in zip(got, want, strict=True):
                assert g.retry_after == pytest.approx(w.retry_after, abs=0.05)
                assert g.reset_after == pytest.approx(w.reset_after, abs=0.05)
        elif operation == 1:
            bucket = RateBucket(f"r{rng.randrange(2)}", rng.randrange(-3, 3), 10, 3600.0)
            await store.rate_adjust([bucket])
            await memory.rate_adjust([bucket])
        elif operation == 2:
            limits = [rng.randrange(1, 4), rng.randrange(1, 4)]
            keys = [f"h{key}", "hteam"]
            assert await store.hold(keys, limits) == await memory.hold(keys, limits), step
        elif operation == 3:
            keys = [f"h{key}", "hteam"]
            await store.release(keys)
            await memory.release(keys)
        elif operation == 5:
            plan = LimitPlan(
                slots=[(f"h{key}", rng.randrange(1, 4)), ("hteam", rng.randrange(1, 4))],
                requests=[("r0", 10)],
                tokens=[("r1", 10)],
                period=3600.0,
            )
            tokens = rng.randrange(1, 4)
            got_admission = await store.admit(plan, tokens)
            want_admission = await memory.admit(plan, tokens)
            assert (got_admission.full, got_admission.refused) == (
                want_admission.full,
                want_admission.refused,
            ), step
            for got_state, want_state in (
                (got_admission.requests, want_admission.requests),
                (got_admission.tokens, want_admission.tokens),
            ):
                assert (got_state is None) == (want_state is None), step
                if got_state is not None and want_state is not None:
                    assert (got_state.allowed, got_state.remaining) == (
                        want_state.allowed,
                        want_state.remaining,
                    ), step
        elif operation == 6:
            plan = LimitPlan(slots=[(f"h{key}", 3)], tokens=[(f"r{rng.randrange(2)}", 10)])
            reserved, used = 3, rng.randrange(0, 6)
            store.settle(Admission(plan=plan, reserved=reserved), used)
            memory.settle(Admission(plan=plan, reserved=reserved), used)
        else:
            amount = rng.randrange(-5, 6)
            assert await store.incr(f"c{key}", amount) == await memory.incr(f"c{key}", amount)


async def test_a_settlement_rides_on_the_next_admission(store: RedisStore):
    sent = sent_commands(store)
    plan = LimitPlan(slots=[("one", 1)], tokens=[("tokens", 100)])
    first = await store.admit(plan, 60)
    assert first.refused is None
    sent.clear()
    store.settle(first, 10)
    assert sent == [], "a settlement waits for the next admission"
    admission = await store.admit(plan, 60)  # fits only if the slot and 50 tokens came back
    assert (admission.full, admission.refused) == (None, None)
    assert admission.tokens is not None
    assert admission.tokens.remaining == 30
    assert len(sent) == 1, "one round trip settles and admits"
    sent.clear()
    store.settle(admission, 60)
    await until(lambda: len(sent) == 1, seconds=2, what="the settlement sent on its own")
    await until(lambda: not store._pending, seconds=2, what="nothing pending")
    assert await store.get("one") is None


async def test_every_operation_is_one_round_trip(store: RedisStore):
    sent = sent_commands(store)
    operations = [
        lambda: store.get("x"),
        lambda: store.set("x", b"1", ttl=5),
        lambda: store.incr("n", ttl=5),
        lambda: store.delete("x"),
        lambda: store.ttl("n"),
        lambda: store.rate_take([RateBucket("a", 1, 5), RateBucket("b", 1, 5)]),
        lambda: store.rate_adjust([RateBucket("a", -1, 5), RateBucket("b", -1, 5)]),
        lambda: store.hold(["p1", "p2"], [3, 3]),
        lambda: store.release(["p1", "p2"]),
        lambda: store.admit(LimitPlan([("p1", 3)], [("a", 5)], [("b", 5)]), 1),
    ]
    for operation in operations:
        sent.clear()
        await operation()
        assert len(sent) == 1, sent  # scripts were loaded at start: EVALSHA hits
    redis_command(port_of(store.address.description), "SCRIPT", "FLUSH")
    sent.clear()
    await store.incr("n")  # a server that lost its scripts: EVALSHA, then EVAL
    assert [str(args[0]) for args in sent] == ["EVALSHA", "EVAL"]


async def test_a_server_out_of_memory_is_unavailable_for_writes(own_redis: RedisServer):
    store = RedisStore(config(own_redis.url, timeout_ms=2000))
    await store.start()
    try:
        await store.set("before", b"v")
        assert redis_command(own_redis.port, "CONFIG", "SET", "maxmemory", "1").startswith(b"+OK")
        with pytest.raises(StoreUnavailable, match="OOM"):
            await store.set("k", b"v")
        with pytest.raises(StoreUnavailable, match="OOM"):
            await store.incr("n")
        assert await store.get("before") == b"v"  # reads still served
    finally:
        redis_command(own_redis.port, "CONFIG", "SET", "maxmemory", "0")
        await store.close()


async def test_redis_down_at_start_then_up_reconnects(own_redis: RedisServer):
    own_redis.kill()
    ups: list[tuple[str, bool]] = []
    store = RedisStore(
        config(own_redis.url, breaker=BreakerConfig(failures=2, cooldown_ms=50)),
        on_up=lambda node, up: ups.append((node, up)),
    )
    await store.start()  # does not raise
    try:
        assert not store.up
        with pytest.raises(StoreUnavailable):
            await store.get("k")
        own_redis.start()
        await until(lambda: store.up, seconds=10, what="the probe to reconnect")
        node = f"127.0.0.1:{own_redis.port}"
        assert ups == [(node, False), (node, True)]
        await store.set("k", b"v")
        assert await store.get("k") == b"v"
    finally:
        await store.close()


async def test_the_breaker_opens_after_failures_so_an_outage_costs_no_timeout(
    own_redis: RedisServer,
):
    metrics = Metrics()
    store = RedisStore(
        config(own_redis.url, timeout_ms=50, breaker=BreakerConfig(failures=3, cooldown_ms=100)),
        on_up=lambda node, up: metrics.state_up(node).set(1 if up else 0),
    )
    await store.start()
    try:
        await store.set("k", b"v")
        assert own_redis.process is not None
        own_redis.process.send_signal(signal.SIGSTOP)  # hung: every command times out
        try:
            for _ in range(3):
                with pytest.raises(StoreUnavailable):
                    await store.get("k")
            assert not store.up
            # While open, nothing is sent (so nothing waits for the timeout): each refusal
            # says the circuit is open, not that Redis was slow.
            for _ in range(100):
                with pytest.raises(StoreUnavailable, match="circuit open"):
                    await store.get("k")
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        await until(lambda: store.up, seconds=10, what="the probe to close the breaker")
        assert await store.get("k") == b"v"
    finally:
        await store.close()


async def test_killed_and_restarted_redis_is_reconnected(own_redis: RedisServer):
    store = RedisStore(config(own_redis.url, breaker=BreakerConfig(failures=1, cooldown_ms=50)))
    await store.start()
    try:
        await store.set("k", b"v")
        own_redis.kill()
        with pytest.raises(StoreUnavailable):
            await store.get("k")
        assert not store.up
        own_redis.start()
        await until(lambda: store.up, seconds=10, what="reconnection")
        assert await store.get("k") is None  # a fresh server (no persistence)
    finally:
        await store.close()


async def test_a_password_and_database_number_from_the_url(own_redis: RedisServer):
    redis_command(own_redis.port, "CONFIG", "SET", "requirepass", "s3cret")
    store = RedisStore(config(f"redis://:s3cret@127.0.0.1:{own_redis.port}/3"))
    await store.start()
    try:
        assert store.up
        await store.set("k", b"v")
        assert "s3cret" not in store.address.description
    finally:
        await store.close()
    wrong = RedisStore(config(f"redis://:nope@127.0.0.1:{own_redis.port}/0"))
    await wrong.start()
    try:
        assert not wrong.up
    finally:
        await wrong.close()


async def test_a_unix_socket_url_with_a_database_number() -> None:
    server = RedisServer(unix_socket=True).start()
    try:
        over_socket = RedisStore(config(f"unix://{server.socket}?db=2", timeout_ms=2000))
        await over_socket.start()
        try:
            assert over_socket.up
            await over_socket.set("k", b"over the socket")
        finally:
            await over_socket.close()
        # The same server over TCP: the key is in database 2, and only there.
        for database, expected in ((2, b"over the socket"), (0, None)):
            over_tcp = RedisStore(config(f"redis://127.0.0.1:{server.port}/{database}"))
            await over_tcp.start()
            try:
                assert await over_tcp.get("k") == expected
            finally:
                await over_tcp.close()
    finally:
        server.stop()


async def test_a_rediss_url_speaks_tls_and_verifies_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = RedisServer(tls=True).start()
    try:
        assert server.url.startswith("rediss://")
        untrusted = RedisStore(config(server.url, timeout_ms=2000))
        await untrusted.start()  # a self-signed certificate the system does not trust
        try:
            assert not untrusted.up
        finally:
            await untrusted.close()
        monkeypatch.setenv("SSL_CERT_FILE", str(server.certificate))
        trusted = RedisStore(config(server.url, timeout_ms=2000))
        await trusted.start()
        try:
            assert trusted.up
            await trusted.set("k", b"over TLS")
            assert await trusted.get("k") == b"over TLS"
            states = await trusted.rate_take([RateBucket("r", 1, 2, 60.0)])
            assert states[0].allowed
        finally:
            await trusted.close()
    finally:
        server.stop()


async def test_incr_within_gives_the_memory_stores_answers(store: RedisStore, redis_url: str):
    memory = MemoryStore(time.time)
    rng = random.Random(13)
    for step in range(200):
        keys = [f"spend:k{rng.randrange(3)}", "spend:team"]
        ttls = [rng.choice([None, 3600.0]), 3600.0]
        amount = rng.randrange(-3, 8)
        limits = None if rng.random() < 0.3 else [rng.randrange(0, 30), rng.randrange(0, 60)]
        got = await store.incr_within(keys, amount, limits, ttls)
        assert got == await memory.incr_within(keys, amount, limits, ttls), step
    assert ttl_ms(redis_url, "crossway:spend:team") > 3_000_000  # its TTL, set on creation


async def test_incr_within_refuses_a_value_that_is_not_a_counter_and_changes_nothing(
    store: RedisStore,
):
    await store.set("text", b"abc")
    with pytest.raises(ValueError, match="incr_within"):
        await store.incr_within(["counter", "text"], 1, None, [None, None])
    assert await store.get("counter") is None
    with pytest.raises(ValueError, match="one ttl"):
        await store.incr_within(["counter"], 1, None, [])


async def test_incr_later_sends_one_incr_within_without_waiting(store: RedisStore):
    sent = sent_commands(store)
    keys = ["spend:key:k:d1", "spend:team:t:d1"]
    store.incr_later(keys, 7, [60.0, None])
    assert sent == [], "nothing was waited for"
    await until(lambda: len(sent) == 1, what="the correction sent")
    await store._later.drain()
    assert [str(args[0]) for args in sent] == ["EVALSHA"]
    assert [await store.get(key) for key in keys] == [b"7", b"7"]
    assert await store.ttl("spend:key:k:d1") == pytest.approx(60, abs=1)  # set on creation


async def test_incr_within_is_one_round_trip(store: RedisStore):
    sent = sent_commands(store)
    keys = ["spend:key:k:d1", "spend:team:t:d1", "spend:user:u:all"]
    assert await store.incr_within(keys, 5, [10, 10, 10], [60.0, 60.0, None]) == (None, [5] * 3)
    assert await store.incr_within(keys, 1, [10, 5, 10], [60.0, 60.0, None]) == (1, [5] * 3)
    assert [str(args[0]) for args in sent] == ["EVALSHA", "EVALSHA"]
