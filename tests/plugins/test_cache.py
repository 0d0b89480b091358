"""The cache plugin over a scripted inner link: verdicts, directives, expiry, failures, ledger."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from plugins.cache import CacheConfig, CachePlugin
from proxy.cache.entry import MAGIC, decode_entry
from proxy.cache.key import cache_key
from proxy.cache.replay import replay_frames
from proxy.core.canonical import CacheOptions, Call, GatewayOptions, Message, Principal, Usage
from proxy.core.errors import BadRequest, UpstreamError, UpstreamUnavailable
from proxy.core.metrics import Metrics
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Encoded, RawFrames, Reply, Response
from proxy.runtime.plugins import PluginContext
from proxy.state.memory_store import MemoryStore
from proxy.state.store import StoreUnavailable
from tests.faults import FakeClock
from tests.plugins.scripted import context, sample
from tests.waiting import until

USAGE = Usage(input=4, output=6)
COST = 2_500  # nano-dollars, as the cost plugin would record


class Inner:
    """The rest of the chain: counts calls, prices them, answers whole or streamed."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.error: Exception | None = None
        self.cut_after: int | None = None
        self.no_usage = False
        self.gate: asyncio.Event | None = None
        self.words = ["Hello", " world"]
        self.raw: bytes | None = None  # an upstream body for whole answers to keep

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        error = self.error  # as it was when the call arrived
        if self.gate is not None:
            await self.gate.wait()
        if error is not None:
            raise error
        call.accounting.cost_nanos = COST
        if call.stream:
            return Reply(provider="p", model="m", stream=self._stream())
        message = Message(role="assistant", content="".join(self.words))
        response = Response(
            id="r1",
            model="m",
            created=7,
            choices=[Choice(index=0, message=message, finish_reason="stop")],
            usage=None if self.no_usage else USAGE,
        )
        if self.raw is not None:
            response.keep_raw(self.raw)
        return Reply(provider="p", model="m", response=response)

    async def _stream(self) -> AsyncIterator[Chunk]:
        for sent, word in enumerate(self.words):
            if self.cut_after is not None and sent >= self.cut_after:
                raise UpstreamUnavailable("cut", provider="p")
            yield Chunk(id="s1", model="m", created=7, choices=[_choice(Delta(content=word))])
        yield Chunk(id="s1", model="m", created=7, choices=[_choice(Delta(), "stop")])
        if not self.no_usage:
            yield Chunk(id="s1", model="m", created=7, choices=[], usage=USAGE)


def _choice(delta: Delta, finish: str | None = None) -> ChunkChoice:
    return ChunkChoice(index=0, delta=delta, finish_reason=finish)  # type: ignore[arg-type]


class Harness:
    def __init__(self, store: MemoryStore | None = None, **options: Any) -> None:
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.inner = Inner()
        ctx = context(metrics=self.metrics)
        if store is not None:
            ctx = PluginContext(ctx.resolve, self.metrics, ctx.logger, store)
        self.plugin = CachePlugin(msgspec.convert(options, CacheConfig), ctx, clock=self.clock)

    async def send(
        self,
        *,
        stream: bool = False,
        headers: dict[str, str] | None = None,
        content: str = "Hi",
        principal: Principal | None = None,
        options: GatewayOptions | None = None,
        dialect: str = "openai",
    ) -> tuple[Call, Reply, str]:
        call = Call(
            request_id="r",
            dialect=dialect,
            model="chat",
            messages=[Message(role="user", content=content)],
            stream=stream,
            client_headers=headers or {},
            options=options or GatewayOptions(),
        )
        if principal is not None:
            call.principal = principal
        reply = await self.plugin(call, self.inner)
        text = await read(reply)
        await self.settle()
        return call, reply, text

    async def settle(self) -> None:
        """Let the entry writes scheduled so far finish."""
        await self.plugin.close()

    def count(self, result: str) -> float:
        return sample(self.metrics, "crossway_cache_requests_total", result=result)

    def errors(self, reason: str) -> float:
        return sample(self.metrics, "crossway_cache_errors_total", reason=reason)


async def read(reply: Reply) -> str:
    if reply.response is not None:
        return reply.response.choices[0].message.text()
    assert reply.stream is not None
    parts: list[str] = []
    try:
        async for chunk in reply.stream:
            parts.extend(c.delta.content or "" for c in chunk.choices)
    finally:
        await reply.stream.aclose()  # type: ignore[attr-defined]
    return "".join(parts)


def verdict(reply: Reply) -> str:
    return reply.headers["x-crossway-cache"]


async def test_the_second_identical_call_is_a_hit_and_costs_nothing() -> None:
    h = Harness()
    first_call, first, text = await h.send()
    assert (verdict(first), text, first_call.accounting.cache) == ("miss", "Hello world", "miss")
    assert first_call.accounting.cost_nanos == COST
    h.clock.advance(42.7)
    call, reply, text = await h.send()
    assert (verdict(reply), reply.headers["age"], text) == ("hit", "42", "Hello world")
    assert (reply.provider, reply.model, reply.attempts) == ("p", "m", 0)
    assert len(h.inner.calls) == 1
    assert call.accounting.cache == "hit"
    assert call.accounting.cost_nanos == 0
    assert call.accounting.saved_nanos == COST
    assert sample(h.metrics, "crossway_cache_saved_usd_total") == pytest.approx(COST / 1e9)
    assert (h.count("miss"), h.count("hit")) == (1, 1)
    assert sample(h.metrics, "crossway_cache_bytes") > 0


async def test_a_stream_hit_replays_and_a_whole_request_hits_a_streamed_entry() -> None:
    h = Harness()
    _, first, text = await h.send(stream=True)
    assert (verdict(first), text) == ("miss", "Hello world")
    _, replayed, text = await h.send(stream=True)
    assert (verdict(replayed), text) == ("hit", "Hello world")
    _, whole, text = await h.send()
    assert (verdict(whole), text) == ("hit", "Hello world")
    assert whole.response is not None
    assert whole.response.usage == USAGE
    assert len(h.inner.calls) == 1


async def test_a_streamed_request_hits_a_whole_entry() -> None:
    h = Harness()
    await h.send()
    _, reply, text = await h.send(stream=True)
    assert (verdict(reply), text) == ("hit", "Hello world")
    assert len(h.inner.calls) == 1


async def test_an_openai_clients_first_streamed_hit_keeps_the_replays_frames() -> None:
    """A memory entry gains its replay's OpenAI chat frames on the first streamed hit of an
    OpenAI chat client, which later ones read verbatim (then the usage chunk); streamed hits of
    other dialects leave it as it was stored."""
    h = Harness()
    call, _, _ = await h.send()  # a whole miss: stored without frames
    key = cache_key(call, "team")
    lru = h.plugin._lru
    assert lru is not None

    def stored_frames() -> bytes | None:
        data = lru.get(key)
        assert data is not None
        return decode_entry(data).frames

    _, reply, text = await h.send(stream=True, dialect="anthropic")
    assert (verdict(reply), text, stored_frames()) == ("hit", "Hello world", None)
    _, reply, text = await h.send(stream=True)
    assert (verdict(reply), text) == ("hit", "Hello world")
    frames = stored_frames()
    assert frames is not None
    data = lru.get(key)
    assert data is not None
    assert frames == replay_frames(decode_entry(data).response)
    again = msgspec.structs.replace(call, stream=True)
    reply = await h.plugin(again, h.inner)
    assert reply.stream is not None
    batch = await reply.stream.next_batch(True)  # type: ignore[attr-defined]
    assert isinstance(batch[0], RawFrames)
    assert batch[0].data == frames
    assert batch[1].usage == USAGE
    assert len(h.inner.calls) == 1


async def test_frames_that_would_not_fit_and_store_entries_are_not_added() -> None:
    probe = Harness()
    call, _, _ = await probe.send()
    size = len(probe.plugin._lru.get(cache_key(call, "team")) or b"")  # type: ignore[union-attr]
    tight = Harness(max_entry_bytes=size + 20)
    await tight.send()
    await tight.send(stream=True)
    data = tight.plugin._lru.get(cache_key(call, "team"))  # type: ignore[union-attr]
    assert data is not None
    assert decode_entry(data).frames is None
    store = MemoryStore()
    shared = Harness(store=store, backend="store")
    await shared.send()
    _, reply, _ = await shared.send(stream=True)
    assert verdict(reply) == "hit"
    data = await store.get(cache_key(call, "team"))
    assert data is not None
    assert decode_entry(data).frames is None


RAW = b'{"id":"r1","object":"chat.completion"}'


async def test_an_openai_clients_first_whole_hit_marks_a_kept_raw_body_verbatim() -> None:
    """A memory entry whose answer kept its upstream body is checked once, on the first whole
    hit of an OpenAI chat client: that hit and the later ones carry the body as the OpenAI
    dialect's encoding; whole hits of other dialects and streamed hits carry none."""
    h = Harness()
    h.inner.raw = RAW
    call, _, _ = await h.send()
    lru = h.plugin._lru
    assert lru is not None

    def stored_verbatim() -> bool:
        data = lru.get(cache_key(call, "team"))
        assert data is not None
        return decode_entry(data).verbatim

    _, reply, _ = await h.send(dialect="anthropic")
    assert (verdict(reply), reply.encoded, stored_verbatim()) == ("hit", None, False)
    for _ in range(2):  # the hit that marks it, then one that reads the mark
        _, reply, text = await h.send()
        assert (verdict(reply), text, stored_verbatim()) == ("hit", "Hello world", True)
        assert reply.response is not None
        assert reply.encoded == Encoded("openai", reply.response, RAW)
        assert reply.encoded.response is reply.response
    for other in ({"stream": True}, {"dialect": "anthropic"}):
        _, reply, _ = await h.send(**other)  # type: ignore[arg-type]
        assert (verdict(reply), reply.encoded) == ("hit", None)
    assert len(h.inner.calls) == 1


async def test_a_raw_body_that_no_longer_matches_and_store_entries_are_not_marked() -> None:
    changed = Harness()
    changed.inner.raw = RAW
    inner = changed.inner

    async def edited(call: Call) -> Reply:  # a plugin that edits the answer after keep_raw
        reply = await inner(call)
        assert reply.response is not None
        reply.response.choices[0].message.content = "edited"
        return reply

    call = Call(request_id="r", dialect="openai", model="chat", messages=[])
    await changed.plugin(call, edited)
    await changed.settle()
    again = Call(request_id="r", dialect="openai", model="chat", messages=[])
    reply = await changed.plugin(again, edited)
    assert (verdict(reply), reply.encoded) == ("hit", None)
    data = changed.plugin._lru.get(cache_key(call, "team"))  # type: ignore[union-attr]
    assert data is not None
    assert not decode_entry(data).verbatim
    store = MemoryStore()
    shared = Harness(store=store, backend="store")
    shared.inner.raw = RAW
    call, _, _ = await shared.send()
    _, reply, _ = await shared.send()
    assert (verdict(reply), reply.encoded) == ("hit", None)
    data = await store.get(cache_key(call, "team"))
    assert data is not None
    assert not decode_entry(data).verbatim


async def test_different_content_is_a_different_entry() -> None:
    h = Harness()
    await h.send(content="a")
    _, reply, _ = await h.send(content="b")
    assert verdict(reply) == "miss"
    assert len(h.inner.calls) == 2


async def test_team_scope_never_shares_between_teams() -> None:
    h = Harness(scope="team")
    a1, a2, b = Principal("k1", team="a"), Principal("k2", team="a"), Principal("k3", team="b")
    await h.send(principal=a1)
    assert verdict((await h.send(principal=a2))[1]) == "hit"
    assert verdict((await h.send(principal=b))[1]) == "miss"
    assert len(h.inner.calls) == 2


async def test_no_cache_skips_the_lookup_and_refreshes_the_entry() -> None:
    h = Harness()
    await h.send()
    h.inner.words = ["Fresh"]
    _, reply, text = await h.send(headers={"cache-control": "no-cache"})
    assert (verdict(reply), text) == ("miss", "Fresh")
    _, reply, text = await h.send()
    assert (verdict(reply), text) == ("hit", "Fresh")
    assert len(h.inner.calls) == 2


async def test_no_store_neither_reads_nor_writes() -> None:
    h = Harness()
    await h.send()
    call, reply, _ = await h.send(headers={"cache-control": "no-store"})
    assert verdict(reply) == "bypass"
    assert call.accounting.cache == "bypass"
    h.inner.words = ["Other"]
    await h.send(headers={"cache-control": "no-store"})
    _, reply, text = await h.send()
    assert (verdict(reply), text) == ("hit", "Hello world")
    assert len(h.inner.calls) == 3
    assert h.count("bypass") == 2


async def test_max_age_refuses_older_entries() -> None:
    h = Harness()
    await h.send()
    h.clock.advance(30)
    assert verdict((await h.send(headers={"cache-control": "max-age=60"}))[1]) == "hit"
    _, reply, _ = await h.send(headers={"cache-control": "max-age=10"})
    assert verdict(reply) == "miss"
    assert len(h.inner.calls) == 2


async def test_entries_expire_after_their_ttl_on_the_injected_clock() -> None:
    h = Harness(ttl=100)
    await h.send()
    h.clock.advance(99)
    assert verdict((await h.send())[1]) == "hit"
    h.clock.advance(1)
    assert verdict((await h.send())[1]) == "miss"
    assert len(h.inner.calls) == 2


async def test_a_client_ttl_is_bounded_by_max_ttl() -> None:
    h = Harness(ttl=100, max_ttl=200)
    await h.send(headers={"x-crossway-cache-ttl": "10000"})
    h.clock.advance(199)
    assert verdict((await h.send())[1]) == "hit"
    h.clock.advance(1)
    assert verdict((await h.send())[1]) == "miss"


async def test_a_short_client_ttl_expires_early() -> None:
    h = Harness(ttl=100)
    await h.send(options=GatewayOptions(cache=CacheOptions(ttl=5)))
    h.clock.advance(5)
    assert verdict((await h.send())[1]) == "miss"


async def test_a_bad_ttl_header_is_the_clients_error() -> None:
    h = Harness()
    with pytest.raises(BadRequest):
        await h.send(headers={"x-crossway-cache-ttl": "soon"})
    assert h.inner.calls == []


async def test_opt_in_mode_caches_only_requests_that_ask() -> None:
    h = Harness(mode="opt_in")
    _, reply, _ = await h.send()
    assert verdict(reply) == "bypass"
    asked = GatewayOptions(cache=CacheOptions(ttl=60))
    assert verdict((await h.send(options=asked))[1]) == "miss"
    assert verdict((await h.send(options=asked))[1]) == "hit"
    assert verdict((await h.send(headers={"x-crossway-cache-ttl": "60"}))[1]) == "hit"
    assert verdict((await h.send())[1]) == "bypass"


async def test_errors_are_never_stored() -> None:
    h = Harness()
    h.inner.error = UpstreamError("down", upstream_status=500)
    for _ in range(2):
        with pytest.raises(UpstreamError):
            await h.send()
    assert len(h.inner.calls) == 2


async def test_cut_streams_and_streams_without_usage_are_never_stored() -> None:
    h = Harness()
    h.inner.cut_after = 1
    for _ in range(2):
        with pytest.raises(UpstreamUnavailable):
            await h.send(stream=True)
    h.inner.cut_after = None
    h.inner.no_usage = True
    for _ in range(2):
        assert verdict((await h.send(stream=True))[1]) == "miss"
    assert len(h.inner.calls) == 4


async def test_a_stream_the_client_abandons_is_not_stored() -> None:
    h = Harness()
    call = Call(
        request_id="r",
        dialect="openai",
        model="chat",
        messages=[Message(role="user", content="Hi")],
        stream=True,
    )
    reply = await h.plugin(call, h.inner)
    assert reply.stream is not None
    await anext(reply.stream)
    await reply.stream.aclose()  # type: ignore[attr-defined]
    await h.settle()
    assert verdict((await h.send(stream=True))[1]) == "miss"


async def test_answers_over_max_entry_bytes_are_not_stored() -> None:
    h = Harness(max_entry_bytes=200)
    h.inner.words = ["x" * 300]
    await h.send()
    await h.send(stream=True)
    assert verdict((await h.send())[1]) == "miss"
    assert len(h.inner.calls) == 3


async def test_the_memory_backend_evicts_by_bytes() -> None:
    h = Harness(max_bytes=1700, max_entry_bytes=1000)
    h.inner.words = ["x" * 300]  # entries (key included) of 539 bytes: three fit
    for name in ("a", "b", "c", "d"):
        await h.send(content=name)
        assert 0 < sample(h.metrics, "crossway_cache_bytes") <= 1700
    assert verdict((await h.send(content="b"))[1]) == "hit"
    assert verdict((await h.send(content="a"))[1]) == "miss", "the least recently used went"


async def test_a_memory_entry_kept_decoded_counts_towards_max_bytes() -> None:
    h = Harness(max_bytes=1700, max_entry_bytes=1000)
    h.inner.words = ["x" * 300]  # entries of 539 bytes: three fit, or one read and one not
    for name in ("a", "b", "c"):
        await h.send(content=name)
    assert verdict((await h.send(content="a"))[1]) == "hit"  # now held decoded too
    assert 0 < sample(h.metrics, "crossway_cache_bytes") <= 1700
    assert verdict((await h.send(content="b"))[1]) == "miss", "evicted for a's decoded form"


async def test_the_store_backend_shares_entries_through_the_store() -> None:
    store = MemoryStore()
    first = Harness(store=store, backend="store")
    second = Harness(store=store, backend="store")
    await first.send()
    _, reply, text = await second.send()
    assert (verdict(reply), text) == ("hit", "Hello world")
    assert len(first.inner.calls) == 1
    assert second.inner.calls == []


class BrokenStore(MemoryStore):
    async def get(self, key: str) -> bytes | None:
        raise StoreUnavailable("down")

    async def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        raise StoreUnavailable("down")


async def test_a_backend_outage_is_a_counted_miss_never_a_failure() -> None:
    h = Harness(store=BrokenStore(), backend="store")
    for _ in range(2):
        _, reply, text = await h.send()
        assert (verdict(reply), text) == ("miss", "Hello world")
    assert len(h.inner.calls) == 2
    assert h.errors("backend") == 4  # two reads, two writes


async def test_a_corrupt_entry_is_deleted_and_missed() -> None:
    store = MemoryStore()
    h = Harness(store=store, backend="store")
    await h.send()
    (key,) = [k for k in store._data if k.startswith("crossway:cache:")]
    for garbage in (b"garbage", MAGIC + b"\xc1\xc1"):
        await store.set(key, garbage)
        _, reply, _ = await h.send()
        assert verdict(reply) == "miss"
    assert h.errors("corrupt") == 2
    assert verdict((await h.send())[1]) == "hit", "the fresh answer replaced the corrupt one"


async def test_a_corrupt_memory_entry_is_deleted_and_missed() -> None:
    h = Harness()
    call, _, _ = await h.send()
    lru = h.plugin._lru
    assert lru is not None
    key = cache_key(call, "team")
    lru.set(key, MAGIC + b"\xc1\xc1", 60)
    _, reply, _ = await h.send()
    assert verdict(reply) == "miss"
    assert h.errors("corrupt") == 1
    assert verdict((await h.send())[1]) == "hit", "the fresh answer replaced the corrupt one"


async def test_memory_hits_share_the_entry_decoded_on_the_first_one() -> None:
    """The memory backend decodes an entry once: every later hit serves the same answer
    object (which is why nothing may change a served answer in place)."""
    h = Harness()
    await h.send()
    _, first, _ = await h.send(dialect="anthropic")
    _, second, _ = await h.send(dialect="anthropic")
    assert (verdict(first), verdict(second)) == ("hit", "hit")
    assert first.response is not None
    assert second.response is first.response


async def test_identical_calls_in_flight_share_one_upstream_call() -> None:
    h = Harness()
    h.inner.gate = asyncio.Event()
    sends = [asyncio.ensure_future(h.send(stream=i % 2 == 0)) for i in range(6)]
    await until(lambda: h.plugin.waiting == 5, what="five waiters")
    h.inner.gate.set()
    results = await asyncio.gather(*sends)
    assert len(h.inner.calls) == 1
    assert [text for _, _, text in results] == ["Hello world"] * 6
    assert sorted(verdict(reply) for _, reply, _ in results) == ["hit"] * 5 + ["miss"]
    assert h.count("coalesced") == 5
    assert all(
        call.accounting.saved_nanos == COST for call, reply, _ in results if verdict(reply) == "hit"
    )
    assert verdict((await h.send())[1]) == "hit"


async def test_a_failed_leader_is_not_shared_each_waiter_calls_on_its_own() -> None:
    h = Harness()
    h.inner.gate = asyncio.Event()
    h.inner.error = UpstreamError("down", upstream_status=500)
    leader = asyncio.ensure_future(h.send())
    await until(lambda: len(h.inner.calls) == 1, what="the leader's call")
    waiters = [asyncio.ensure_future(h.send()) for _ in range(3)]
    await until(lambda: h.plugin.waiting == 3, what="three waiters")
    h.inner.error = None
    h.inner.gate.set()
    with pytest.raises(UpstreamError):
        await leader
    outcomes = await asyncio.gather(*waiters)
    assert [verdict(reply) for _, reply, _ in outcomes] == ["miss"] * 3
    assert len(h.inner.calls) == 4


async def test_without_coalescing_every_call_goes_upstream() -> None:
    h = Harness(coalesce=False)
    h.inner.gate = asyncio.Event()
    sends = [asyncio.ensure_future(h.send()) for _ in range(4)]
    await until(lambda: len(h.inner.calls) == 4, what="four upstream calls")
    h.inner.gate.set()
    await asyncio.gather(*sends)
    assert len(h.inner.calls) == 4


def test_bad_options_are_load_errors() -> None:
    with pytest.raises(ValueError, match="max_ttl"):
        Harness(ttl=100, max_ttl=10)
    with pytest.raises(ValueError, match="max_bytes"):
        Harness(max_bytes=10, max_entry_bytes=100)
    with pytest.raises(msgspec.ValidationError):
        Harness(scope="everyone")
