"""File contents in an S3-compatible object store (``batches.storage: s3``): AWS S3, or any
server that speaks its API (MinIO, Ceph, R2, …), through aiobotocore, the asyncio client of the
AWS SDK (this module is imported only when this storage is configured).

Each file is one object, ``{prefix}{file_id}`` in ``bucket``. A write streams the pieces as a
multipart upload, in parts of :data:`PART_BYTES` (S3's parts must be at least 5 MiB but the
last), or as one ``PutObject`` when the file is smaller than a part, so an upload is never held
whole in memory; on any failure — the 413 past ``limit`` included — the multipart upload is
aborted, so nothing is kept. A read streams the object a part at a time; a missing object reads
as empty, as the other contents do. A delete of a missing object is no error (S3's own
behaviour). A store that cannot be reached, or refuses (credentials, a missing bucket), is a
503 :class:`FileStoreUnavailable` naming the operation (never the credentials). The client is
made on first use and closed with :meth:`S3Contents.close`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from proxy.batches.contents import in_parts
from proxy.core.errors import GatewayError
from proxy.runtime.config import S3Config

PART_BYTES = 8 * 1024 * 1024
"""The bytes of one multipart-upload part (the last may be shorter)."""
READ_BYTES = 1024 * 1024
"""The most bytes one read yields."""
CLIENT_CONFIG = AioConfig(
    connect_timeout=10, read_timeout=60, retries={"mode": "standard", "max_attempts": 3}
)
"""The SDK's clocks and retries (its standard mode: three attempts with jittered backoff)."""


class FileStoreUnavailable(GatewayError):
    """The object store holding file contents cannot be reached or refused (503)."""

    status: ClassVar[int] = 503
    default_code: ClassVar[str] = "file_store_unavailable"


class S3Contents:
    """See the module docstring."""

    def __init__(self, config: S3Config) -> None:
        self._config = config
        self._stack: contextlib.AsyncExitStack | None = None
        self._client: Any = None

    async def _s3(self) -> Any:
        """The client, made on first use."""
        if self._client is None:
            config = self._config
            stack = contextlib.AsyncExitStack()
            self._client = await stack.enter_async_context(
                get_session().create_client(
                    "s3",
                    endpoint_url=config.endpoint_url,
                    region_name=config.region,
                    aws_access_key_id=config.access_key_id,
                    aws_secret_access_key=config.secret_access_key,
                    config=CLIENT_CONFIG,
                )
            )
            self._stack = stack
        return self._client

    def _key(self, file_id: str) -> str:
        return self._config.prefix + file_id

    async def write(self, file_id: str, pieces: AsyncIterator[bytes], limit: int) -> int:
        """See :meth:`~proxy.batches.contents.Contents.write`."""
        s3, bucket, key = await self._s3(), self._config.bucket, self._key(file_id)
        size = 0
        upload_id: str | None = None
        sent: list[dict[str, Any]] = []

        async def send(part: bytes) -> None:  # one part of the multipart upload
            answer = await _call(
                "write",
                s3.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=len(sent) + 1, Body=part
                ),
            )
            sent.append({"PartNumber": len(sent) + 1, "ETag": answer["ETag"]})

        try:
            held: bytes | None = None  # a part is sent once the next one shows it is not the last
            async for part in in_parts(pieces, limit, PART_BYTES):
                size += len(part)
                if held is not None:
                    if upload_id is None:
                        started = await _call(
                            "write", s3.create_multipart_upload(Bucket=bucket, Key=key)
                        )
                        upload_id = started["UploadId"]
                    await send(held)
                held = part
            if upload_id is None:  # one part at most: one put
                await _call("write", s3.put_object(Bucket=bucket, Key=key, Body=held or b""))
                return size
            if held:
                await send(held)
            await _call(
                "write",
                s3.complete_multipart_upload(
                    Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": sent}
                ),
            )
            return size
        except BaseException:
            if upload_id is not None:
                with contextlib.suppress(Exception):
                    await s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            raise

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        """See :meth:`~proxy.batches.contents.Contents.read`."""
        s3 = await self._s3()
        try:
            found = await _call(
                "read", s3.get_object(Bucket=self._config.bucket, Key=self._key(file_id))
            )
        except _Missing:
            return
        async with found["Body"] as body:
            while part := await body.read(READ_BYTES):
                yield part

    async def delete(self, file_id: str) -> None:
        """See :meth:`~proxy.batches.contents.Contents.delete`."""
        s3 = await self._s3()
        await _call("delete", s3.delete_object(Bucket=self._config.bucket, Key=self._key(file_id)))

    async def close(self) -> None:
        """Close the client, if one was made."""
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()


class _Missing(Exception):
    """The object does not exist."""


async def _call(operation: str, pending: Any) -> Any:
    """The answer of one S3 call; :class:`_Missing` for a missing object, a 503
    :class:`FileStoreUnavailable` for any other failure of the store."""
    try:
        return await pending
    except ClientError as failure:
        code = str(failure.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404"):
            raise _Missing from None
        message = f"the file store refused to {operation} ({code or 'an error'})"
        raise FileStoreUnavailable(message, should_retry=True) from None
    except BotoCoreError as failure:
        message = f"the file store cannot be reached to {operation} ({type(failure).__name__})"
        raise FileStoreUnavailable(message, should_retry=True) from None
