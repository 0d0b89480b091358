"""proxy/core/canonical.py: the helpers that live beside the types (the types are used
everywhere)."""

from __future__ import annotations

import msgspec

from proxy.core.canonical import Accounting, Call
from proxy.core.reply import Chunk, batched


async def _chunks(*ids: str):
    for chunk_id in ids:
        yield Chunk(id=chunk_id, model="m", choices=[])


async def test_a_plain_stream_is_batched_one_chunk_at_a_time() -> None:
    source = batched(_chunks("a", "b"))
    assert source.ended is False
    assert [c.id for c in await source.next_batch(True)] == ["a"]  # type: ignore[union-attr]
    assert [c.id for c in await source.next_batch(False)] == ["b"]  # type: ignore[union-attr]
    assert await source.next_batch(True) == []


async def test_a_stream_that_batches_itself_is_used_as_it_is() -> None:
    class Batching:
        ended = True

        async def next_batch(self, raw: bool) -> list:
            return []

        def __aiter__(self):
            return self

        async def __anext__(self):
            raise StopAsyncIteration

    stream = Batching()
    assert batched(stream) is stream  # type: ignore[arg-type]


def test_every_copy_of_a_call_shares_its_accounting() -> None:
    call = Call(request_id="r", dialect="openai", model="m", messages=[])
    copy = msgspec.structs.replace(call, model="other")
    copy.accounting.cost_nanos = 1500
    copy.accounting.cache = "miss"
    assert call.accounting is copy.accounting
    assert call.accounting.cost_nanos == 1500


def test_accounting_starts_unknown_and_calls_do_not_share_it() -> None:
    first = Call(request_id="a", dialect="openai", model="m", messages=[])
    second = Call(request_id="b", dialect="openai", model="m", messages=[])
    assert first.accounting == Accounting()
    assert first.accounting.cost_nanos is None  # unknown, never 0
    assert first.accounting is not second.accounting
