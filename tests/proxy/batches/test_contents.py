"""File contents in the database and in a directory: written as they come in parts, read back
in order, refused past the bound with nothing left behind, deleted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.batches.contents import PART_BYTES, Contents, DatabaseContents, DirectoryContents
from proxy.core.errors import PayloadTooLarge
from proxy.db import Database


@pytest.fixture(params=["database", "directory"])
async def contents(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Contents]:
    if request.param == "directory":
        yield DirectoryContents(tmp_path / "files")
        return
    database = Database(f"sqlite:///{tmp_path}/files.db")
    try:
        yield DatabaseContents(database)
    finally:
        await database.close()


async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def read(contents: Contents, file_id: str) -> bytes:
    return b"".join([part async for part in contents.read(file_id)])


async def test_what_is_written_in_pieces_is_read_back_whole(contents: Contents) -> None:
    data = bytes(range(256)) * (PART_BYTES // 256 * 2 + 3)  # over two parts
    chunks = [data[i : i + 70_001] for i in range(0, len(data), 70_001)]
    assert await contents.write("file-a", pieces(*chunks), len(data)) == len(data)
    assert await read(contents, "file-a") == data
    assert await contents.write("file-empty", pieces(), 10) == 0
    assert await read(contents, "file-empty") == b""


async def test_an_upload_past_the_bound_is_refused_and_leaves_nothing(
    contents: Contents,
) -> None:
    consumed = []

    async def endless() -> AsyncIterator[bytes]:
        while True:
            consumed.append(1)
            yield b"x" * 1000

    with pytest.raises(PayloadTooLarge):
        await contents.write("file-big", endless(), PART_BYTES + 10)
    assert len(consumed) == (PART_BYTES + 10) // 1000 + 1  # it stopped at the bound
    assert await read(contents, "file-big") == b""


async def test_deleted_contents_are_gone_and_deleting_twice_is_no_error(
    contents: Contents,
) -> None:
    await contents.write("file-d", pieces(b"abc"), 10)
    await contents.delete("file-d")
    await contents.delete("file-d")
    assert await read(contents, "file-d") == b""


async def test_a_directory_refuses_a_name_that_is_not_an_id(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="file id"):
        await DirectoryContents(tmp_path / "files").delete("../escape")
