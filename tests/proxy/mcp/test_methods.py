"""The gateway's own pages over the servers' lists, and params checked with the SDK's types."""

from __future__ import annotations

import mcp.types as types
import pytest
import structlog

from proxy.core.canonical import ANONYMOUS
from proxy.core.metrics import Metrics
from proxy.mcp.calls import ToolCalls
from proxy.mcp.config import McpConfig, McpServerConfig
from proxy.mcp.faults import McpFault
from proxy.mcp.hub import McpHub, View
from proxy.mcp.methods import Methods
from proxy.runtime.config import parse_config
from proxy.state.policy import SharedState


def view() -> tuple[Methods, View]:
    metrics = Metrics()
    config = McpConfig(servers={"github": McpServerConfig(url="http://127.0.0.1:9/mcp")})
    hub = McpHub(config, structlog.get_logger(), metrics)
    upstream = hub.upstreams["github"]
    upstream.health = "up"
    upstream.tools = [types.Tool(name=f"t{n}", input_schema={"type": "object"}) for n in range(5)]
    state = SharedState(parse_config("").state, metrics)
    calls = ToolCalls(state, None, metrics, structlog.get_logger(), {}, hub.recent)
    return Methods(calls, 2, structlog.get_logger()), View(hub, ANONYMOUS, None)


async def test_lists_are_paged_with_an_opaque_cursor() -> None:
    methods, shown = view()
    names: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {} if cursor is None else {"cursor": cursor}
        page = await methods.answer(shown, "tools/list", params, None, "r")
        names += [tool["name"] for tool in page["tools"]]
        pages += 1
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert names == [f"github__t{n}" for n in range(5)]
    assert pages == 3


@pytest.mark.parametrize("cursor", ["not-base64!", "Y3Jvc3N3YXk6LTE=", "b3RoZXI6MQ=="])
async def test_a_cursor_the_gateway_never_made_is_invalid_params(cursor: str) -> None:
    methods, shown = view()
    with pytest.raises(McpFault) as refused:
        await methods.answer(shown, "tools/list", {"cursor": cursor}, None, "r")
    assert refused.value.code == types.INVALID_PARAMS


async def test_unknown_methods_and_bad_params() -> None:
    methods, shown = view()
    with pytest.raises(McpFault) as unknown:
        await methods.answer(shown, "sampling/createMessage", {}, None, "r")
    assert unknown.value.code == types.METHOD_NOT_FOUND
    with pytest.raises(McpFault) as bad:
        await methods.answer(shown, "tools/call", {"arguments": {}}, None, "r")
    assert bad.value.code == types.INVALID_PARAMS
    assert "name" in bad.value.message
    with pytest.raises(McpFault) as missing:
        await methods.answer(shown, "tools/call", {"name": "github__nope"}, None, "r")
    assert missing.value.code == types.INVALID_PARAMS
