"""proxy/response_store.py: owner scoping, expiry and the entry and byte bounds."""

from __future__ import annotations

import pytest

from proxy.response_store import MemoryResponseStore, StoredResponse


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(owner: str | None = None, size: int = 10) -> StoredResponse:
    return StoredResponse(owner=owner, body=b"b" * (size // 2), messages=b"m" * (size - size // 2))


def store(clock: Clock | None = None, **bounds: float) -> MemoryResponseStore:
    bounds.setdefault("ttl", 60)
    bounds.setdefault("max_entries", 100)
    bounds.setdefault("max_bytes", 1000)
    return MemoryResponseStore(clock=clock or Clock(), **bounds)  # type: ignore[arg-type]


async def test_a_record_belongs_to_its_owner() -> None:
    responses = store()
    assert await responses.put("resp_a", record(owner="key-a"))
    assert await responses.get("resp_a", "key-a") == record(owner="key-a")
    assert await responses.get("resp_a", "key-b") is None
    assert await responses.get("resp_a", None) is None
    assert not await responses.delete("resp_a", "key-b")
    assert await responses.get("resp_a", "key-a") is not None
    assert await responses.delete("resp_a", "key-a")
    assert await responses.get("resp_a", "key-a") is None
    assert not await responses.delete("resp_a", "key-a")


async def test_anonymous_records_are_only_for_anonymous_callers() -> None:
    responses = store()
    await responses.put("resp_a", record(owner=None))
    assert await responses.get("resp_a", None) is not None
    assert await responses.get("resp_a", "key-a") is None


async def test_records_expire_after_the_ttl() -> None:
    clock = Clock()
    responses = store(clock, ttl=30)
    await responses.put("resp_a", record())
    clock.now += 29.9
    assert await responses.get("resp_a", None) is not None
    clock.now += 0.1
    assert await responses.get("resp_a", None) is None
    assert len(responses) == 0


async def test_expired_records_are_dropped_when_writing() -> None:
    clock = Clock()
    responses = store(clock, ttl=30)
    for i in range(5):
        await responses.put(f"resp_{i}", record())
    clock.now += 31
    await responses.put("resp_new", record())
    assert len(responses) == 1
    assert responses.bytes == 10


async def test_the_oldest_records_go_first_past_the_entry_bound() -> None:
    responses = store(max_entries=3)
    for i in range(5):
        await responses.put(f"resp_{i}", record())
    assert len(responses) == 3
    assert [await responses.get(f"resp_{i}", None) is not None for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]


async def test_the_oldest_records_go_first_past_the_byte_bound() -> None:
    responses = store(max_bytes=100)
    for i in range(4):
        await responses.put(f"resp_{i}", record(size=30))
    assert responses.bytes == 90
    assert await responses.get("resp_0", None) is None
    assert await responses.get("resp_1", None) is not None


async def test_a_record_larger_than_the_bound_is_not_kept() -> None:
    responses = store(max_bytes=100)
    await responses.put("resp_small", record(size=50))
    assert not await responses.put("resp_big", record(size=101))
    assert await responses.get("resp_big", None) is None
    assert await responses.get("resp_small", None) is not None


async def test_replacing_a_record_counts_its_bytes_once() -> None:
    responses = store()
    await responses.put("resp_a", record(size=40))
    await responses.put("resp_a", record(size=20))
    assert (len(responses), responses.bytes) == (1, 20)


@pytest.mark.parametrize("bounds", [{"ttl": 0}, {"max_entries": 0}, {"max_bytes": 0}])
def test_bounds_must_be_positive(bounds: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        store(**bounds)
