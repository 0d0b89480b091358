"""proxy/batches/native.py: which batches run on a provider's own batch API, and on which of
its endpoints — the batch's own, or the other chat wire — and which stay gateway-executed."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from proxy.batches.native import NativePlan, NativeRunner, plan_of
from proxy.core.canonical import ANONYMOUS, Budget, Principal
from proxy.core.metrics import Metrics
from proxy.providers.base import BatchAPIError, HttpRequest
from proxy.runtime.plugins import BUILTINS
from proxy.runtime.snapshot import Loader, Snapshot

CONFIG = """
providers:
  gpt: {type: openai, api_key: k}
  az: {type: azure, endpoint: "http://az.test", api_key: k}
  claude: {type: anthropic, api_key: k}
  mock: {type: mock}
  small: {type: openai, api_key: k, max_response_bytes: 1024}
models:
  gpt-batch: [{target: gpt/gpt-x, batch: native}]
  az-batch: [{target: az/gpt-y, batch: native}]
  claude-batch: [{target: claude/claude-x, batch: native}]
  mock-batch: [{target: mock/echo, batch: native}]
  online: [{target: gpt/gpt-x}]
  second: [{target: mock/echo, batch: native}, {target: claude/claude-z, batch: native}]
plugins: []
"""


@pytest.fixture
async def snapshot(tmp_path: Path) -> AsyncIterator[Snapshot]:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG)
    loader = Loader(path, BUILTINS, Metrics(), io.StringIO())
    built = Snapshot(loader.load(), lambda provider, error: None)
    yield built
    await built.close()


def lines(*models: str) -> list[tuple[str, bytes]]:
    return [(f"c{n}", json.dumps({"model": model}).encode()) for n, model in enumerate(models)]


@pytest.mark.parametrize(
    ("endpoint", "model", "plan"),
    [
        ("/v1/chat/completions", "gpt-batch", NativePlan("gpt", "gpt-x", "gpt-batch")),
        ("/v1/responses", "gpt-batch", NativePlan("gpt", "gpt-x", "gpt-batch")),
        ("/v1/embeddings", "az-batch", NativePlan("az", "gpt-y", "az-batch")),
        ("/v1/messages", "claude-batch", NativePlan("claude", "claude-x", "claude-batch")),
        (
            "/v1/chat/completions",
            "claude-batch",
            NativePlan("claude", "claude-x", "claude-batch", wire="/v1/messages"),
        ),
        (
            "/v1/messages",
            "az-batch",
            NativePlan("az", "gpt-y", "az-batch", wire="/v1/chat/completions"),
        ),
        ("/v1/messages", "second", NativePlan("claude", "claude-z", "second")),
        ("/v1/responses", "az-batch", None),  # Azure's batch API takes no Responses lines
        ("/v1/embeddings", "claude-batch", None),  # nor Anthropic's embeddings
        ("/v1/chat/completions", "mock-batch", None),  # the mock has no batch API
        ("/v1/chat/completions", "online", None),  # no deployment asks for it
    ],
)
def test_a_batch_runs_natively_where_a_native_deployment_takes_it(
    snapshot: Snapshot, endpoint: str, model: str, plan: NativePlan | None
) -> None:
    assert plan_of(snapshot, endpoint, lines(model, model), ANONYMOUS) == plan


def test_a_batch_of_several_models_or_none_is_gateway_executed(snapshot: Snapshot) -> None:
    chat = "/v1/chat/completions"
    assert plan_of(snapshot, chat, lines("gpt-batch", "az-batch"), ANONYMOUS) is None
    assert plan_of(snapshot, chat, [("c0", b"{}")], ANONYMOUS) is None


@pytest.mark.parametrize(
    ("principal", "native"),
    [
        (Principal(key_id="k", models=frozenset({"gpt-batch"})), True),
        (Principal(key_id="k", models=frozenset({"az-batch"})), False),  # not its model
        (Principal(key_id="k", budget=Budget(max_usd=5)), False),  # only lines bound a budget
        (Principal(key_id="k", team="t", team_budget=Budget(max_usd=5)), False),
        (Principal(key_id="k", user_budget=Budget(max_usd=5)), False),
        (Principal(key_id="k", guardrails=("no-secrets",)), False),  # only the chain runs them
    ],
)
def test_only_a_creator_free_of_budgets_and_guardrails_and_allowed_the_model_runs_natively(
    snapshot: Snapshot, principal: Principal, native: bool
) -> None:
    plan = plan_of(snapshot, "/v1/chat/completions", lines("gpt-batch"), principal)
    assert (plan is not None) == native


async def test_a_result_file_is_read_line_by_line_within_the_providers_bound(
    snapshot: Snapshot, aiohttp_server: AiohttpServer
) -> None:
    lines_sent = [b'{"n": %d}' % n for n in range(3)]

    async def results(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse()
        await answer.prepare(request)
        body = b"\n".join(lines_sent) + b"\n" + b"x" * 2000 + b"\n"
        for start in range(0, len(body), 5):  # lines cut across pieces
            await answer.write(body[start : start + 5])
        return answer

    app = web.Application()
    app.router.add_get("/results", results)
    server = await aiohttp_server(app)
    read = NativeRunner(lambda: snapshot)._reader(NativePlan("small", "m", "a"))
    request = HttpRequest(str(server.make_url("/results")), {}, b"", "GET")
    got: list[bytes] = []

    async def read_all() -> None:
        async for line in read(request, "reading"):
            got.append(line)

    with pytest.raises(BatchAPIError) as refused:
        await read_all()
    assert got == lines_sent  # then a line past max_response_bytes (1024)
    assert refused.value.lasting
    assert "1024" in str(refused.value)
