"""plugins/balance.py: strategies, ejection in routing, limits, request targets, streams."""

from __future__ import annotations

import asyncio
import collections
import random

import msgspec
import pytest

from plugins.balance import BalanceConfig, BalancePlugin
from proxy.core.canonical import (
    Call,
    Deployment,
    GatewayOptions,
    Message,
    Params,
    Principal,
    Usage,
    WeightedTarget,
)
from proxy.core.errors import GatewayError, NoReadyDeployment, RateLimited
from proxy.core.metrics import Metrics
from proxy.core.plugin import compose
from proxy.core.reply import Chunk, RawFrames
from proxy.governance.price_catalog import parse_price
from proxy.governance.pricing import Catalog, PriceBook
from proxy.runtime.config import PluginSpec
from proxy.runtime.plugins import PluginLoadError, load_plugins
from proxy.state.memory_store import MemoryStore
from proxy.state.store import StoreUnavailable
from tests.faults import FakeClock
from tests.plugins.scripted import ScriptedUpstream, context, cut, drain, fail, router, sample

MODELS: dict = {
    "trio": ["p/a", "p/b", "q/dead"],
    "weighted": [("p/a", 3.0), ("p/b", 1.0)],
    "pair": ["p/a", "p/b"],
    "solo": ["q/dead"],
    "x": ["p/x1", "p/x2"],
    "y": ["q/y"],
}


class Harness:
    def __init__(self, seed: int = 1, store=None, prices=None, **options) -> None:
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.resolver = router(MODELS, providers=("p", "q"))
        self.upstream = ScriptedUpstream(self.clock)
        self.plugin = BalancePlugin(
            msgspec.convert(options, BalanceConfig),
            context(self.resolver, metrics=self.metrics, prices=prices),
            store=store if store is not None else MemoryStore(self.clock),
            clock=self.clock,
            rng=random.Random(seed),
        )
        self.chain = compose([self.plugin], self.upstream)

    def call(self, model: str = "trio", **fields) -> Call:
        fields.setdefault("deployments", self.resolver.resolve(model))
        return Call(
            request_id="r",
            dialect="openai",
            model=model,
            messages=[Message("user", "hi")],
            **fields,
        )

    async def send(self, model: str = "trio", **fields):
        try:
            return await self.chain(self.call(model, **fields))
        except GatewayError as error:
            return error

    async def spread(self, n: int, model: str = "trio") -> collections.Counter[str]:
        before = len(self.upstream.calls)
        for _ in range(n):
            await self.send(model)
        return collections.Counter(self.upstream.targets()[before:])


async def test_weighted_is_the_default_and_follows_weights():
    h = Harness()
    counts = await h.spread(400, "weighted")
    assert set(counts) == {"p/a", "p/b"}
    assert 260 <= counts["p/a"] <= 340


async def test_the_choice_is_set_on_a_copy_of_the_call():
    h = Harness()
    call = h.call()
    reply = await h.chain(call)
    assert call.deployment is None
    sent = h.upstream.calls[0]
    assert sent.deployment is not None
    assert (reply.provider, reply.model) == (sent.deployment.provider, sent.deployment.model)
    assert sent.timings is call.timings


async def test_a_deployment_chosen_earlier_in_the_chain_is_respected():
    h = Harness()
    await h.send(deployment=Deployment("q", "dead"))
    assert h.upstream.targets() == ["q/dead"]


async def test_least_busy_avoids_deployments_with_streams_in_flight():
    h = Harness(strategy="least-busy")
    first = await h.chain(h.call("pair", stream=True))
    second = await h.chain(h.call("pair", stream=True))
    assert {first.model, second.model} == {"a", "b"}
    await first.stream.aclose()
    third = await h.chain(h.call("pair", stream=True))
    assert third.model == first.model
    texts: list[str] = []
    await drain(second.stream, texts)
    assert texts == ["one", "two", "three", "four"]
    await third.stream.aclose()
    await third.stream.aclose()  # closing twice releases once
    assert all(s.in_flight == 0 for s in h.plugin._stats.values())


async def test_latency_sends_a_small_share_to_a_ten_times_slower_deployment():
    h = Harness(strategy="latency", seed=7)
    h.upstream.latency.update({"p/a": 0.02, "p/b": 0.02, "q/dead": 0.2})
    counts = await h.spread(300)
    assert counts["q/dead"] < 300 * 0.05
    assert counts["p/a"] > 100
    assert counts["p/b"] > 100


@pytest.mark.parametrize(("penalty", "attracts"), [(5.0, False), (0.0, True)])
async def test_latency_penalises_fast_failures(penalty: float, attracts: bool):
    # An untried deployment costs default_rtt: 0 here, so the failing one is tried at once and
    # its fast failures are what decides. Without a penalty a 1 ms failure is the cheapest
    # deployment and wins every comparison it is drawn into (about two thirds of the calls).
    latency = {"default_rtt": 0.0, "failure_penalty": penalty}
    h = Harness(strategy="latency", seed=7, health={"failures": 0}, latency=latency)
    h.upstream.latency.update({"p/a": 0.02, "p/b": 0.02, "q/dead": 0.001})
    h.upstream.script("q/dead", then=fail(503, provider="q"))
    counts = await h.spread(300)
    assert counts["q/dead"] >= 1, "the failing deployment was never tried"
    if attracts:
        assert counts["q/dead"] > 300 * 0.4
    else:
        assert counts["q/dead"] < 300 * 0.05


async def test_latency_estimates_decay_so_an_idle_deployment_is_tried_again():
    h = Harness(strategy="latency", seed=7)
    h.upstream.latency.update({"p/a": 0.02, "p/b": 0.02, "q/dead": 0.2})
    await h.send(deployment=Deployment("q", "dead"))  # measured slow
    assert "q/dead" not in await h.spread(50)
    h.clock.advance(60)  # six decay periods without a sample from the slow one
    counts = await h.spread(20)
    assert counts["q/dead"] >= 1


async def test_an_ejected_deployment_gets_nothing_until_its_cooldown_ends():
    h = Harness(health={"failures": 5, "cooldown": 30})
    h.upstream.script("q/dead", then=fail(503, provider="q"))
    while h.upstream.targets().count("q/dead") < 5:
        await h.send()
    assert "q/dead" not in await h.spread(100)
    labels = {"provider": "q", "model": "dead"}
    assert sample(h.metrics, "crossway_deployment_healthy", **labels) == 0
    assert sample(h.metrics, "crossway_deployment_ejections_total", **labels) == 1
    h.clock.advance(29)
    assert "q/dead" not in await h.spread(100)
    h.clock.advance(1)
    assert "q/dead" in await h.spread(30)


async def test_a_single_deployment_cools_down_and_fails_fast():
    h = Harness(health={"failures": 3, "cooldown": 30})
    h.upstream.script("q/dead", then=fail(503, provider="q"))
    for _ in range(3):
        await h.send("solo")
    error = await h.send("solo")
    assert isinstance(error, NoReadyDeployment)
    assert error.status == 503
    assert error.attempts == 0
    assert error.retry_after == pytest.approx(30)
    assert len(h.upstream.calls) == 3
    h.clock.advance(30)
    await h.send("solo")
    assert len(h.upstream.calls) == 4


async def test_when_every_one_of_several_is_ejected_the_balancer_still_routes():
    h = Harness(health={"failures": 1})
    for target in ("p/a", "p/b"):
        h.upstream.script(target, fail(503, provider="p"))
        await h.send(target)  # a single-candidate call ejects it
    assert isinstance(await h.send("p/a"), NoReadyDeployment)
    reply = await h.send("pair")
    assert reply.model in {"a", "b"}


async def test_other_errors_reset_the_count_and_rate_limits_do_not_count():
    h = Harness(health={"failures": 3})
    h.upstream.script(
        "q/dead",
        fail(503, provider="q"),
        fail(503, provider="q"),
        fail(400, provider="q"),
        fail(503, provider="q"),
        fail(503, provider="q"),
        fail(429, provider="q"),
        fail(429, provider="q"),
        fail(429, provider="q"),
    )
    for _ in range(8):
        await h.send("solo")
    assert len(h.upstream.calls) == 8
    await h.send("solo")
    assert len(h.upstream.calls) == 9


async def test_rpm_limits_skip_a_deployment_until_the_window_ends():
    h = Harness(limits={"p/a": {"rpm": 2}, "p/b": {"rpm": 3}})
    h.clock.now = 6000.0  # the start of a minute window
    counts = await h.spread(5, "pair")
    assert counts == collections.Counter({"p/a": 2, "p/b": 3})
    h.clock.advance(15)
    error = await h.send("pair")
    assert isinstance(error, RateLimited)
    assert error.status == 429
    assert error.attempts == 0
    assert error.retry_after == pytest.approx(45)
    h.clock.advance(45)
    assert sum((await h.spread(5, "pair")).values()) == 5


async def test_tpm_counts_tokens_of_whole_and_streamed_replies():
    h = Harness(limits={"p/a": {"tpm": 20}})  # each reply uses 15 tokens
    h.clock.now = 6000.0
    streamed = await h.chain(h.call("p/a", stream=True))
    assert not isinstance(await h.send("p/a"), GatewayError)  # 15 tokens counted
    await drain(streamed.stream, [])  # the stream's usage is counted when it ends: 30
    assert isinstance(await h.send("p/a"), RateLimited)
    h.clock.advance(60)
    assert not isinstance(await h.send("p/a"), GatewayError)


async def test_request_targets_choose_among_their_models_by_weight():
    h = Harness()
    options = GatewayOptions(load_balancer=[WeightedTarget("x", 0.9), WeightedTarget("y", 0.1)])
    for _ in range(200):
        await h.send("trio", options=options)
    counts = collections.Counter(h.upstream.targets())
    assert set(counts) == {"p/x1", "p/x2", "q/y"}
    assert counts["q/y"] < 40
    assert counts["p/x1"] + counts["p/x2"] > 160


async def test_request_targets_can_be_refused_and_unknown_ones_are_ignored():
    h = Harness(request_targets=False)
    await h.send("solo", options=GatewayOptions(load_balancer=[WeightedTarget("x")]))
    h2 = Harness()
    await h2.send("solo", options=GatewayOptions(load_balancer=[WeightedTarget("nope")]))
    assert h.upstream.targets() == h2.upstream.targets() == ["q/dead"]


class FailingStore(MemoryStore):
    async def get(self, key: str):
        raise StoreUnavailable("down")

    async def ttl(self, key: str):
        raise StoreUnavailable("down")

    async def incr(self, key: str, amount: int = 1, *, ttl=None):
        raise StoreUnavailable("down")

    async def delete(self, key: str):
        raise StoreUnavailable("down")


async def test_without_the_store_every_deployment_is_routable():
    h = Harness(store=FailingStore(), limits={"p/a": {"rpm": 1}})
    h.upstream.script("q/dead", then=fail(503, provider="q"))
    counts = await h.spread(60)
    assert counts["q/dead"] > 5
    assert counts["p/a"] > 5
    assert sample(h.metrics, "crossway_state_degraded_total", use="health", decision="open") > 0


async def test_the_tracked_stream_forwards_the_batching_interface():
    # The app writes what arrived together in one go, verbatim frames included
    # (``BatchedStream``, as an UpstreamStream offers it): the balancer's wrapper must not hide
    # it, and still learns the usage.
    h = Harness(strategy="least-busy", limits={"p/a": {"tpm": 1000}, "p/b": {"tpm": 1000}})
    usage = Usage(input=7, output=3)
    frames = RawFrames(b'data: {"id":"c"}\n\n', lambda payload: None)
    asked: list[bool] = []

    class Batched:
        def __init__(self) -> None:
            self.held: list = [frames, Chunk(id="c", model="m", choices=[], usage=usage)]
            self.ended = False

        def __aiter__(self):
            return self

        async def __anext__(self):
            raise StopAsyncIteration

        async def next_batch(self, raw):
            asked.append(raw)
            self.ended = True
            held, self.held = self.held, []
            return held

    async def upstream(call: Call):
        reply = await h.upstream(call)
        reply.stream = Batched()
        return reply

    reply = await compose([h.plugin], upstream)(h.call("pair", stream=True))
    assert reply.stream.ended is False
    batch = await reply.stream.next_batch(True)
    assert batch[0] is frames
    assert batch[1].usage == usage
    assert reply.stream.ended is True
    assert await reply.stream.next_batch(True) == []
    assert asked == [True, True]
    await drain(reply.stream, [])
    assert all(s.in_flight == 0 for s in h.plugin._stats.values())
    served = h.upstream.targets()[-1]
    window = int(h.clock() // 60)
    assert await h.plugin._store.get(f"crossway:limits:tpm:{served}:{window}") == b"10"


async def drain_batches(stream, texts: list[str]) -> None:
    """Read ``stream`` through ``next_batch`` as the app does, appending each chunk's text."""
    while batch := await stream.next_batch(False):
        texts.extend(c.choices[0].delta.content for c in batch if c.choices)


@pytest.mark.parametrize("batches", [False, True])
async def test_a_stream_that_fails_mid_way_ends_its_tracking_once(batches: bool):
    # The app reads through next_batch, plugins iterate: either way a stream that ends in an
    # exception frees its in-flight count once, and counts no tokens (it reported no usage).
    h = Harness(strategy="least-busy", limits={"p/a": {"tpm": 1000}})
    h.clock.now = 6000.0
    h.upstream.script("p/a", cut(2))
    reply = await h.chain(h.call("p/a", stream=True))
    assert h.plugin._stats["p/a"].in_flight == 1
    texts: list[str] = []
    with pytest.raises(GatewayError, match="scripted cut"):
        await (drain_batches if batches else drain)(reply.stream, texts)
    assert texts == ["one", "two"]
    assert h.plugin._stats["p/a"].in_flight == 0
    await reply.stream.aclose()  # closing after the failure releases nothing more
    assert h.plugin._stats["p/a"].in_flight == 0
    assert await h.plugin._store.get("crossway:limits:tpm:p/a:100") is None
    streamed = await h.chain(h.call("p/a", stream=True))  # the next one is counted normally
    await drain(streamed.stream, [])
    assert await h.plugin._store.get("crossway:limits:tpm:p/a:100") == b"15"


class CountingOutage(MemoryStore):
    """A store that answers reads but cannot count (``incr`` fails): an outage mid-call."""

    async def incr(self, key: str, amount: int = 1, *, ttl=None):
        raise StoreUnavailable("down")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_store_outage_while_counting_limits_serves_the_call_and_counts_it(stream: bool):
    h = Harness(store=CountingOutage(), limits={"p/a": {"rpm": 1, "tpm": 10}})
    for _ in range(3):  # an uncountable limit is not enforced: fail open
        reply = await h.chain(h.call("p/a", stream=stream))
        if stream:
            texts: list[str] = []
            await drain(reply.stream, texts)  # the tpm count at the end fails, not the stream
            assert texts == ["one", "two", "three", "four"]
        else:
            assert reply.response.choices[0].message.content == "one two three four"
    assert h.upstream.targets() == ["p/a"] * 3
    # rpm before each call, tpm after each: six counts, none of them possible
    assert sample(h.metrics, "crossway_state_degraded_total", use="health", decision="open") == 6


class BlockingStore(MemoryStore):
    """A store whose ``delete`` (what a success does to health) waits until released."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def delete(self, key: str) -> None:
        self.entered.set()
        await self.release.wait()
        await super().delete(key)


@pytest.mark.parametrize("stream", [False, True])
async def test_cancelled_while_recording_an_answer_frees_the_reply(stream: bool):
    h = Harness(strategy="least-busy", store=BlockingStore(FakeClock()))
    closed: list[bool] = []

    async def upstream(call: Call):
        reply = await h.upstream(call)
        if reply.stream is not None:
            inner = reply.stream

            class Closing:
                def __aiter__(self):
                    return self

                async def __anext__(self):
                    return await anext(inner)

                async def aclose(self):
                    closed.append(True)

            reply.stream = Closing()
        return reply

    task = asyncio.ensure_future(compose([h.plugin], upstream)(h.call("pair", stream=stream)))
    await h.plugin._store.entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(s.in_flight == 0 for s in h.plugin._stats.values())
    assert closed == ([True] if stream else [])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"limits": {"gpt-4o": {"rpm": 1}}}, "is not 'provider/model'"),
        ({"strategy": "fastest"}, "Invalid enum value 'fastest'"),
        ({"limits": {"p/a": {"rpm": 0}}}, "Expected `int` >= 1"),
        ({"health": {"failure": 3}}, "unknown field"),
    ],
)
def test_bad_options_are_load_errors(options: dict, message: str):
    spec = PluginSpec(ref="balance", options=options, path="$.plugins[0].balance")
    with pytest.raises(PluginLoadError, match=message):
        load_plugins([spec], {"balance": "plugins.balance:BalancePlugin"})


# ---------------------------------------------------------------------------------------------
# cost
# ---------------------------------------------------------------------------------------------


def price_book(prices: dict[str, dict]) -> PriceBook:
    """A book pricing ``provider/model`` targets (USD per million input/output tokens)."""
    return PriceBook(
        Catalog({}), deployments={t: parse_price(spec, "$") for t, spec in prices.items()}
    )


async def test_cost_sends_every_call_to_the_cheapest_deployment():
    prices = price_book({"p/a": {"input": 3, "output": 15}, "p/b": {"input": 1, "output": 5}})
    h = Harness(strategy="cost", prices=prices)
    for _ in range(20):
        await h.send("trio")  # q/dead has no price: never chosen while others have one
    assert collections.Counter(h.upstream.targets()) == {"p/b": 20}


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "expected"),
    [("word " * 2000, 10, "p/a"), ("hi", 4000, "p/b"), ("hi", None, "p/b")],
)
async def test_cost_prices_the_requests_expected_token_mix(prompt, max_tokens, expected):
    # p/a: cheap input, dear output; p/b the opposite. Without max_tokens the default
    # expected output (256 tokens) dominates a short prompt.
    prices = price_book({"p/a": {"input": 0.1, "output": 20}, "p/b": {"input": 5, "output": 1}})
    h = Harness(strategy="cost", prices=prices)
    params = Params(max_tokens=max_tokens) if max_tokens else Params()
    call = msgspec.structs.replace(
        h.call("pair"), messages=[Message("user", prompt)], params=params
    )
    await h.chain(call)
    assert h.upstream.targets() == [expected]


async def test_cost_breaks_a_price_tie_by_the_latency_estimate():
    same = {"input": 1, "output": 1}
    h = Harness(strategy="cost", prices=price_book({"p/a": same, "p/b": same}), seed=3)
    h.upstream.latency.update({"p/a": 0.5, "p/b": 0.01})
    for _ in range(10):
        await h.send("pair")
    targets = h.upstream.targets()
    assert targets.count("p/a") <= 1  # measured once at most, then the faster one wins
    assert targets[-5:] == ["p/b"] * 5


async def test_cost_uses_an_unpriced_deployment_only_when_none_has_a_price():
    h = Harness(strategy="cost", prices=price_book({}), seed=2)
    for _ in range(10):
        await h.send("pair")
    assert set(h.upstream.targets()) <= {"p/a", "p/b"}  # served, among the unpriced


async def test_cost_skips_the_cheapest_once_it_is_ejected():
    prices = price_book({"p/a": {"input": 1, "output": 1}, "p/b": {"input": 2, "output": 2}})
    h = Harness(strategy="cost", prices=prices, health={"failures": 1})
    h.upstream.script("p/a", fail(503))
    assert isinstance(await h.send("pair"), GatewayError)
    reply = await h.send("pair")
    assert (reply.provider, reply.model) == ("p", "b")


async def test_request_targets_outside_the_key_s_allow_list_are_never_chosen():
    h = Harness()
    principal = Principal(key_id="k", models=frozenset({"solo", "y"}))
    options = GatewayOptions(load_balancer=[WeightedTarget("x", 0.9), WeightedTarget("y", 0.1)])
    for _ in range(50):
        await h.send("solo", options=options, principal=principal)
    assert set(h.upstream.targets()) == {"q/y"}
