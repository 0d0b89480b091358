"""The ResponseStore contract — owner scoping, expiry, the entry and byte bounds — for both
backends: proxy/stored/response_store.py (memory) and proxy/stored/responses_db.py (the gateway's
database, a real SQLite file)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from proxy.db import Database
from proxy.stored.response_store import MemoryResponseStore, ResponseStore, StoredResponse
from proxy.stored.responses_db import DatabaseResponseStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def record(owner: str | None = None, size: int = 10) -> StoredResponse:
    return StoredResponse(owner=owner, body=b"b" * (size // 2), messages=b"m" * (size - size // 2))


Make = Callable[..., ResponseStore]
NAMES = ("a0", "a1", "b0", "b1", "c0")


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


async def kept_by(store: ResponseStore, owner: str, *ids: str) -> list[bool]:
    return [await store.get(response_id, owner) is not None for response_id in ids]


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


async def test_an_owner_at_its_entry_bound_evicts_only_its_own_oldest(make: Make) -> None:
    clock = Clock()
    responses = make(clock, max_entries=100, max_entries_per_owner=2)
    await responses.put("resp_a", record(owner="key-a"))
    for i in range(5):
        clock.now += 1
        await responses.put(f"resp_b{i}", record(owner="key-b"))
    assert await responses.get("resp_a", "key-a") is not None
    assert await kept_by(responses, "key-b", *(f"resp_b{i}" for i in range(5))) == [
        False,
        False,
        False,
        True,
        True,
    ]


async def test_an_owner_at_its_byte_bound_evicts_only_its_own_oldest(make: Make) -> None:
    clock = Clock()
    responses = make(clock, max_bytes=1000, max_bytes_per_owner=100)
    await responses.put("resp_a", record(owner="key-a", size=90))
    for i in range(4):
        clock.now += 1
        await responses.put(f"resp_b{i}", record(owner="key-b", size=40))
    assert await responses.get("resp_a", "key-a") is not None
    assert await kept_by(responses, "key-b", *(f"resp_b{i}" for i in range(4))) == [
        False,
        False,
        True,
        True,
    ]
    assert not await responses.put("resp_big", record(owner="key-b", size=101))


async def test_a_full_store_takes_from_the_heaviest_owner(make: Make) -> None:
    # key-b fills its bound (3 of 4 entries); key-c's first record then needs room: the
    # oldest of key-b's goes, never key-a's single one.
    clock = Clock()
    responses = make(clock, max_entries=4, max_entries_per_owner=3)
    await responses.put("resp_a", record(owner="key-a"))
    for i in range(3):
        clock.now += 1
        await responses.put(f"resp_b{i}", record(owner="key-b"))
    clock.now += 1
    await responses.put("resp_c", record(owner="key-c"))
    assert await kept_by(responses, "key-a", "resp_a") == [True]
    assert await kept_by(responses, "key-c", "resp_c") == [True]
    assert await kept_by(responses, "key-b", "resp_b0", "resp_b1", "resp_b2") == [
        False,
        True,
        True,
    ]


async def test_a_full_store_takes_from_the_writer_on_a_tie(make: Make) -> None:
    clock = Clock()
    responses = make(clock, max_entries=4, max_bytes=1000)
    for name in ("a0", "a1", "b0", "c0"):
        await responses.put(f"resp_{name}", record(owner=f"key-{name[0]}"))
        clock.now += 1
    await responses.put("resp_b1", record(owner="key-b"))  # key-b would hold 2, as key-a does
    found = {n: await responses.get(f"resp_{n}", f"key-{n[0]}") is not None for n in NAMES}
    assert found == {"a0": True, "a1": True, "b0": False, "b1": True, "c0": True}
    clock.now += 1
    await responses.put("resp_c1", record(owner="key-c"))  # 2 against 2 again: key-c pays
    assert await responses.get("resp_c0", "key-c") is None
    assert await kept_by(responses, "key-a", "resp_a0", "resp_a1") == [True, True]


async def test_a_full_store_takes_from_the_heaviest_owner_by_bytes(make: Make) -> None:
    clock = Clock()
    responses = make(clock, max_entries=100, max_bytes=200)
    await responses.put("resp_a0", record(owner="key-a", size=30))
    clock.now += 1
    await responses.put("resp_b0", record(owner="key-b", size=100))
    clock.now += 1
    await responses.put("resp_a1", record(owner="key-a", size=30))
    clock.now += 1
    await responses.put("resp_c0", record(owner="key-c", size=60))  # 220 > 200: key-b pays
    assert await responses.get("resp_b0", "key-b") is None
    assert await responses.get("resp_a0", "key-a") is not None
    assert await responses.get("resp_c0", "key-c") is not None


async def test_no_write_takes_from_an_owner_lighter_than_the_writer(make: Make) -> None:
    # 300 seeded writes of eight keys into a store smaller than their sum: after each, every
    # bound holds, and a key other than the writer lost records only if it held at least as
    # many entries, or bytes, as the writer then does.
    clock = Clock()
    responses = make(
        clock,
        ttl=10_000,  # nothing expires: every loss is an eviction
        max_entries=40,
        max_bytes=4000,
        max_entries_per_owner=12,
        max_bytes_per_owner=1500,
    )
    rng = random.Random(36)
    live: dict[str, tuple[str, int]] = {}
    for step in range(300):
        owner, size = f"key-{rng.randrange(8)}", rng.randrange(20, 200)
        before = holdings(live)
        assert await responses.put(f"resp_{step}", record(owner=owner, size=size))
        clock.now += 1
        live[f"resp_{step}"] = (owner, size)
        live = {rid: held for rid, held in live.items() if await responses.get(rid, held[0])}
        after = holdings(live)
        assert len(live) <= 40
        assert sum(size for _, size in live.values()) <= 4000
        assert all(n <= 12 and held <= 1500 for n, held in after.values())
        mine = after.get(owner, (0, 0))
        for other, (n, held) in before.items():
            if other != owner and after.get(other, (0, 0))[0] < n:
                assert n >= mine[0] or held >= mine[1], (step, other, before[other], mine)


def holdings(live: dict[str, tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """Entries and bytes per owner of ``live`` (id -> (owner, size))."""
    per_owner: dict[str, tuple[int, int]] = {}
    for owner, size in live.values():
        n, held = per_owner.get(owner, (0, 0))
        per_owner[owner] = (n + 1, held + size)
    return per_owner


async def test_anonymous_records_have_only_the_stores_bound(make: Make) -> None:
    responses = make(max_entries=10, max_entries_per_owner=2, max_bytes_per_owner=1024)
    for i in range(4):
        await responses.put(f"resp_{i}", record(owner=None))
    assert await kept(responses, *(f"resp_{i}" for i in range(4))) == [True] * 4


@pytest.mark.parametrize(
    "bounds",
    [
        {"ttl": 0},
        {"max_entries": 0},
        {"max_bytes": 0},
        {"max_entries_per_owner": 0},
        {"max_bytes_per_owner": 0},
    ],
)
def test_bounds_must_be_positive(make: Make, bounds: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        make(**bounds)


async def test_the_memory_store_counts_what_it_holds() -> None:
    responses = MemoryResponseStore(ttl=60, max_entries=10, max_bytes=1000, clock=Clock())
    await responses.put("resp_a", record(size=40))
    await responses.put("resp_a", record(size=20))
    assert (len(responses), responses.bytes) == (1, 20)
