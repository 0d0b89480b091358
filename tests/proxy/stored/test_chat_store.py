"""The stored chat completions' stores: the memory one, and the database one on SQLite and on
PostgreSQL (the same semantics, one test suite): owners kept apart even for one id, listing in
order with filters and pages, metadata updates keeping a record's place, expiry and bounds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest

from proxy.db import Database
from proxy.stored.chat_completions_db import DatabaseChatStore
from proxy.stored.chat_store import ChatStore, MemoryChatStore, Query, StoredChat


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


Make = Callable[..., ChatStore]


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
async def make(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Make]:
    databases: list[Database] = []

    def build(**bounds: object) -> ChatStore:
        settings: dict[str, object] = {"ttl": 60.0, "max_entries": 100, "max_bytes": 1 << 20}
        settings.update(bounds)
        if request.param == "memory":
            return MemoryChatStore(**settings)  # type: ignore[arg-type]
        if request.param == "postgresql":
            assert not databases, "one PostgreSQL store per test"
            database = Database(request.getfixturevalue("postgres_url"))
        else:
            database = Database(f"sqlite:///{tmp_path}/chat-{len(databases)}.db")
        databases.append(database)
        return DatabaseChatStore(database, **settings)  # type: ignore[arg-type]

    yield build
    for database in databases:
        await database.close()


def record(owner: str | None, completion_id: str, model: str = "m", **metadata: str) -> StoredChat:
    body = msgspec.json.encode({"id": completion_id, "model": f"{model}-upstream"})
    return StoredChat(
        owner=owner,
        id=completion_id,
        model=model,
        metadata=metadata,
        body=body,
        messages=b"[]",
    )


async def ids(store: ChatStore, **query: object) -> list[str]:
    records, _ = await store.search(Query(**query))  # type: ignore[arg-type]
    return [r.id for r in records]


async def test_owners_are_kept_apart_even_for_one_id(make: Make) -> None:
    store = make()
    assert await store.put(record("alice", "c1", topic="a"))
    assert await store.put(record("bob", "c1", topic="b"))
    found = await store.get("c1", "alice")
    assert found is not None
    assert found.metadata == {"topic": "a"}
    assert await store.get("c1", None) is None
    assert await store.delete("c1", "bob")
    assert await store.get("c1", "bob") is None
    assert await store.get("c1", "alice") is not None
    assert await ids(store, owner="bob") == []


async def test_list_orders_filters_and_pages(make: Make) -> None:
    store = make()
    for name, topic in [("c1", "a"), ("c2", "b"), ("c3", "a")]:
        await store.put(record("alice", name, topic=topic))
    await store.put(record("alice", "c4", model="other"))
    assert await ids(store, owner="alice") == ["c1", "c2", "c3", "c4"]
    assert await ids(store, owner="alice", order="desc", limit=2) == ["c4", "c3"]
    assert await ids(store, owner="alice", after="c2") == ["c3", "c4"]
    assert await ids(store, owner="alice", after="c3", order="desc") == ["c2", "c1"]
    assert await ids(store, owner="alice", after="gone") == []
    assert await ids(store, owner="alice", metadata={"topic": "a"}) == ["c1", "c3"]
    assert await ids(store, owner="alice", model="other") == ["c4"]
    assert await ids(store, owner="alice", model="m-upstream") == ["c1", "c2", "c3"]
    page, more = await store.search(Query(owner="alice", limit=3))
    assert (len(page), more) == (3, True)
    page, more = await store.search(Query(owner="alice", limit=4))
    assert (len(page), more) == (4, False)


async def test_an_update_keeps_the_place_and_changes_the_metadata(make: Make) -> None:
    store = make()
    for name in ("c1", "c2"):
        await store.put(record("alice", name, state="new"))
    assert await store.update("c1", "alice", {"state": "done"}, b'{"id":"c1","metadata":{}}')
    assert await ids(store, owner="alice") == ["c1", "c2"]
    assert await ids(store, owner="alice", metadata={"state": "done"}) == ["c1"]
    found = await store.get("c1", "alice")
    assert found is not None
    assert found.body == b'{"id":"c1","metadata":{}}'
    assert not await store.update("c1", "bob", {}, b"{}")
    assert not await store.update("nope", "alice", {}, b"{}")


async def test_records_expire(make: Make) -> None:
    clock = Clock()
    store = make(clock=clock)
    await store.put(record("alice", "c1"))
    clock.now += 61
    assert await store.get("c1", "alice") is None
    assert await ids(store, owner="alice") == []


async def test_an_owner_at_its_bound_evicts_its_own_oldest(make: Make) -> None:
    store = make(max_entries=10, max_entries_per_owner=2)
    await store.put(record("bob", "b1"))
    for name in ("a1", "a2", "a3"):
        await store.put(record("alice", name))
    assert await ids(store, owner="alice") == ["a2", "a3"]
    assert await ids(store, owner="bob") == ["b1"]


async def test_a_record_too_large_is_not_kept(make: Make) -> None:
    store = make(max_bytes=1024)
    big = msgspec.structs.replace(record("alice", "c1"), messages=b"[" + b" " * 2000 + b"]")
    assert not await store.put(big)
    assert await store.get("c1", "alice") is None


async def test_a_full_store_takes_from_the_heaviest_owner(make: Make) -> None:
    store = make(max_entries=3)
    for owner, name in [("alice", "a1"), ("alice", "a2"), ("bob", "b1"), ("bob", "b2")]:
        await store.put(record(owner, name))
    assert await ids(store, owner="alice") == ["a1", "a2"]  # bob would weigh as much: his own
    assert await ids(store, owner="bob") == ["b2"]
    await store.put(record("carol", "c1"))
    assert await ids(store, owner="alice") == ["a2"]  # the heaviest loses its oldest
    assert await ids(store, owner="carol") == ["c1"]
