"""Reading an upload's form: fields and files as sent, repeated fields in order, and every way a
form can be refused (too large, not multipart, encoded, malformed, too many parts)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.core.errors import GatewayError
from proxy.http.multipart import MAX_PARTS, read_form

LIMIT = 4096

Client = Callable[[web.Application], Awaitable[Any]]


async def _served(aiohttp_client: Client) -> Any:
    """A test server whose one route answers the form it read as JSON, or the error."""

    async def route(request: web.Request) -> web.Response:
        try:
            form = await read_form(request, LIMIT, 5.0)
        except GatewayError as error:
            return web.json_response({"code": error.code}, status=error.status)
        files = [[f.field, f.filename, f.content_type, f.data.decode()] for f in form.files]
        return web.json_response({"fields": form.fields, "files": files})

    app = web.Application()
    app.router.add_post("/", route)
    return await aiohttp_client(app)


async def test_fields_and_files_are_read_as_sent(aiohttp_client: Client) -> None:
    client = await _served(aiohttp_client)
    form = aiohttp.FormData()
    form.add_field("model", "whisper-1")
    form.add_field("timestamp_granularities[]", "word")
    form.add_field("timestamp_granularities[]", "segment")
    form.add_field("file", b"RIFF....", filename="a.wav", content_type="audio/wav")
    answer = await client.post("/", data=form)
    assert answer.status == 200
    assert await answer.json() == {
        "fields": {"model": "whisper-1", "timestamp_granularities[]": ["word", "segment"]},
        "files": [["file", "a.wav", "audio/wav", "RIFF...."]],
    }


async def test_an_announced_length_over_the_bound_is_413(aiohttp_client: Client) -> None:
    client = await _served(aiohttp_client)
    form = aiohttp.FormData()
    form.add_field("file", b"x" * (LIMIT + 1), filename="a.wav")
    answer = await client.post("/", data=form)
    assert answer.status == 413
    assert (await answer.json())["code"] == "request_too_large"


async def test_a_chunked_body_is_refused_once_its_parts_pass_the_bound(
    aiohttp_client: Client,
) -> None:
    client = await _served(aiohttp_client)
    head = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'
        + b"x" * (LIMIT + 1)
        + b"\r\n--b--\r\n"
    )

    async def chunks() -> AsyncIterator[bytes]:
        yield head

    headers = {"content-type": "multipart/form-data; boundary=b"}
    answer = await client.post("/", data=chunks(), headers=headers)
    assert answer.status == 413


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({"content-type": "application/json"}, b"{}", 400, "invalid_content_type"),
        ({"content-type": "multipart/form-data"}, b"", 400, "invalid_content_type"),
        (
            {"content-type": "multipart/form-data; boundary=b", "content-encoding": "gzip"},
            b"",
            415,
            "unsupported_content_encoding",
        ),
        (
            {"content-type": "multipart/form-data; boundary=b"},
            b"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--\r\n",
            400,
            "invalid_form",
        ),
        (
            {"content-type": "multipart/form-data; boundary=b"},
            b'--b\r\nContent-Disposition: form-data; name="f"\r\n\r\n\xff\xfe\r\n--b--\r\n',
            400,
            "invalid_form",
        ),
    ],
    ids=["json", "no-boundary", "gzip", "unnamed-part", "not-utf8"],
)
async def test_a_form_that_cannot_be_read_is_refused(
    aiohttp_client: Client, headers: dict[str, str], body: bytes, status: int, code: str
) -> None:
    client = await _served(aiohttp_client)
    answer = await client.post("/", data=body, headers=headers)
    assert answer.status == status
    assert (await answer.json())["code"] == code


async def test_too_many_parts_are_refused(aiohttp_client: Client) -> None:
    client = await _served(aiohttp_client)
    part = b'--b\r\nContent-Disposition: form-data; name="f"\r\n\r\n\r\n'

    async def chunks() -> AsyncIterator[bytes]:  # chunked: no length to refuse it on
        yield part * (MAX_PARTS + 1) + b"--b--\r\n"

    headers = {"content-type": "multipart/form-data; boundary=b"}
    answer = await client.post("/", data=chunks(), headers=headers)
    assert answer.status == 400
    assert (await answer.json())["code"] == "invalid_form"
