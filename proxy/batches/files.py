"""Files (``/v1/files``): their records in ``batch_files``, their bytes in a
:class:`~proxy.batches.contents.Contents`, each scoped to the key that made it.

A file is visible to its owner (the key id that uploaded it, or the batch's owner for the files
a batch produced; None: the gateway is open) and no one else: another key's file is a 404, as
one that does not exist. A record is written ``complete=False`` before the upload is read and
made complete once its bytes are all stored, so that a process that dies mid-upload leaves a
record no listing shows (and :meth:`FileStore.sweep` removes). A file given an ``expires_at``
(an upload's ``expires_after``, a batch's output under ``batches.retention_days``) is a 404 from
that instant on, as one deleted, and :meth:`FileStore.expired` names it for the retention sweep
to remove (:mod:`proxy.batches.retention`). The object answered is OpenAI's ``OpenAIFile``.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import sqlalchemy as sa

from proxy.batches.contents import Contents
from proxy.core.canonical import Principal
from proxy.core.errors import BadRequest, NotFound
from proxy.db import Database
from proxy.db.schema import batch_files

MAX_FILENAME = 256
EXPIRES_AFTER_FIELDS = ("expires_after[anchor]", "expires_after[seconds]")
"""The multipart fields of an upload's ``expires_after`` (OpenAI's ``FileExpirationAfter``)."""
MIN_EXPIRES_AFTER = 3600
MAX_EXPIRES_AFTER = 30 * 24 * 3600
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ENCODER = msgspec.json.Encoder()


class FileObject(msgspec.Struct, frozen=True):
    """OpenAI's file object (``OpenAIFile``)."""

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    object: str = "file"
    status: str = "processed"
    expires_at: int | None = None


def is_id(value: str) -> bool:
    """Whether ``value`` can be an id the gateway gave (a file's or a batch's): 1 to 64 ASCII
    letters, digits, ``-`` and ``_``; anything else is looked up nowhere."""
    return _ID.fullmatch(value) is not None


def expires_after_seconds(fields: dict[str, str]) -> int | None:
    """The seconds after its creation an upload expires, from its ``expires_after`` fields
    (:data:`EXPIRES_AFTER_FIELDS`; none given: None, kept until deleted). A 400 naming
    ``expires_after`` unless ``anchor`` is ``created_at`` and ``seconds`` an integer from
    :data:`MIN_EXPIRES_AFTER` (an hour) to :data:`MAX_EXPIRES_AFTER` (30 days)."""
    if not fields:
        return None
    anchor, seconds = (fields.get(name) for name in EXPIRES_AFTER_FIELDS)
    number = int(seconds) if seconds is not None and seconds.isdigit() else None
    return _expiry("expires_after", anchor, number)


def output_expires_after_seconds(policy: dict[str, Any] | None) -> int | None:
    """The seconds after their creation a batch's output and error files expire, from its
    ``output_expires_after`` (OpenAI's ``BatchFileExpirationAfter``; None: not given). A 400
    naming ``output_expires_after`` as :func:`expires_after_seconds` says."""
    if policy is None:
        return None
    seconds = policy.get("seconds")
    number = seconds if isinstance(seconds, int) and not isinstance(seconds, bool) else None
    return _expiry("output_expires_after", policy.get("anchor"), number)


def _expiry(param: str, anchor: object, seconds: int | None) -> int:
    if anchor != "created_at":
        raise BadRequest(f"{param}[anchor] must be 'created_at'", param=param)
    if seconds is None:
        raise BadRequest(f"{param}[seconds] must be an integer", param=param)
    if not MIN_EXPIRES_AFTER <= seconds <= MAX_EXPIRES_AFTER:
        message = (
            f"{param}[seconds] must be from {MIN_EXPIRES_AFTER} (an hour) to "
            f"{MAX_EXPIRES_AFTER} (30 days)"
        )
        raise BadRequest(message, param=param)
    return seconds


def new_file_id() -> str:
    """A fresh file id, as OpenAI spells them (``file-`` and 24 characters)."""
    return "file-" + uuid.uuid4().hex[:24]


class FileStore:
    """See the module docstring. ``clock`` gives the time in epoch seconds."""

    def __init__(
        self, database: Database, contents: Contents, clock: Callable[[], float] = time.time
    ) -> None:
        self._database = database
        self.contents = contents
        self._clock = clock

    async def create(
        self,
        owner: Principal,
        filename: str,
        purpose: str,
        pieces: AsyncIterator[bytes],
        limit: int,
        expires_after: int | None = None,
    ) -> FileObject:
        """Store a file of ``owner`` from ``pieces``, expiring ``expires_after`` seconds after
        its creation (None: kept until deleted); its object. A 413 past ``limit`` bytes (nothing
        is kept); whatever else ``pieces`` or the storage raise, likewise."""
        file_id = new_file_id()
        created = int(self._clock())
        expires = None if expires_after is None else created + expires_after
        filename = filename[:MAX_FILENAME].encode("utf-8", "replace").decode("utf-8")
        await self._database.open()
        async with self._database.connect() as connection:
            await connection.execute(
                batch_files.insert().values(
                    id=file_id,
                    owner=owner.key_id,
                    team=owner.team,
                    filename=filename,
                    purpose=purpose,
                    bytes=0,
                    created_at=datetime.fromtimestamp(created, UTC),
                    complete=False,
                    expires_at=None if expires is None else datetime.fromtimestamp(expires, UTC),
                )
            )
        try:
            size = await self.contents.write(file_id, pieces, limit)
        except BaseException:  # the write removed what it wrote (the Contents contract)
            async with self._database.connect() as connection:
                await connection.execute(batch_files.delete().where(batch_files.c.id == file_id))
            raise
        async with self._database.connect() as connection:
            await connection.execute(
                batch_files.update()
                .where(batch_files.c.id == file_id)
                .values(bytes=size, complete=True)
            )
        return FileObject(file_id, size, created, filename, purpose, expires_at=expires)

    async def get(self, file_id: str, owner: Principal) -> FileObject:
        """``owner``'s file ``file_id``; a 404 when it has none such."""
        if not is_id(file_id):
            raise _missing(file_id)
        await self._database.open()
        query = sa.select(batch_files).where(_visible(file_id, owner, self._now()))
        async with self._database.connect() as connection:
            row = (await connection.execute(query)).first()
        if row is None:
            raise _missing(file_id)
        return _object(row)

    async def page(
        self, owner: Principal, *, after: str | None, limit: int, purpose: str | None, desc: bool
    ) -> tuple[list[FileObject], bool]:
        """``owner``'s files after the one named ``after`` (none: from the first), at most
        ``limit``, in creation order (``desc``: newest first), only of ``purpose`` when given;
        and whether more follow. An ``after`` the owner does not have is a 404."""
        await self._database.open()
        where = [_owned(owner), batch_files.c.complete.is_(True), _alive(self._now())]
        if purpose is not None:
            where.append(batch_files.c.purpose == purpose)
        async with self._database.connect() as connection:
            if after is not None:
                if not is_id(after):
                    raise _missing(after)
                seq = (
                    await connection.execute(
                        sa.select(batch_files.c.seq).where(_visible(after, owner, self._now()))
                    )
                ).scalar()
                if seq is None:
                    raise _missing(after)
                where.append(batch_files.c.seq < seq if desc else batch_files.c.seq > seq)
            order = batch_files.c.seq.desc() if desc else batch_files.c.seq
            query = sa.select(batch_files).where(*where).order_by(order).limit(limit + 1)
            rows = list(await connection.execute(query))
        return [_object(row) for row in rows[:limit]], len(rows) > limit

    async def expire(self, file: FileObject, seconds: int) -> FileObject:
        """Make ``file`` expire ``seconds`` after its creation; the file as it then stands."""
        expires = file.created_at + seconds
        async with self._database.connect() as connection:
            await connection.execute(
                batch_files.update()
                .where(batch_files.c.id == file.id)
                .values(expires_at=datetime.fromtimestamp(expires, UTC))
            )
        return msgspec.structs.replace(file, expires_at=expires)

    async def read(self, file_id: str, owner: Principal) -> AsyncIterator[bytes]:
        """``owner``'s file's bytes (a 404 before the first when it has none such)."""
        await self.get(file_id, owner)
        return self.contents.read(file_id)

    async def delete(self, file_id: str, owner: Principal) -> None:
        """Delete ``owner``'s file ``file_id`` and its bytes; a 404 when it has none such."""
        await self.get(file_id, owner)
        await self._forget(file_id)

    async def sweep(self, older_than: float) -> int:
        """Remove the uploads left incomplete (their process died) that began more than
        ``older_than`` seconds ago; how many."""
        await self._database.open()
        before = datetime.fromtimestamp(self._clock() - older_than, UTC)
        query = sa.select(batch_files.c.id).where(
            batch_files.c.complete.is_(False), batch_files.c.created_at < before
        )
        async with self._database.connect() as connection:
            ids = list((await connection.execute(query)).scalars())
        for file_id in ids:
            await self._forget(file_id)
        return len(ids)

    async def expired(self, limit: int) -> list[str]:
        """At most ``limit`` ids of files whose ``expires_at`` passed, the longest expired
        first."""
        await self._database.open()
        query = (
            sa.select(batch_files.c.id)
            .where(batch_files.c.expires_at <= self._now())
            .order_by(batch_files.c.expires_at)
            .limit(limit)
        )
        async with self._database.connect() as connection:
            return list((await connection.execute(query)).scalars())

    async def remove(self, file_id: str) -> None:
        """Delete file ``file_id`` and its bytes, whoever owns it (none such: nothing
        happens; its bytes first, so that a failure leaves a record to remove again)."""
        await self._forget(file_id)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    async def _forget(self, file_id: str) -> None:
        await self.contents.delete(file_id)
        async with self._database.connect() as connection:
            await connection.execute(batch_files.delete().where(batch_files.c.id == file_id))


def encode_file(file: FileObject) -> bytes:
    """The file object's JSON; ``expires_at`` left out for a file that does not expire (OpenAI's
    schema has it an integer, never null)."""
    fields = msgspec.structs.asdict(file)
    if fields["expires_at"] is None:
        del fields["expires_at"]
    return _ENCODER.encode(fields)


def _owned(owner: Principal) -> sa.ColumnElement[bool]:
    key = owner.key_id
    return batch_files.c.owner.is_(None) if key is None else batch_files.c.owner == key


def _alive(now: datetime) -> sa.ColumnElement[bool]:
    return sa.or_(batch_files.c.expires_at.is_(None), batch_files.c.expires_at > now)


def _visible(file_id: str, owner: Principal, now: datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        batch_files.c.id == file_id,
        _owned(owner),
        batch_files.c.complete.is_(True),
        _alive(now),
    )


def _object(row: sa.Row[tuple[object, ...]]) -> FileObject:
    created: datetime = row.created_at
    expires: datetime | None = row.expires_at
    return FileObject(
        row.id,
        int(row.bytes),
        int(created.timestamp()),
        row.filename,
        row.purpose,
        expires_at=None if expires is None else int(expires.timestamp()),
    )


def _missing(file_id: str) -> NotFound:
    return NotFound(f"No such File object: {file_id[:80]}", param="file_id")
