"""Reading a ``multipart/form-data`` request (audio and image uploads) within a byte bound.

:func:`read_form` streams the form part by part, never holding more than what it has read so
far, and stops as soon as the parts' bytes pass ``limit`` (``media.max_upload_bytes``):

- a body whose ``Content-Length`` is over ``limit`` is refused before any of it is read, and a
  chunked one as soon as its parts pass ``limit``: 413 ``request_too_large`` (the rest of the
  body is never read; the server closes the connection after the answer);
- a request that is not ``multipart/form-data`` (or has no boundary) is 400
  ``invalid_content_type``, one with a ``Content-Encoding`` 415, a nested multipart part or
  more than :data:`MAX_PARTS` parts, or a form that does not parse, 400 ``invalid_form``;
- the whole form must arrive within ``seconds`` (408 ``request_timeout``).

Text fields are decoded as UTF-8 (a field given twice becomes a list, in order, as
``timestamp_granularities[]`` is sent); a part with a file name is a
:class:`~proxy.core.canonical.MediaFile`, its bytes kept as sent.
"""

from __future__ import annotations

import asyncio

from aiohttp import BodyPartReader, web

from proxy.core.canonical import MediaFile, MultipartForm
from proxy.core.errors import BadRequest, PayloadTooLarge, RequestTimeout

MAX_PARTS = 256
"""The most parts a form may have (OpenAI's richest form, an image edit, has about twenty)."""

_CHUNK = 64 * 1024


async def read_form(request: web.Request, limit: int, seconds: float) -> MultipartForm:
    """The form of ``request``, read within ``limit`` bytes of parts and ``seconds``; the
    errors are in the module docstring."""
    header = request.headers.get("content-type", "").lower()
    if request.content_type != "multipart/form-data" or "boundary=" not in header:
        raise BadRequest(
            "this route takes a multipart/form-data body",
            code="invalid_content_type",
        )
    coding = request.headers.get("content-encoding", "identity").strip().lower()
    if coding != "identity":
        raise BadRequest(
            f"content-encoding {coding[:40]!r} is not supported on uploads",
            code="unsupported_content_encoding",
            status=415,
        )
    length = request.content_length
    if length is not None and length > limit:
        raise _too_large(limit)
    try:
        async with asyncio.timeout(seconds):
            return await _parts(request, limit)
    except TimeoutError:
        raise RequestTimeout("the request body was not received in time") from None
    except (ValueError, AssertionError) as exc:  # aiohttp's parser on a malformed form
        raise _malformed(str(exc)) from None


async def _parts(request: web.Request, limit: int) -> MultipartForm:
    """Every part of the form, counted against ``limit`` as it is read."""
    reader = await request.multipart()
    fields: dict[str, str | list[str]] = {}
    files: list[MediaFile] = []
    size = 0
    for _ in range(MAX_PARTS + 1):
        part = await reader.next()
        if part is None:
            return MultipartForm(fields=fields, files=files)
        if not isinstance(part, BodyPartReader):
            raise _malformed("a nested multipart part")
        name = part.name
        if not name:
            raise _malformed("a part without a name")
        pieces: list[bytes] = []
        while chunk := await part.read_chunk(_CHUNK):
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            pieces.append(chunk)
        data = b"".join(pieces)
        if part.filename is not None:
            kind = part.headers.get("content-type", "application/octet-stream")
            files.append(
                MediaFile(field=name, filename=part.filename, content_type=kind, data=data)
            )
            continue
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise _malformed(f"field {name[:64]!r} is not UTF-8 text") from None
        given = fields.get(name)
        if given is None:
            fields[name] = text
        elif isinstance(given, list):
            given.append(text)
        else:
            fields[name] = [given, text]
    raise _malformed(f"more than {MAX_PARTS} parts")


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"the upload exceeds the {limit}-byte limit (media.max_upload_bytes)")


def _malformed(detail: str) -> BadRequest:
    return BadRequest(f"the multipart form is malformed: {detail}", code="invalid_form")
