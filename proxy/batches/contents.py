"""Where an uploaded or produced file's bytes live: the :class:`Contents` protocol, and its two
implementations — :class:`DatabaseContents` (the default: the gateway's database, in parts of at
most :data:`PART_BYTES`) and :class:`DirectoryContents` (one file per id under a directory).

A write consumes an async iterator of pieces as they come (an upload is never held whole in
memory) and stops with :class:`~proxy.core.errors.PayloadTooLarge` (413) as soon as more than
``limit`` bytes came; whatever it wrote is removed when it fails, whatever the failure. A read
yields the bytes in order, a part at a time. Deleting contents that do not exist is no error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO, Protocol

import sqlalchemy as sa

from proxy.core.errors import PayloadTooLarge
from proxy.db import Database
from proxy.db.schema import batch_file_parts

PART_BYTES = 1024 * 1024
"""The most bytes one part (one database row, one read) holds."""


class Contents(Protocol):
    """A file's bytes by its id (see the module docstring)."""

    async def write(self, file_id: str, pieces: AsyncIterator[bytes], limit: int) -> int:
        """Store what ``pieces`` yields as ``file_id``'s bytes; how many. A 413 past ``limit``."""
        ...

    def read(self, file_id: str) -> AsyncIterator[bytes]:
        """``file_id``'s bytes, in order, a part at a time."""
        ...

    async def delete(self, file_id: str) -> None:
        """Remove ``file_id``'s bytes (none: nothing happens)."""
        ...


def too_large(limit: int) -> PayloadTooLarge:
    """The 413 of an upload past ``limit`` bytes."""
    return PayloadTooLarge(f"the file is larger than this gateway's bound of {limit} bytes")


async def in_parts(
    pieces: AsyncIterator[bytes], limit: int, part_bytes: int = PART_BYTES
) -> AsyncIterator[bytes]:
    """``pieces`` regrouped into parts of ``part_bytes`` (the last shorter; one empty part for
    no bytes); a 413 as soon as more than ``limit`` bytes came."""
    size = 0
    held = bytearray()
    async for piece in pieces:
        size += len(piece)
        if size > limit:
            raise too_large(limit)
        held += piece
        while len(held) >= part_bytes:
            yield bytes(held[:part_bytes])
            del held[:part_bytes]
    if held or size == 0:
        yield bytes(held)


class DatabaseContents:
    """Contents as rows of ``batch_file_parts``, one transaction per part."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def write(self, file_id: str, pieces: AsyncIterator[bytes], limit: int) -> int:
        """See :meth:`Contents.write`."""
        await self._database.open()
        size = 0
        try:
            number = 0
            async for part in in_parts(pieces, limit):
                async with self._database.connect() as connection:
                    await connection.execute(
                        batch_file_parts.insert().values(file_id=file_id, part=number, data=part)
                    )
                number += 1
                size += len(part)
        except BaseException:
            await asyncio.shield(self.delete(file_id))
            raise
        return size

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        """See :meth:`Contents.read`."""
        await self._database.open()
        number = 0
        while True:
            query = sa.select(batch_file_parts.c.data).where(
                batch_file_parts.c.file_id == file_id, batch_file_parts.c.part == number
            )
            async with self._database.connect() as connection:
                data = (await connection.execute(query)).scalar()
            if data is None:
                return
            yield bytes(data)
            number += 1

    async def delete(self, file_id: str) -> None:
        """See :meth:`Contents.delete`."""
        await self._database.open()
        async with self._database.connect() as connection:
            await connection.execute(
                batch_file_parts.delete().where(batch_file_parts.c.file_id == file_id)
            )


class DirectoryContents:
    """Contents as files named by their id under ``directory`` (created, private to the
    process's user); a file is written under a temporary name and renamed when whole."""

    def __init__(self, directory: str | Path) -> None:
        self._directory = Path(directory)

    def _path(self, file_id: str) -> Path:
        if not file_id.replace("-", "").replace("_", "").isalnum():  # ids are the gateway's
            raise ValueError("not a file id")
        return self._directory / file_id

    async def write(self, file_id: str, pieces: AsyncIterator[bytes], limit: int) -> int:
        """See :meth:`Contents.write`."""
        path = self._path(file_id)
        partial = path.with_name(path.name + ".partial")
        await asyncio.to_thread(self._directory.mkdir, mode=0o700, parents=True, exist_ok=True)
        sink: BinaryIO = await asyncio.to_thread(partial.open, "wb")
        size = 0
        try:
            async for part in in_parts(pieces, limit):
                await asyncio.to_thread(sink.write, part)
                size += len(part)
            await asyncio.to_thread(sink.close)
            await asyncio.to_thread(os.replace, partial, path)
        except BaseException:
            sink.close()
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
            raise
        return size

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        """See :meth:`Contents.read`."""
        try:
            source: BinaryIO = await asyncio.to_thread(self._path(file_id).open, "rb")
        except FileNotFoundError:
            return
        try:
            while part := await asyncio.to_thread(source.read, PART_BYTES):
                yield part
        finally:
            source.close()

    async def delete(self, file_id: str) -> None:
        """See :meth:`Contents.delete`."""
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self._path(file_id).unlink)
