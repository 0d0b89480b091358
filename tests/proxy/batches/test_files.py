"""File records: a file is its owner's only, listed newest first with ``after``; an upload that
fails keeps nothing; an upload a stopped process left incomplete is never listed, and the sweep
removes it once it is old enough; a file given ``expires_after`` says when it expires and is a
404 from then on, named for the retention sweep; ``expires_after`` is OpenAI's (``created_at``,
an hour to 30 days) or a 400."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
import sqlalchemy as sa

from proxy.batches.contents import DatabaseContents
from proxy.batches.files import (
    FileObject,
    FileStore,
    encode_file,
    expires_after_seconds,
    output_expires_after_seconds,
)
from proxy.core.canonical import Principal
from proxy.core.errors import BadRequest, NotFound, PayloadTooLarge
from proxy.db import Database
from proxy.db.schema import batch_files
from tests.schemas import validate_in

OWNER = Principal(key_id="key-1", team="team-a")
OTHER = Principal(key_id="key-2")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(f"sqlite:///{tmp_path}/files.db")
    try:
        yield database
    finally:
        await database.close()


async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def test_files_are_their_owners_and_listed_newest_first(database: Database) -> None:
    files = FileStore(database, DatabaseContents(database))
    first = await files.create(OWNER, "a.jsonl", "batch", pieces(b"{}\n"), 100)
    second = await files.create(OWNER, "b.jsonl", "batch", pieces(b"{}\n{}\n"), 100)
    assert (second.bytes, second.filename, second.purpose) == (6, "b.jsonl", "batch")
    found, more = await files.page(OWNER, after=None, limit=1, purpose=None, desc=True)
    assert ([f.id for f in found], more) == ([second.id], True)
    found, more = await files.page(OWNER, after=second.id, limit=1, purpose=None, desc=True)
    assert ([f.id for f in found], more) == ([first.id], False)
    assert await files.page(OTHER, after=None, limit=10, purpose=None, desc=True) == ([], False)
    with pytest.raises(NotFound):
        await files.get(first.id, OTHER)
    with pytest.raises(NotFound):
        await files.get("../../etc", OWNER)
    await files.delete(first.id, OWNER)
    with pytest.raises(NotFound):
        await files.read(first.id, OWNER)


async def test_an_upload_past_the_bound_keeps_no_record(database: Database) -> None:
    files = FileStore(database, DatabaseContents(database))
    with pytest.raises(PayloadTooLarge):
        await files.create(OWNER, "big.jsonl", "batch", pieces(b"x" * 60, b"x" * 60), 100)
    assert await files.page(OWNER, after=None, limit=10, purpose=None, desc=True) == ([], False)


async def test_the_sweep_removes_only_old_incomplete_uploads(database: Database) -> None:
    clock = Clock()
    files = FileStore(database, DatabaseContents(database), clock)
    kept = await files.create(OWNER, "a.jsonl", "batch", pieces(b"{}\n"), 100)
    async with database.connect() as connection:
        for file_id, age in (("file-left-old", 7200), ("file-left-new", 60)):
            await connection.execute(
                batch_files.insert().values(
                    id=file_id,
                    owner=OWNER.key_id,
                    team=None,
                    filename="x",
                    purpose="batch",
                    bytes=0,
                    created_at=datetime.fromtimestamp(clock.now - age, UTC),
                    complete=False,
                )
            )
    assert await files.sweep(3600) == 1
    async with database.connect() as connection:
        left = set((await connection.execute(sa.select(batch_files.c.id))).scalars())
    assert left == {kept.id, "file-left-new"}


async def test_a_file_with_expires_after_is_gone_once_it_expired(database: Database) -> None:
    clock = Clock()
    files = FileStore(database, DatabaseContents(database), clock)
    brief = await files.create(OWNER, "a.jsonl", "batch", pieces(b"{}\n"), 100, 3600)
    kept = await files.create(OWNER, "b.jsonl", "batch", pieces(b"{}\n"), 100)
    assert (brief.expires_at, kept.expires_at) == (1_003_600, None)
    assert (await files.get(brief.id, OWNER)).expires_at == 1_003_600
    clock.now += 3599
    assert await files.expired(10) == []
    assert (await files.get(brief.id, OWNER)).id == brief.id
    clock.now += 1
    for gone in (files.get(brief.id, OWNER), files.read(brief.id, OWNER)):
        with pytest.raises(NotFound):
            await gone
    found, _ = await files.page(OWNER, after=None, limit=10, purpose=None, desc=True)
    assert [f.id for f in found] == [kept.id]
    assert await files.expired(10) == [brief.id]
    await files.remove(brief.id)
    await files.remove(brief.id)  # a second sweeper finds nothing to do
    assert await files.expired(10) == []
    assert (await files.get(kept.id, OWNER)).id == kept.id


@pytest.mark.parametrize(
    ("fields", "seconds"),
    [
        ({}, None),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"}, 3600),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "2592000"}, 2592000),
    ],
)
def test_expires_after_fields_are_read(fields: dict[str, str], seconds: int | None) -> None:
    assert expires_after_seconds(fields) == seconds


@pytest.mark.parametrize(
    "fields",
    [
        {"expires_after[anchor]": "last_active_at", "expires_after[seconds]": "3600"},
        {"expires_after[seconds]": "3600"},
        {"expires_after[anchor]": "created_at"},
        {"expires_after[anchor]": "created_at", "expires_after[seconds]": "3599"},
        {"expires_after[anchor]": "created_at", "expires_after[seconds]": "2592001"},
        {"expires_after[anchor]": "created_at", "expires_after[seconds]": "-5"},
    ],
)
def test_bad_expires_after_fields_are_a_400(fields: dict[str, str]) -> None:
    with pytest.raises(BadRequest) as refused:
        expires_after_seconds(fields)
    assert refused.value.param == "expires_after"


def test_a_batchs_output_expires_after_is_read_or_a_400() -> None:
    assert output_expires_after_seconds(None) is None
    assert output_expires_after_seconds({"anchor": "created_at", "seconds": 7200}) == 7200
    for bad in (
        {"anchor": "created_at", "seconds": "7200"},
        {"anchor": "created_at", "seconds": True},
        {"anchor": "created_at", "seconds": 60},
        {"anchor": "created_at"},
        {"anchor": "now", "seconds": 7200},
        {},
    ):
        with pytest.raises(BadRequest) as refused:
            output_expires_after_seconds(bad)
        assert refused.value.param == "output_expires_after"


@pytest.mark.parametrize("expires_at", [None, 1_003_600])
def test_a_file_object_is_openais_whether_or_not_it_expires(expires_at: int | None) -> None:
    body = msgspec.json.decode(
        encode_file(FileObject("file-1", 3, 1_000_000, "a.jsonl", "batch", expires_at=expires_at))
    )
    validate_in("openai-batches.openapi.json", "OpenAIFile", body)  # no null where none is allowed
    assert ("expires_at" in body) == (expires_at is not None)
    assert "status_details" not in body
