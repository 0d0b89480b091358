"""proxy/http/dialect_route.py through a real app (``create_app`` on a config with the mock
provider): a whole answer in the dialect's shape, the body limit in the dialect's error shape, the
key checked before the body is read, a failure before the first byte as an error response, and
every request counted, logged and handed to the ``finished`` hooks. The streamed answer itself
is tested in test_sse_answer.py."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from proxy.core.canonical import Call
from proxy.core.plugin import FinishedRequest, Next
from proxy.core.reply import Reply
from proxy.server.app import RUNTIME, create_app

MODULE = __name__
LIMIT = 1024  # the least server.max_body_bytes may be
CONFIG = f"""\
server: {{access_log: true, max_body_bytes: {LIMIT}}}
providers:
  mock: {{type: mock, faults: true}}
models:
  default: [{{target: mock/echo}}]
plugins:
  - plugin: {MODULE}:Recorder
"""
MASTER = "master-key-" + "0123456789abcdef" * 2
OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
HELLO = [{"role": "user", "content": "hello there"}]
MakeClient = Callable[..., Awaitable[TestClient]]


class Recorder:
    """A plugin that keeps every :class:`FinishedRequest` its snapshot hands it."""

    def __init__(self) -> None:
        self.finished_requests: list[FinishedRequest] = []

    async def __call__(self, call: Call, next: Next) -> Reply:
        return await next(call)

    def finished(self, request: FinishedRequest) -> None:
        self.finished_requests.append(request)


class Gateway:
    """The test client of an app built from a config file, and the log stream it writes."""

    def __init__(self, client: TestClient, logs: io.StringIO) -> None:
        self.client = client
        self.logs = logs

    def access_line(self, request_id: str) -> dict:
        lines = [json.loads(text) for text in self.logs.getvalue().splitlines()]
        found = [x for x in lines if x.get("event") == "request" and x["request_id"] == request_id]
        assert len(found) == 1, found
        return found[0]

    def finished(self) -> list[FinishedRequest]:
        (hook,) = self.client.app[RUNTIME].snapshot.finishers
        return hook.__self__.finished_requests


async def _gateway(tmp_path: Path, aiohttp_client: MakeClient, text: str) -> Gateway:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    logs = io.StringIO()
    client = await aiohttp_client(create_app(path, log_stream=logs))
    return Gateway(client, logs)


@pytest.fixture
async def gateway(tmp_path: Path, aiohttp_client: MakeClient) -> Gateway:
    return await _gateway(tmp_path, aiohttp_client, CONFIG)


def _body(path: str, model: str = "default", **fields: object) -> dict:
    body: dict = {"model": model, "messages": HELLO, **fields}
    if path == ANTHROPIC:
        body["max_tokens"] = 32
    return body


def _oversized(path: str) -> bytes:
    body = _body(path)
    body["messages"] = [{"role": "user", "content": "x" * LIMIT}]
    return json.dumps(body).encode()


def _frames(raw: bytes) -> list[bytes]:
    return [frame for frame in raw.split(b"\n\n") if frame]


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
async def test_whole_answer_carries_the_request_id_and_the_dialects_content_type(
    gateway: Gateway, path: str
) -> None:
    response = await gateway.client.post(
        path, json=_body(path), headers={"x-request-id": "rid-whole"}
    )
    assert response.status == 200
    assert response.headers["x-request-id"] == "rid-whole"
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-crossway-model"] == "mock/echo"
    assert response.headers.getall("server") == ["crossway"]
    body = await response.json()
    if path == ANTHROPIC:
        assert response.headers["request-id"] == "rid-whole"
        assert body["type"] == "message"
        assert body["content"][0]["text"] == "hello there"
    else:
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["content"] == "hello there"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
async def test_body_over_max_body_bytes_is_a_413_in_the_dialects_error_shape(
    gateway: Gateway, path: str, chunked: bool
) -> None:
    data = _oversized(path)

    async def pieces() -> AsyncIterator[bytes]:  # no content-length to check first
        for start in range(0, len(data), 256):
            yield data[start : start + 256]

    response = await gateway.client.post(
        path,
        data=pieces() if chunked else data,
        headers={"content-type": "application/json", "x-request-id": "rid-big"},
    )
    assert response.status == 413
    assert response.headers["x-request-id"] == "rid-big"
    assert response.headers["content-type"] == "application/json"
    body = await response.json()
    if path == ANTHROPIC:
        assert body["type"] == "error"
        assert body["error"]["type"] == "request_too_large"
        assert body["request_id"] == "rid-big"
    else:
        assert body["error"]["code"] == "request_too_large"
        assert body["error"]["type"] == "invalid_request_error"
    assert gateway.access_line("rid-big")["error_code"] == "request_too_large"


async def test_the_key_is_checked_before_the_body_is_read(
    tmp_path: Path, aiohttp_client: MakeClient
) -> None:
    auth = (
        f'database: {{url: "sqlite:///{tmp_path}/crossway.db"}}\nauth: {{master_key: "{MASTER}"}}\n'
    )
    text = CONFIG.replace("plugins:\n", "plugins:\n  - auth: {}\n") + auth
    gateway = await _gateway(tmp_path, aiohttp_client, text)
    data = _oversized(OPENAI)
    headers = {"content-type": "application/json"}
    response = await gateway.client.post(OPENAI, data=data, headers=headers)
    assert response.status == 401  # not 413: the body was never read
    assert (await response.json())["error"]["type"] == "authentication_error"
    headers["authorization"] = f"Bearer {MASTER}"
    response = await gateway.client.post(OPENAI, data=data, headers=headers)
    assert response.status == 413
    response = await gateway.client.post(OPENAI, json=_body(OPENAI), headers=headers)
    assert response.status == 200


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
async def test_failure_before_the_first_byte_is_an_error_response_not_a_stream(
    gateway: Gateway, path: str
) -> None:
    response = await gateway.client.post(path, json=_body(path, "mock/error-503", stream=True))
    assert response.status == 503
    assert response.headers["content-type"] == "application/json"
    body = await response.json()
    if path == ANTHROPIC:
        assert (body["type"], body["error"]["type"]) == ("error", "overloaded_error")
    else:
        assert body["error"]["code"] == "upstream_overloaded"


async def test_every_request_is_counted_logged_and_handed_to_the_finished_hooks(
    gateway: Gateway,
) -> None:
    ok = await gateway.client.post(OPENAI, json=_body(OPENAI), headers={"x-request-id": "rid-a"})
    assert ok.status == 200
    bad = await gateway.client.post(OPENAI, data=b"{", headers={"x-request-id": "rid-b"})
    assert bad.status == 400
    line = gateway.access_line("rid-a")
    assert (line["dialect"], line["model"], line["provider"], line["status"]) == (
        "openai",
        "default",
        "mock",
        200,
    )
    assert line["stream"] is False
    assert line["input_tokens"] > 0
    line = gateway.access_line("rid-b")
    assert (line["model"], line["provider"], line["status"]) == (None, "none", 400)
    finished = {f.request_id: f for f in gateway.finished()}
    assert set(finished) == {"rid-a", "rid-b"}
    assert (finished["rid-a"].status, finished["rid-a"].provider) == (200, "mock")
    assert finished["rid-a"].dialect == "openai"
    assert finished["rid-b"].call is None
    assert finished["rid-b"].status == 400
    metrics = await (await gateway.client.get("/metrics")).text()
    labels = 'dialect="openai",model="default",provider="mock",status_class="2xx"'
    assert f"crossway_requests_total{{{labels}}} 1.0" in metrics
    labels = 'dialect="openai",model="none",provider="none",status_class="4xx"'
    assert f"crossway_requests_total{{{labels}}} 1.0" in metrics
