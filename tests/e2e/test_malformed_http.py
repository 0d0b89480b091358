"""Requests aiohttp's parser rejects, answered by the gateway (proxy/aiohttp_ext/server.py), end to
end.

The gateway runs as ``crossway serve`` does, through
:class:`proxy.aiohttp_ext.server.GatewayRunner`; raw sockets send what no HTTP client library would.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from proxy.aiohttp_ext.server import GatewayRunner
from proxy.http.rejections import rejection_answers
from proxy.server.app import DRAIN, METRICS, RUNTIME, create_app
from tests.proxy.dialects.adapters.gateway import MOCK_PROVIDERS

SECRET = "sk-client-secret-0123456789abcdefXYZ"
BAD_REQUESTS = {
    "control-byte-in-header": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
        b"Authorization: Bearer " + SECRET.encode() + b"\x01\r\nContent-Length: 2\r\n\r\n{}"
    ),
    "bad-request-line": b"GET /v1/models HTTP/1.1 " + SECRET.encode() + b"\r\nHost: gw\r\n\r\n",
    "bad-version": b"GET /v1/models HTTP/7." + SECRET.encode() + b"\r\n\r\n",
    "header-too-long": b"GET /v1/models HTTP/1.1\r\nX-Key: " + SECRET.encode() * 400 + b"\r\n\r\n",
    "bad-chunked-body": (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz" + SECRET.encode() + b"\r\n"
    ),
}


class Served:
    def __init__(self, host: str, port: int, logs: io.StringIO) -> None:
        self.host, self.port, self.logs = host, port, logs

    async def send(self, raw: bytes) -> bytes:
        """Send ``raw`` on a fresh connection; everything the gateway answers before closing."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        writer.write(raw)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        return answer


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    config = tmp_path / "gateway.yaml"
    config.write_text(MOCK_PROVIDERS)
    logs = io.StringIO()
    app = create_app(config, log_stream=logs)
    runner = GatewayRunner(
        app,
        on_rejected=rejection_answers(app[METRICS], lambda: app[RUNTIME].snapshot.logger),
        drain=app[DRAIN],
        handler_cancellation=True,
        access_log=None,
    )
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield Served("127.0.0.1", runner.addresses[0][1], logs)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("raw", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
async def test_a_malformed_request_gets_an_openai_error_that_echoes_nothing(
    served: Served, raw: bytes, capfd: pytest.CaptureFixture[str]
) -> None:
    answer = await served.send(raw)
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    assert status_line.split()[1] == "400"  # aiohttp answers these as HTTP/1.0
    assert headers["content-type"] == "application/json"
    assert headers["server"] == "crossway"
    assert headers["x-request-id"]
    assert json.loads(body)["error"] == {
        "message": "malformed HTTP request",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_http_request",
    }
    assert SECRET.encode() not in answer
    [line] = [json.loads(x) for x in served.logs.getvalue().splitlines() if "http_rejected" in x]
    assert line["status"] == 400
    assert line["level"] == "warning"
    assert SECRET not in served.logs.getvalue()
    out, err = capfd.readouterr()
    assert SECRET not in out + err
    assert "Traceback" not in err


async def test_rejections_are_counted_and_routed_answers_carry_no_version_banner(
    served: Served,
) -> None:
    for raw in BAD_REQUESTS.values():
        await served.send(raw)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{served.host}:{served.port}/metrics") as response,
    ):
        metrics = await response.text()
        assert response.headers["Server"] == "crossway"
    count = f'crossway_http_rejected_total{{status="400"}} {float(len(BAD_REQUESTS))}'
    assert count in metrics


@pytest.mark.parametrize(
    "path", ["/%0A", "/v1/models/%0A", "/admin/keys/%0A%7B", "/ui/%0A", "/x%0D%0Ay", "/%00"]
)
async def test_a_path_with_a_control_character_is_the_gateways_404(
    served: Served, path: str
) -> None:
    """A newline in a decoded path escaped every route pattern, the catch-all's too: aiohttp's
    own 404, text/plain, with its version banner."""
    answer = await served.send(
        f"GET {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n".encode()
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    assert status_line.split()[1] == "404"
    assert headers["server"] == "crossway"
    assert json.loads(body)["error"]["code"] == "not_found"
