"""Schemathesis against a running gateway (a real ``crossway serve``): every route it serves.

The gateway runs the full chain (auth → limits → masking → cache → cost → fallback → retry →
balance, plus headers), a SQLite ledger, and only the offline mock provider (faults off): no
upstream answers 5xx, so every 5xx would be the gateway's own. Requests are drawn from the
public specs in tests/specs/ (the client dialects) and from the gateway's own document
(tests/e2e/gateway_openapi.py: admin, LiteLLM, spend, health, metrics, UI, any other path),
valid and invalid alike. Each drawn case is sent as drawn, then twisted
(tests/e2e/odd_inputs.py): integers beyond 64 bits and ``1e400`` in the JSON text, lone
surrogates, non-ASCII and control characters in strings, path segments, query parameters and
header values, odd or missing keys, other body encodings; and each dialect's valid body is sent
with one odd value in it, so that the whole chain (cache key, masking, cost) sees it. Admin and
LiteLLM key routes get the master key, the others a declared virtual key (the fuzzer cannot
revoke it).

Whatever is sent, the gateway answers below 500, with ``Server: crossway``, an error body in
JSON, and neither key in the answer; and it logs no unhandled error and no traceback. Each
target has a bounded, seeded number of examples (:data:`DIALECT_TARGETS`, :data:`SIDE_TARGETS`,
:data:`OWN_EXAMPLES`): about 1,800 requests, under a minute on a loaded 2-core machine.
:func:`test_every_route_is_a_target` fails when a route is added without one.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from proxy.server.app import create_app
from tests.e2e import odd_inputs as odd
from tests.e2e.gateway_openapi import ROUTES, document, route_templates, template
from tests.e2e.processes import Served, free_port, serve

SPECS = Path(__file__).resolve().parents[1] / "specs"
MASTER = "sk-master-fuzz-" + "0123456789abcdef" * 2
VIRTUAL = "sk-cw-fuzz-declared-" + "abcdefghij" * 3
KEYS = (MASTER, VIRTUAL)
CONFIG = """
server: {{port: {port}, access_log: false, require_auth_for_metrics: true,
         cors: {{allow_origins: ["https://app.example"]}}}}
database: {{url: "sqlite:///{data}/crossway.db"}}
auth:
  master_key: "{master}"
  cache_ttl: 5
  keys: [{{key: "{virtual}", alias: fuzz}}]
providers:
  openai: {{type: mock}}
  anthropic: {{type: mock}}
  mock: {{type: mock}}
models:
  chat: [{{target: mock/chat}}]
  fast: [{{target: openai/gpt-4o-mini}}, {{target: mock/fast}}]
plugins:
  - auth: {{}}
  - limits: {{}}
  - masking: {{}}
  - cache: {{}}
  - cost: {{}}
  - headers: {{forward: [x-trace-id]}}
  - fallback: {{chains: {{chat: [fast]}}}}
  - retry: {{retries: 1}}
  - balance: {{}}
"""


HI = [{"role": "user", "content": "hi"}]
DIALECT_TARGETS = (  # name, spec, operation, paths sent to, a valid body, examples
    ("chat", "openai-chat", "POST /chat/completions", ("/v1/chat/completions", "/chat/completions"),
     {"model": "chat", "messages": HI}, 30),
    ("orq", "openai-chat", "POST /completions", ("/v2/router/completions",),
     {"model": "chat", "prompt": "hi"}, 15),
    ("completions", "openai-chat", "POST /completions", ("/v1/completions", "/completions"),
     {"model": "chat", "prompt": "hi"}, 30),
    ("embeddings", "openai-chat", "POST /embeddings", ("/v1/embeddings", "/embeddings"),
     {"model": "mock/embed", "input": "hi"}, 25),
    ("messages", "anthropic-messages", "POST /v1/messages", ("/v1/messages",),
     {"model": "chat", "max_tokens": 16, "messages": HI}, 30),
    ("count_tokens", "anthropic-count-tokens-models", "POST /v1/messages/count_tokens",
     ("/v1/messages/count_tokens",), {"model": "chat", "messages": HI}, 25),
    ("bifrost", "bifrost-completions", "POST /v1/text/completions", ("/v1/text/completions",),
     {"model": "mock/chat", "text": "hi"}, 30),
    ("fabro", "fabro-completions", "POST /api/v1/completions", ("/api/v1/completions",),
     {"model": "chat", "messages": [{"role": "user", "content": [{"kind": "text", "data": "hi"}]}]},
     20),
    ("responses", "openai-responses", "POST /responses", ("/v1/responses", "/responses"),
     {"model": "chat", "input": "hi"}, 30),
    ("speech", "openai-media", "POST /audio/speech", ("/v1/audio/speech", "/audio/speech"),
     {"model": "mock/tts", "voice": "alloy", "input": "hi"}, 10),
    ("images", "openai-media", "POST /images/generations",
     ("/v1/images/generations", "/images/generations"), {"model": "mock/img", "prompt": "hi"}, 10),
    ("moderations", "openai-media", "POST /moderations", ("/v1/moderations", "/moderations"),
     {"model": "mock/omni", "input": "hi"}, 10),
    # Uploads: the job sends JSON, so these check the refusal of what is not a form.
    ("transcriptions", "openai-media", "POST /audio/transcriptions",
     ("/v1/audio/transcriptions", "/audio/transcriptions"), None, 4),
    ("translations", "openai-media", "POST /audio/translations",
     ("/v1/audio/translations", "/audio/translations"), None, 4),
    ("image edits", "openai-media", "POST /images/edits", ("/v1/images/edits", "/images/edits"),
     None, 4),
)  # fmt: skip
SIDE_TARGETS = (  # the same, for the routes beside the dialects (no body but an update's)
    ("stored response", "openai-responses", "GET /responses/{response_id}",
     ("/v1/responses/{}", "/responses/{}"), None, 15),
    ("delete stored response", "openai-responses", "DELETE /responses/{response_id}",
     ("/v1/responses/{}", "/responses/{}"), None, 15),
    ("response input items", "openai-responses", "GET /responses/{response_id}/input_items",
     ("/v1/responses/{}/input_items", "/responses/{}/input_items"), None, 15),
    ("cancel response", "openai-responses", "POST /responses/{response_id}/cancel",
     ("/v1/responses/{}/cancel", "/responses/{}/cancel"), None, 10),
    ("response input tokens", "openai-responses", "POST /responses/input_tokens",
     ("/v1/responses/input_tokens", "/responses/input_tokens"), None, 20),
    ("compact response", "openai-responses", "POST /responses/compact",
     ("/v1/responses/compact", "/responses/compact"), None, 10),
    ("models", "openai-chat", "GET /models", ("/v1/models", "/models"), None, 8),
    ("stored chat completions", "openai-stored-chat", "GET /chat/completions",
     ("/v1/chat/completions", "/chat/completions"), None, 15),
    ("stored chat completion", "openai-stored-chat", "GET /chat/completions/{completion_id}",
     ("/v1/chat/completions/{}", "/chat/completions/{}"), None, 10),
    ("update stored chat completion", "openai-stored-chat",
     "POST /chat/completions/{completion_id}", ("/v1/chat/completions/{}", "/chat/completions/{}"),
     {"metadata": {"k": "v"}}, 15),
    ("delete stored chat completion", "openai-stored-chat",
     "DELETE /chat/completions/{completion_id}",
     ("/v1/chat/completions/{}", "/chat/completions/{}"), None, 10),
    ("stored chat messages", "openai-stored-chat",
     "GET /chat/completions/{completion_id}/messages",
     ("/v1/chat/completions/{}/messages", "/chat/completions/{}/messages"), None, 10),
    ("model", "anthropic-count-tokens-models", "GET /v1/models/{model_id}",
     ("/v1/models/{}", "/models/{}"), None, 15),
    ("upload file", "openai-batches", "POST /files", ("/v1/files", "/files"), None, 10),
    ("files", "openai-batches", "GET /files", ("/v1/files", "/files"), None, 8),
    ("file", "openai-batches", "GET /files/{file_id}", ("/v1/files/{}", "/files/{}"), None, 6),
    ("delete file", "openai-batches", "DELETE /files/{file_id}", ("/v1/files/{}", "/files/{}"),
     None, 6),
    ("file content", "openai-batches", "GET /files/{file_id}/content",
     ("/v1/files/{}/content", "/files/{}/content"), None, 6),
    ("create batch", "openai-batches", "POST /batches", ("/v1/batches", "/batches"),
     {"input_file_id": "file-x", "endpoint": "/v1/chat/completions", "completion_window": "24h"},
     10),
    ("batches", "openai-batches", "GET /batches", ("/v1/batches", "/batches"), None, 8),
    ("batch", "openai-batches", "GET /batches/{batch_id}", ("/v1/batches/{}", "/batches/{}"),
     None, 6),
    ("cancel batch", "openai-batches", "POST /batches/{batch_id}/cancel",
     ("/v1/batches/{}/cancel", "/batches/{}/cancel"), None, 6),
)  # fmt: skip
OWN_EXAMPLES = {"POST /v1/rerank": 10, "POST /v2/rerank": 4, "POST /rerank": 4,
                "POST /admin/reload": 4, "GET /admin/spend": 20, "GET /admin/spend/logs": 20,
                "GET /v1/spend": 20, "GET /spend/logs": 20, "GET /key/info": 15}  # fmt: skip
"""The gateway's own routes: these, else 15 with a path parameter or a body, else 6."""
TWISTS = ("path", "query", "header", "key", "body", "encoding")
OWN_HEADERS = frozenset({*odd.KEY_HEADERS, "content-type", "content-length", "host"})
"""Headers the job sets itself (a spec's security scheme would add a key the gateway refuses)."""


class Target(NamedTuple):
    """Requests of one operation, sent to one of ``paths`` (the operation's path parameters
    filled in order) with the ``key`` of its caller, ``examples`` times; ``valid`` is a body
    the route serves (a dialect's), sent with one odd value in it besides each case."""

    operation: Any
    paths: tuple[str, ...]
    key: str
    examples: int
    valid: dict[str, Any] | None = None


class Request(NamedTuple):
    method: str
    target: str
    headers: list[tuple[str, bytes]]
    body: bytes | None


class Answer(NamedTuple):
    status: int
    headers: http.client.HTTPMessage
    body: bytes


def _targets() -> dict[str, Target]:
    specs: dict[str, Any] = {}

    def operation(spec: str, route: str) -> Any:
        if spec not in specs:
            specs[spec] = schemathesis.openapi.from_path(SPECS / f"{spec}.openapi.json")
        method, path = route.split(" ", 1)
        return specs[spec][path][method]

    targets = {
        name: Target(operation(spec, route), paths, VIRTUAL, examples, valid)
        for name, spec, route, paths, valid, examples in (*DIALECT_TARGETS, *SIDE_TARGETS)
    }
    own = schemathesis.openapi.from_dict(document())
    for route in ROUTES:
        method, path = route.split(" ", 1)
        master = path.startswith(("/admin", "/key/", "/spend/logs", "/metrics"))
        key = MASTER if master and path != "/key/info" else VIRTUAL
        examples = OWN_EXAMPLES.get(route, 15 if "{" in path or method != "GET" else 6)
        targets[route] = Target(own[path][method], (path,), key, examples)
    return targets


TARGETS = _targets()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("fuzz")
    port = free_port()
    config = data / "gateway.yaml"
    config.write_text(CONFIG.format(port=port, data=data, master=MASTER, virtual=VIRTUAL))
    with serve(config, port, 1, data / "gateway.log") as gateway:
        yield gateway


@pytest.fixture(scope="module")
def strategies() -> dict[str, st.SearchStrategy[Any]]:
    """Each target's cases: schema-valid and schema-violating, drawn alike."""
    return {
        name: st.one_of(
            target.operation.as_strategy(GenerationMode.POSITIVE),
            target.operation.as_strategy(GenerationMode.NEGATIVE),
        )
        for name, target in TARGETS.items()
    }


def request_of(
    data: st.DataObject, target: Target, case: Any, body: Any, twists: frozenset[str]
) -> Request:
    """``case`` with ``body`` as a request to one of the target's paths, with ``twists``
    applied: an odd path segment, query parameter or header, an odd or missing key, an odd
    value in the body, the body in another encoding."""
    path = data.draw(st.sampled_from(target.paths), label="path")
    segments = [str(value) for value in (case.path_parameters or {}).values()]
    if "path" in twists:
        segments = [odd.path_segment(data.draw(odd.odd_text, label="segment"))] * len(segments)
    filled = iter(segments)
    path = re.sub(r"{[^}]*}", lambda _: next(filled, "x"), path)
    query = [(str(name), _text(value)) for name, value in (case.query or {}).items()]
    if "query" in twists:
        names = [name for name, _ in query] + ["key", "from", "to", "limit", "start_date", "user"]
        query.append((data.draw(st.sampled_from(names)), data.draw(odd.odd_query_value)))
    if query:
        path += "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in query)
    headers = [("content-type", b"application/json")]
    headers += [
        (name, _text(value).encode("utf-8", "surrogatepass"))
        for name, value in case.headers.items()
        if name.lower() not in OWN_HEADERS
    ]
    if "key" not in twists:
        headers.append(("authorization", f"Bearer {target.key}".encode()))
    elif data.draw(st.booleans(), label="odd key"):
        headers.append(
            (data.draw(st.sampled_from(odd.KEY_HEADERS)), data.draw(odd.odd_header_value))
        )
    if "header" in twists:
        headers.append(
            (data.draw(st.sampled_from(odd.HEADERS_READ)), data.draw(odd.odd_header_value))
        )
    raw = _body(data, body, twists, headers)
    return Request(case.method.upper(), path, headers, raw)


def _body(data: st.DataObject, body: Any, twists: frozenset[str], headers: list) -> bytes | None:
    """``body`` as bytes (a schemathesis case's raw bytes as they are), with the twists."""
    if body is None or isinstance(body, bytes):
        return body
    if "body" in twists:
        body = data.draw(odd.twisted_body(body))
    text = odd.json_text(body, ascii_only="encoding" in twists and data.draw(st.booleans()))
    encoding = data.draw(st.sampled_from(odd.ENCODINGS)) if "encoding" in twists else "utf-8"
    raw, announced = odd.encoded(text, encoding)
    headers[:] = [(k, v) for k, v in headers if k not in announced]
    headers += [(k, v.encode()) for k, v in announced.items()]
    return raw


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return ",".join(_text(item) for item in value)
    return json.dumps(value)


def send(port: int, request: Request) -> Answer:
    """``request`` on a fresh connection, its header values sent as the bytes given."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.putrequest(request.method, request.target, skip_accept_encoding=True)
        for name, value in request.headers:
            connection.putheader(name, value)
        if request.body is not None:
            connection.putheader("content-length", str(len(request.body)))
        connection.endheaders(request.body)
        response = connection.getresponse()
        return Answer(response.status, response.headers, response.read())
    finally:
        connection.close()


def check(answer: Answer, label: str) -> None:
    """What every answer keeps to, whatever was sent."""
    text = answer.body.decode("utf-8", "replace")
    assert answer.status < 500, (label, answer.status, text[:500])
    assert answer.headers.get("server") == "crossway", (label, answer.headers)
    head = str(answer.headers)
    for key in KEYS:
        assert key not in text, (label, "a key in the body")
        assert key not in head, (label, "a key in a header")
    if answer.status >= 400:
        assert answer.headers.get("content-type", "").startswith("application/json"), label
        json.loads(answer.body)


@pytest.mark.parametrize("name", list(TARGETS))
def test_no_request_gets_a_5xx(name: str, served: Served, strategies: dict[str, Any]) -> None:
    """Per example: the case as drawn, the case twisted, and (a dialect's) its valid body with
    one odd value (so that the whole chain — cache key, masking, cost — sees it)."""
    target = TARGETS[name]

    @seed(20261206)
    @settings(
        max_examples=target.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case = data.draw(strategies[name], label="case")
        body = None if type(case.body).__name__ == "NotSet" else case.body
        twists = data.draw(st.frozensets(st.sampled_from(TWISTS), min_size=1), label="twists")
        requests = [
            request_of(data, target, case, body, frozenset()),
            request_of(data, target, case, body, twists),
        ]
        if target.valid is not None:
            valid = {**target.valid, "stream": data.draw(st.booleans(), label="stream")}
            requests.append(request_of(data, target, case, valid, frozenset({"body"})))
        for request in requests:
            check(send(served.port, request), f"{request.method} {request.target}")

    run()


def test_every_route_is_a_target(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        CONFIG.format(port=free_port(), data=tmp_path, master=MASTER, virtual=VIRTUAL)
    )
    served_routes = route_templates(create_app(config))
    targeted = {
        f"{target.operation.method.upper()} {template(path)}"
        for target in TARGETS.values()
        for path in target.paths
    }
    assert served_routes - targeted == set(), "routes the schemathesis job never calls"


def test_the_gateway_logged_no_unhandled_error(served: Served) -> None:
    """Runs after the fuzzing (pytest keeps a module's order)."""
    log = served.logs.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert served.log_lines("unhandled_error") == []
    rejected = [line for line in served.log_lines("http_rejected") if line.get("status", 0) >= 500]
    assert rejected == []
