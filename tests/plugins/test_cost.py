"""plugins/cost.py: what a reply costs, for whole answers and streams however they end."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from aiohttp import web

from plugins.cost import CostConfig, CostPlugin
from proxy.core.canonical import Budget, Call, Message, Params, Principal, Usage
from proxy.core.errors import BudgetExceeded, BudgetUnavailable, GatewayError
from proxy.core.metrics import Metrics
from proxy.core.plugin import FinishedRequest, compose
from proxy.core.reply import (
    Choice,
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    RawFrames,
    Reply,
    Response,
    ToolCallDelta,
)
from proxy.governance.price_catalog import parse_price
from proxy.governance.pricing import Catalog, PriceBook, ProviderPricing
from proxy.state.config import OnUnavailable, StateConfig
from proxy.state.memory_store import MemoryStore
from proxy.state.policy import SharedState
from proxy.state.store import StoreUnavailable
from tests.plugins.scripted import USAGE, ScriptedUpstream, context, cut, fail, router, sample
from tests.waiting import until

# p/m: 1 USD per million input tokens, 2 per million output: 1,000 and 2,000 nano-dollars a token.
PRICES = PriceBook(
    Catalog({"fam": {"m": parse_price({"input": 1, "output": 2}, "$")}}),
    {"p": ProviderPricing("fam")},
)
USAGE_NANOS = USAGE.input * 1000 + USAGE.output * 2000  # 20,000


class Harness:
    def __init__(self, upstream=None) -> None:
        self.metrics = Metrics()
        self.upstream = upstream or ScriptedUpstream()
        plugin = CostPlugin(CostConfig(), context(router({"alias": ["p/m"]}), self.metrics, PRICES))
        self.chain = compose([plugin], self.upstream)

    def cost_metric(self, model: str = "alias") -> float:
        return sample(self.metrics, "crossway_cost_usd_total", provider="p", model=model)


def make_call(target: str = "p/m", *, stream: bool = False, text: str = "hello there") -> Call:
    resolver = router({"alias": [target]}, providers=("p",))
    return Call(
        request_id="r",
        dialect="openai",
        model="alias",
        messages=[Message("user", text)],
        stream=stream,
        deployments=resolver.resolve("alias"),
    )


async def test_a_whole_reply_is_priced_from_its_usage_and_says_so_in_a_header() -> None:
    h = Harness()
    call = make_call()
    reply = await h.chain(call)
    assert reply.headers["x-crossway-cost-usd"] == "0.00002"
    assert (call.accounting.cost_nanos, call.accounting.cost_source) == (USAGE_NANOS, "estimated")
    assert call.accounting.usage is None  # the reply's own usage was charged
    assert h.cost_metric() == pytest.approx(USAGE_NANOS / 1e9)


async def test_a_model_without_a_price_has_an_unknown_cost_and_is_counted() -> None:
    h = Harness()
    call = make_call("p/unpriced")
    reply = await h.chain(call)
    assert "x-crossway-cost-usd" not in reply.headers
    assert call.accounting.cost_nanos is None
    assert call.accounting.cost_source is None
    assert sample(h.metrics, "crossway_cost_unknown_total", provider="p") == 1
    assert h.cost_metric() == 0


class _Answering:
    """An upstream answering with one fixed reply."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply

    async def __call__(self, call: Call) -> Reply:
        return self.reply


def _whole(usage: Usage | None, text: str = "one two three four") -> Reply:
    response = Response(
        id="x",
        model="m",
        choices=[Choice(index=0, message=Message("assistant", text))],
        usage=usage,
    )
    return Reply(provider="p", model="m", response=response)


async def test_the_providers_billed_amount_is_authoritative() -> None:
    h = Harness(_Answering(_whole(Usage(input=10, output=5, cost_usd=0.0042))))
    call = make_call()
    reply = await h.chain(call)
    assert reply.headers["x-crossway-cost-usd"] == "0.0042"
    assert (call.accounting.cost_nanos, call.accounting.cost_source) == (4_200_000, "authoritative")


async def test_a_whole_reply_without_usage_is_charged_an_estimate_of_it() -> None:
    h = Harness(_Answering(_whole(None, text="x" * 40)))
    call = make_call(text="y" * 8)  # ceil(8 / 4) + 4 per message = 6 input tokens
    await h.chain(call)
    assert call.accounting.usage == Usage(input=6, output=10)
    assert call.accounting.cost_nanos == 6 * 1000 + 10 * 2000
    assert call.accounting.cost_source == "estimated"


async def test_a_failed_call_costs_nothing() -> None:
    upstream = ScriptedUpstream()
    upstream.script("p/m", fail(503))
    h = Harness(upstream)
    call = make_call()
    with pytest.raises(GatewayError):
        await h.chain(call)
    assert (call.accounting.cost_nanos, call.accounting.cost_source) == (0, "estimated")


async def test_a_stream_is_charged_when_it_ends_before_it_says_so() -> None:
    h = Harness()
    call = make_call(stream=True)
    reply = await h.chain(call)
    assert reply.stream is not None
    assert "x-crossway-cost-usd" not in reply.headers  # the headers left before the cost existed
    batches = []
    while batch := await reply.stream.next_batch(False):  # type: ignore[attr-defined]
        assert call.accounting.cost_nanos is None  # not before the end
        batches.append(batch)
    # The end was reported ([] above) with the cost already recorded: outer links see it.
    assert (call.accounting.cost_nanos, call.accounting.cost_source) == (USAGE_NANOS, "estimated")
    assert len(batches) == 5  # four words and the usage chunk, one batch each
    await reply.stream.aclose()  # type: ignore[attr-defined]
    assert h.cost_metric() == pytest.approx(USAGE_NANOS / 1e9)  # charged once


async def test_a_stream_that_fails_midway_is_charged_for_what_it_generated() -> None:
    upstream = ScriptedUpstream()
    upstream.script("p/m", cut(2))
    h = Harness(upstream)
    call = make_call(stream=True, text="abcd")  # 1 + 4 = 5 input tokens
    reply = await h.chain(call)
    assert reply.stream is not None
    with pytest.raises(GatewayError):
        async for _ in reply.stream:
            pass
    # "one" + "two" = 6 characters: 2 output tokens.
    assert call.accounting.usage == Usage(input=5, output=2)
    assert call.accounting.cost_nanos == 5 * 1000 + 2 * 2000
    assert call.accounting.cost_source == "estimated"


async def test_a_stream_the_client_abandons_is_charged_when_it_is_closed() -> None:
    h = Harness()
    call = make_call(stream=True, text="abcd")
    reply = await h.chain(call)
    assert reply.stream is not None
    first = await anext(reply.stream)  # "one"
    assert first.choices[0].delta.content == "one"
    await reply.stream.aclose()  # type: ignore[attr-defined]
    assert call.accounting.usage == Usage(input=5, output=1)
    assert call.accounting.cost_nanos == 5 * 1000 + 1 * 2000
    await reply.stream.aclose()  # type: ignore[attr-defined]
    assert h.cost_metric() == pytest.approx(7000 / 1e9)  # closing again charges nothing more


class _RawStream:
    """A batching stream of verbatim frames, as the OpenAI-compatible provider relays them."""

    def __init__(self, batches: list[list]) -> None:
        self.batches = batches
        self.ended = False
        self.closed = False

    async def next_batch(self, raw: bool) -> list:
        if not self.batches:
            self.ended = True
            return []
        return self.batches.pop(0)

    def __aiter__(self) -> AsyncIterator[Chunk]:
        raise AssertionError("a batching stream is read by batches")

    async def aclose(self) -> None:
        self.closed = True


async def test_verbatim_frames_pass_unread_and_count_one_token_each() -> None:
    frames = RawFrames(b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: {"a":3}\n\n', lambda _: None)
    raw = _RawStream([[frames]])
    h = Harness(_Answering(Reply(provider="p", model="m", stream=raw)))  # type: ignore[arg-type]
    call = make_call(stream=True, text="abcd")
    reply = await h.chain(call)
    stream = reply.stream
    assert stream is not raw  # metered
    assert await stream.next_batch(True) == [frames]  # type: ignore[union-attr]
    await stream.aclose()  # type: ignore[union-attr]
    assert raw.closed
    assert call.accounting.usage == Usage(input=5, output=3)


async def test_an_estimate_never_charges_more_output_than_the_calls_limit_allows() -> None:
    frames = RawFrames(b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: {"a":3}\n\n', lambda _: None)
    for n, charged in ((1, 1), (2, 2), (3, 3)):
        raw = _RawStream([[frames]])
        h = Harness(_Answering(Reply(provider="p", model="m", stream=raw)))  # type: ignore[arg-type]
        call = make_call(stream=True, text="abcd")
        call.params = Params(n=n, max_tokens=1)  # role and finish frames are not output tokens
        reply = await h.chain(call)
        await reply.stream.next_batch(True)  # type: ignore[union-attr]
        await reply.stream.aclose()  # type: ignore[union-attr]
        assert call.accounting.usage == Usage(input=5, output=charged)


async def test_tool_call_arguments_and_reasoning_count_as_generated_text() -> None:
    chunk = Chunk(
        id="c",
        model="m",
        choices=[
            ChunkChoice(
                index=0,
                delta=Delta(
                    reasoning_content="x" * 8,
                    tool_calls=[
                        ToolCallDelta(index=0, function=FunctionCallDelta(arguments="y" * 8))
                    ],
                ),
            )
        ],
    )
    raw = _RawStream([[chunk]])
    h = Harness(_Answering(Reply(provider="p", model="m", stream=raw)))  # type: ignore[arg-type]
    call = make_call(stream=True, text="abcd")
    reply = await h.chain(call)
    await reply.stream.next_batch(False)  # type: ignore[union-attr]
    await reply.stream.next_batch(False)  # type: ignore[union-attr]  # the end
    assert call.accounting.usage == Usage(input=5, output=4)


async def test_the_stream_keeps_its_batches_and_end_flag() -> None:
    raw = _RawStream([[Chunk(id="c", model="m", choices=[], usage=USAGE)]])
    h = Harness(_Answering(Reply(provider="p", model="m", stream=raw)))  # type: ignore[arg-type]
    reply = await h.chain(make_call(stream=True))
    stream = reply.stream
    assert stream.ended is False  # type: ignore[union-attr]
    assert len(await stream.next_batch(False)) == 1  # type: ignore[union-attr]
    assert await stream.next_batch(False) == []  # type: ignore[union-attr]
    assert stream.ended is True  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------
# Budgets, alerts and the ledger hook
# ---------------------------------------------------------------------------------------------


class FailingStore(MemoryStore):
    """A state store whose counters are down."""

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        raise StoreUnavailable("redis is down")

    async def incr_within(self, *args: Any, **kwargs: Any) -> tuple[int | None, list[int]]:
        raise StoreUnavailable("redis is down")

    def incr_within_now(self, *args: Any, **kwargs: Any) -> tuple[int | None, list[int]]:
        raise StoreUnavailable("redis is down")


def budgeted(**options) -> tuple[CostPlugin, Metrics, ScriptedUpstream, Any]:
    metrics = Metrics()
    upstream = ScriptedUpstream()
    ctx = context(router({"alias": ["p/m"]}), metrics, PRICES)
    store = options.pop("store", None)
    policy = options.pop("policy", "closed")
    if store is not None:
        on_unavailable = OnUnavailable(budgets=policy)
        ctx.state = SharedState(StateConfig(on_unavailable=on_unavailable), metrics, store=store)
    plugin = CostPlugin(msgspec.convert(options, CostConfig), ctx)
    return plugin, metrics, upstream, compose([plugin], upstream)


def key_call(budget: Budget | None = None, **principal) -> Call:
    call = make_call()
    call.principal = Principal(key_id="k1", budget=budget, **principal)
    return call


async def test_a_budget_the_store_cannot_check_fails_closed_by_default() -> None:
    _plugin, metrics, upstream, chain = budgeted(store=FailingStore())
    with pytest.raises(BudgetUnavailable) as caught:
        await chain(key_call(Budget(max_usd=1)))
    assert (caught.value.status, caught.value.code) == (503, "state_unavailable")
    assert upstream.calls == []
    assert sample(metrics, "crossway_state_degraded_total", use="budgets", decision="closed") == 1


async def test_a_budget_the_store_cannot_check_is_served_when_it_fails_open() -> None:
    _plugin, metrics, upstream, chain = budgeted(store=FailingStore(), policy="open")
    reply = await chain(key_call(Budget(max_usd=1)))
    assert reply.response is not None
    assert len(upstream.calls) == 1
    assert sample(metrics, "crossway_state_degraded_total", use="budgets", decision="open") == 1


async def test_a_team_budget_refuses_for_every_key_of_the_team() -> None:
    _plugin, _metrics, upstream, chain = budgeted(reserve_output_tokens=0)
    team = Budget(max_usd=0.00004, period="1d")  # room for two answers of 20,000 nano-dollars
    results = []
    for key in ("a", "b", "a"):
        call = make_call()
        call.principal = Principal(key_id=key, team="t", team_budget=team)
        try:
            await chain(call)
            results.append(200)
        except BudgetExceeded as error:
            results.append(error.scope)
    assert results == [200, 200, "team"]
    assert len(upstream.calls) == 2


class CountingStore(MemoryStore):
    """The memory store, counting the operations it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.operations: list[str] = []

    async def get(self, key: str) -> bytes | None:
        self.operations.append("get")
        return await super().get(key)

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        self.operations.append("incr")
        return await super().incr(key, amount, ttl=ttl)

    def incr_within_now(self, *args: Any, **kwargs: Any) -> tuple[int | None, list[int]]:
        self.operations.append("incr_within")  # what incr_within awaits, or one called at once
        return super().incr_within_now(*args, **kwargs)

    def incr_later(self, *args: Any, **kwargs: Any) -> None:
        self.operations.append("incr_later")
        super().incr_later(*args, **kwargs)


async def test_a_request_reserves_and_settles_every_budgeted_scope_in_one_step() -> None:
    store = CountingStore()
    _plugin, _metrics, upstream, chain = budgeted(store=store)
    month = Budget(max_usd=10, period="1mo")
    for request in range(3):
        call = key_call(month, team="t", team_budget=month, user_budget=month)
        call.params = Params(user="ann")
        await chain(call)
        assert call.accounting.cost_nanos == USAGE_NANOS
        if request == 0:  # it read the month's past days too (kept a minute): reads only
            assert set(store.operations) <= {"get", "incr_within"}
            assert store.operations[-1] == "incr_within"
            store.operations.clear()
    # Then each request is one operation: its reservation on its key, team and end user, which
    # carries the correction the request before it owes (its real cost less its reservation).
    assert store.operations == ["incr_within"] * 2
    # What the last request owes leaves on its own at the end of the loop turn, in one operation.
    await until(lambda: len(store.operations) == 3, what="the last correction")
    assert store.operations[-1] == "incr_later"
    assert len(upstream.calls) == 3
    today = f"d{int(time.time() // 86_400)}"
    for scope, ident in (("key", "k1"), ("team", "t"), ("user", "ann")):
        spent = await store.get(f"crossway:spend:{scope}:{ident}:{today}")
        assert spent == str(3 * USAGE_NANOS).encode()


async def test_a_budget_is_checked_with_the_corrections_still_owed() -> None:
    store = CountingStore()
    _plugin, _metrics, upstream, chain = budgeted(store=store, reserve_output_tokens=3_000)
    # A worst case (3,000 output tokens, $0.006) fits the budget once, a real answer costs
    # $0.00002: each request's correction rides on the next reservation, which is checked as if
    # it had been applied (else the first reservation would refuse every request after it).
    budget = Budget(max_usd=0.01, period="1d")
    for _ in range(5):
        await chain(key_call(budget))
    assert len(upstream.calls) == 5
    assert store.operations == ["incr_within"] * 5
    await until(lambda: len(store.operations) == 6, what="the last correction")
    today = f"d{int(time.time() // 86_400)}"
    assert await store.get(f"crossway:spend:key:k1:{today}") == str(5 * USAGE_NANOS).encode()


async def test_every_answer_a_request_asks_for_is_reserved() -> None:
    _plugin, metrics, upstream, chain = budgeted()
    budget = Budget(max_usd=0.005, period="1d")
    # 7 input tokens ("hello there" and framing) at 1,000 nano-dollars, 128 * 20 output tokens
    # at 2,000: $0.005127, more than the whole budget. Nothing is sent upstream.
    call = key_call(budget)
    call.params = Params(n=128, max_tokens=20)
    with pytest.raises(BudgetExceeded) as refused:
        await chain(call)
    error = refused.value
    assert (error.status, error.code, error.scope) == (429, "budget_exceeded", "key")
    assert error.response_headers()["x-should-retry"] == "false"
    assert error.message.startswith(
        "this request may cost up to $0.005127, more than the $0.005 left of the key budget"
        " ($0 of $0.005 per 1d spent)"
    )
    assert "it resets at" in error.message
    assert upstream.calls == []
    assert sample(metrics, "crossway_budget_rejected_total", scope="key") == 1
    call = key_call(budget)
    call.params = Params(n=64, max_tokens=20)  # $0.002567 fits
    await chain(call)
    assert len(upstream.calls) == 1


async def test_a_worst_case_that_fits_exactly_is_served_and_one_nano_more_is_not() -> None:
    _plugin, _metrics, upstream, chain = budgeted()
    budget = Budget(max_usd=0.000027, period="1d")  # 7 * 1,000 + 10 * 2,000 nano-dollars
    outcomes = []
    for _ in range(2):
        call = key_call(budget)
        call.params = Params(max_tokens=10)
        try:
            await chain(call)
            outcomes.append(call.accounting.cost_nanos)
        except BudgetExceeded as error:
            outcomes.append(error.message)
    assert outcomes[0] == USAGE_NANOS
    assert outcomes[1].startswith(
        "this request may cost up to $0.000027, more than the $0.000007 left of the key budget"
        " ($0.00002 of $0.000027 per 1d spent)"
    )
    assert len(upstream.calls) == 1


async def test_an_end_user_budget_applies_to_each_user_a_request_names() -> None:
    _plugin, _metrics, _upstream, chain = budgeted(reserve_output_tokens=0)
    per_user = Budget(max_usd=0.00002, period="1d")  # one answer each
    outcomes = []
    for user in ("ann", "bob", "ann"):
        call = key_call(user_budget=per_user)
        call.params = Params(user=user)
        try:
            await chain(call)
            outcomes.append(user)
        except BudgetExceeded as error:
            outcomes.append(f"{user}: {error.scope}")
    assert outcomes == ["ann", "bob", "ann: user"]


class Webhook:
    """A real alert receiver on 127.0.0.1: fails ``failures`` times, then accepts."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.received: list[dict] = []

    async def handle(self, request: web.Request) -> web.Response:
        if self.failures:
            self.failures -= 1
            return web.Response(status=500)
        self.received.append(await request.json())
        return web.Response(status=204)


async def test_crossing_the_soft_limit_alerts_once_and_the_webhook_is_retried(
    aiohttp_server,
) -> None:
    hook = Webhook(failures=1)
    app = web.Application()
    app.router.add_post("/alerts", hook.handle)
    server = await aiohttp_server(app)
    plugin, metrics, _upstream, chain = budgeted(
        reserve_output_tokens=0, alerts={"webhook_url": str(server.make_url("/alerts"))}
    )
    plugin._alerts.webhook._backoff = 0.0  # type: ignore[union-attr]  # retried at once in the test
    budget = Budget(max_usd=1.0, period="1d", soft_usd=0.00005)  # crossed by the 3rd answer
    for _ in range(5):
        await chain(key_call(budget))
    await plugin._alerts.webhook.drain()  # type: ignore[union-attr]
    assert sample(metrics, "crossway_budget_alerts_total", scope="key") == 1
    (alert,) = hook.received
    assert alert["event"] == "budget.soft_limit_crossed"
    assert (alert["scope"], alert["id"], alert["period"]) == ("key", "k1", "1d")
    assert alert["spent_usd"] == pytest.approx(0.00006)
    await plugin.close()


class RecordingLedger:
    def __init__(self) -> None:
        self.records: list = []

    def record(self, record) -> None:
        self.records.append(record)


async def test_every_finished_request_becomes_one_ledger_record() -> None:
    ledger = RecordingLedger()
    ctx = context(router({"alias": ["p/m"]}), Metrics(), PRICES)
    ctx.ledger = ledger  # type: ignore[assignment]
    plugin = CostPlugin(CostConfig(), ctx)
    call = key_call()
    await compose([plugin], ScriptedUpstream())(call)
    finished = FinishedRequest(
        request_id="r",
        dialect="openai",
        call=call,
        principal=call.principal,
        status=200,
        provider="p",
        upstream_model="m",
        usage=USAGE,
        error_code=None,
        duration=0.25,
        ended_at=1_700_000_000.0,
        attempts=1,
    )
    plugin.finished(finished)
    ignored = CostPlugin(CostConfig(ledger=False), ctx)
    ignored.finished(finished)
    (record,) = ledger.records
    assert (record.key_id, record.model, record.cost_nanos) == ("k1", "alias", USAGE_NANOS)
    assert (record.input_tokens, record.output_tokens, record.duration_ms) == (10, 5, 250.0)
