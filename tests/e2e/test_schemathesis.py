"""Schemathesis against the running gateway (a real ``crossway serve`` process), per dialect route.

Generated from the client dialects' OpenAPI schemas in tests/specs/, valid and invalid bodies
alike; each route gets a bounded, seeded run (``CASES`` examples). Whatever a client sends, the
gateway answers in JSON with a status below 500, and never echoes a key it was sent.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "tests" / "specs"
CASES = 100
CLIENT_KEY = "sk-fuzz-client-0123456789abcdef"
CONFIG = """
server: {{port: {port}, access_log: false}}
providers:
  openai: {{type: mock}}
  anthropic: {{type: mock}}
  mock: {{type: mock}}
"""


def _operations(name: str, base: str, *routes: tuple[str, str]) -> list[tuple[str, object, str]]:
    schema = schemathesis.openapi.from_path(SPECS / name)
    return [(f"{method} {path}", schema[path][method], base) for path, method in routes]


OPERATIONS = [
    *_operations(
        "openai-chat.openapi.json",
        "/v1",
        ("/chat/completions", "POST"),
        ("/completions", "POST"),
        ("/models", "GET"),
    ),
    *_operations("anthropic-messages.openapi.json", "", ("/v1/messages", "POST")),
    *_operations("bifrost-completions.openapi.json", "", ("/v1/text/completions", "POST")),
    *_operations("fabro-completions.openapi.json", "", ("/api/v1/completions", "POST")),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    config = tmp_path_factory.mktemp("fuzz") / "gateway.yaml"
    config.write_text(CONFIG.format(port=port))
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health/live", timeout=2):
                break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the gateway did not start: {process.stderr.read()!r}")
            time.sleep(0.05)  # polling for readiness with a bounded deadline
    yield url
    process.terminate()
    _, stderr = process.communicate(timeout=30)
    assert b"Traceback" not in stderr, stderr[-2000:]


@pytest.mark.parametrize(
    ("operation", "base"), [op[1:] for op in OPERATIONS], ids=[op[0] for op in OPERATIONS]
)
@seed(20261201)
@settings(max_examples=CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_requests_never_get_a_5xx(
    operation: object, base: str, gateway: str, data: st.DataObject
) -> None:
    case: schemathesis.Case = data.draw(operation.as_strategy())  # type: ignore[attr-defined]
    response = case.call(
        base_url=gateway + base, headers={"authorization": f"Bearer {CLIENT_KEY}"}, timeout=30
    )
    assert response.status_code < 500, (response.status_code, response.text[:500])
    content_type = response.headers["content-type"][0]
    assert content_type.startswith(("application/json", "text/event-stream")), content_type
    assert CLIENT_KEY not in response.text
    assert response.headers["server"] == ["crossway"]
