"""The semantic feed: entries one process writes are read by another at its next search."""

from __future__ import annotations

import pytest
from msgspec import msgpack

from proxy.cache.semantic_feed import PREFIX, Record, SemanticFeed
from proxy.state.memory_store import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(key: str) -> Record:
    return Record(key=key, expires=100.0, vector=b"\x00\x00\x80?")


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(Clock())


async def test_another_process_reads_what_one_wrote(store: MemoryStore) -> None:
    writer = SemanticFeed(store, ttl=60)
    reader = SemanticFeed(store, ttl=60)
    await writer.publish("scope", record("a"), ttl=30)
    await writer.publish("scope", record("b"), ttl=30)
    assert [r.key for r in await reader.fetch("scope")] == ["a", "b"]
    assert await reader.fetch("scope") == []  # nothing new
    await writer.publish("scope", record("c"), ttl=30)
    assert [r.key for r in await reader.fetch("scope")] == ["c"]
    assert await reader.fetch("other-scope") == []


async def test_a_process_does_not_read_back_its_own_entries(store: MemoryStore) -> None:
    feed = SemanticFeed(store, ttl=60)
    other = SemanticFeed(store, ttl=60)
    await feed.publish("scope", record("mine"), ttl=30)
    await other.publish("scope", record("theirs"), ttl=30)
    assert [r.key for r in await feed.fetch("scope")] == ["theirs"]


async def test_a_number_taken_before_its_record_is_written_is_read_at_the_next_search(
    store: MemoryStore,
) -> None:
    reader = SemanticFeed(store, ttl=60)
    number = await store.incr(PREFIX + "scope:seq")  # a writer between its two commands
    assert await reader.fetch("scope") == []
    await store.set(f"{PREFIX}scope:{number}", msgpack.encode(record("late")), ttl=30)
    assert [r.key for r in await reader.fetch("scope")] == ["late"]


async def test_a_record_that_never_comes_is_looked_for_once(store: MemoryStore) -> None:
    reader = SemanticFeed(store, ttl=60)
    number = await store.incr(PREFIX + "scope:seq")
    assert await reader.fetch("scope") == []
    assert await reader.fetch("scope") == []  # looked for again, then given up
    await store.set(f"{PREFIX}scope:{number}", msgpack.encode(record("too late")), ttl=30)
    assert await reader.fetch("scope") == []


async def test_values_that_are_not_records_are_skipped(store: MemoryStore) -> None:
    number = await store.incr(PREFIX + "scope:seq")
    await store.set(f"{PREFIX}scope:{number}", b"not msgpack", ttl=30)
    await SemanticFeed(store, ttl=60).publish("scope", record("good"), ttl=30)
    assert [r.key for r in await SemanticFeed(store, ttl=60).fetch("scope")] == ["good"]


async def test_a_reader_far_behind_reads_only_the_newest(store: MemoryStore) -> None:
    writer = SemanticFeed(store, ttl=60)
    for number in range(10):
        await writer.publish("scope", record(f"e{number}"), ttl=30)
    reader = SemanticFeed(store, ttl=60, max_fetch=3)
    assert [r.key for r in await reader.fetch("scope")] == ["e7", "e8", "e9"]


async def test_a_counter_that_started_again_is_read_from_the_start(store: MemoryStore) -> None:
    writer = SemanticFeed(store, ttl=60)
    reader = SemanticFeed(store, ttl=60)
    for number in range(3):
        await writer.publish("scope", record(f"old{number}"), ttl=30)
    assert len(await reader.fetch("scope")) == 3
    await store.delete(PREFIX + "scope:seq")  # expired
    await SemanticFeed(store, ttl=60).publish("scope", record("new"), ttl=30)
    assert [r.key for r in await reader.fetch("scope")] == ["new"]


async def test_forgetting_scopes_only_costs_reading_again(store: MemoryStore) -> None:
    writer = SemanticFeed(store, ttl=60)
    reader = SemanticFeed(store, ttl=60, max_scopes=1)
    await writer.publish("one", record("a"), ttl=30)
    await writer.publish("two", record("b"), ttl=30)
    assert [r.key for r in await reader.fetch("one")] == ["a"]
    assert [r.key for r in await reader.fetch("two")] == ["b"]
    assert [r.key for r in await reader.fetch("one")] == ["a"]  # forgotten: read again
