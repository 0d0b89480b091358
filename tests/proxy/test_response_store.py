"""The ResponseStore contract — owner scoping, expiry, the entry and byte bounds — for both
backends: proxy/response_store.py (memory) and proxy/db/responses.py (the gateway's database,
a real SQLite file)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from proxy.db import Database
from proxy.db.responses import DatabaseResponseStore
from proxy.response_store import MemoryResponseStore, ResponseStore, StoredResponse


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def record(owner: str | None = None, size: int = 10) -> StoredResponse:
    return StoredResponse(owner=owner, body=b"b" * (size // 2), messages=b"m" * (size - size // 2))


Make = Callable[..., ResponseStore]


@pytest.fixture(params=["memory", "database"])
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    databases: list[Database] = []

    def build(clock: Clock | None = None, **bounds: float) -> ResponseStore:
        bounds.setdefault("ttl", 60)
        bounds.setdefault("max_entries", 100)
        bounds.setdefault("max_bytes", 1000)
        clock = clock or Clock()
        if request.param == "memory":
            return MemoryResponseStore(clock=clock, **bounds)  # type: ignore[arg-type]
        database = Database(f"sqlite:///{tmp_path}/store-{len(databases)}.db")
        databases.append(database)
        return DatabaseResponseStore(database, clock=clock, **bounds)  # type: ignore[arg-type]

    yield build
    for database in databases:
        await database.close()


async def kept(store: ResponseStore, *ids: str) -> list[bool]:
    return [await store.get(response_id, None) is not None for response_id in ids]


async def test_a_record_belongs_to_its_owner(make: Make) -> None:
    responses = make()
    assert await responses.put("resp_a", record(owner="key-a"))
    assert await responses.get("resp_a", "key-a") == record(owner="key-a")
    assert await responses.get("resp_a", "key-b") is None
    assert await responses.get("resp_a", None) is None
    assert not await responses.delete("resp_a", "key-b")
    assert await responses.get("resp_a", "key-a") is not None
    assert await responses.delete("resp_a", "key-a")
    assert await responses.get("resp_a", "key-a") is None
    assert not await responses.delete("resp_a", "key-a")


async def test_anonymous_records_are_only_for_anonymous_callers(make: Make) -> None:
    responses = make()
    await responses.put("resp_a", record(owner=None))
    assert await responses.get("resp_a", None) == record(owner=None)
    assert await responses.get("resp_a", "key-a") is None


async def test_records_expire_after_the_ttl(make: Make) -> None:
    clock = Clock()
    responses = make(clock, ttl=30)
    await responses.put("resp_a", record())
    clock.now += 29.5
    assert await kept(responses, "resp_a") == [True]
    clock.now += 0.5
    assert await kept(responses, "resp_a") == [False]
    assert not await responses.delete("resp_a", None)


async def test_expired_records_make_room_first(make: Make) -> None:
    clock = Clock()
    responses = make(clock, ttl=30, max_entries=3)
    for i in range(3):
        await responses.put(f"resp_{i}", record())
    clock.now += 20
    await responses.put("resp_3", record())  # the oldest goes: the bound is 3
    clock.now += 15  # 0..2 have expired, 3 has not
    for i in range(4, 6):
        await responses.put(f"resp_{i}", record())
    assert await kept(responses, "resp_3", "resp_4", "resp_5") == [True, True, True]


async def test_the_oldest_records_go_first_past_the_entry_bound(make: Make) -> None:
    clock = Clock()
    responses = make(clock, max_entries=3)
    for i in range(5):
        await responses.put(f"resp_{i}", record())
        clock.now += 1
    assert await kept(responses, *(f"resp_{i}" for i in range(5))) == [
        False,
        False,
        True,
        True,
        True,
    ]


async def test_the_oldest_records_go_first_past_the_byte_bound(make: Make) -> None:
    clock = Clock()
    responses = make(clock, max_bytes=100)
    for i in range(4):
        await responses.put(f"resp_{i}", record(size=30))
        clock.now += 1
    assert await kept(responses, "resp_0", "resp_1", "resp_2", "resp_3") == [
        False,
        True,
        True,
        True,
    ]


async def test_a_record_larger_than_the_bound_is_not_kept(make: Make) -> None:
    responses = make(max_bytes=100)
    await responses.put("resp_small", record(size=50))
    assert not await responses.put("resp_big", record(size=101))
    assert await kept(responses, "resp_big", "resp_small") == [False, True]


async def test_replacing_a_record_counts_it_once(make: Make) -> None:
    clock = Clock()
    responses = make(clock, max_entries=2, max_bytes=100)
    await responses.put("resp_a", record(size=60))
    clock.now += 1
    await responses.put("resp_a", record(size=40))
    clock.now += 1
    await responses.put("resp_b", record(size=60))
    assert await kept(responses, "resp_a", "resp_b") == [True, True]
    assert await responses.get("resp_a", None) == record(size=40)


@pytest.mark.parametrize("bounds", [{"ttl": 0}, {"max_entries": 0}, {"max_bytes": 0}])
def test_bounds_must_be_positive(make: Make, bounds: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        make(**bounds)


async def test_the_memory_store_counts_what_it_holds() -> None:
    responses = MemoryResponseStore(ttl=60, max_entries=10, max_bytes=1000, clock=Clock())
    await responses.put("resp_a", record(size=40))
    await responses.put("resp_a", record(size=20))
    assert (len(responses), responses.bytes) == (1, 20)
