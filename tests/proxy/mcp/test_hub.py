"""What one caller sees of the configured servers: names prefixed or not, grants applied, a
server that is down left out."""

from __future__ import annotations

import mcp.types as types
import structlog

from proxy.core.canonical import ANONYMOUS, Principal
from proxy.core.metrics import Metrics
from proxy.mcp.config import McpConfig, McpServerConfig
from proxy.mcp.hub import McpHub, View


def hub() -> McpHub:
    config = McpConfig(
        servers={
            "github": McpServerConfig(url="http://127.0.0.1:9/mcp"),
            "files": McpServerConfig(transport="stdio", command=("true",)),
        }
    )
    built = McpHub(config, structlog.get_logger(), Metrics())
    for name, tools in (("github", ["search", "create"]), ("files", ["read"])):
        upstream = built.upstreams[name]
        upstream.health = "up"
        upstream.tools = [types.Tool(name=tool, input_schema={"type": "object"}) for tool in tools]
    return built


def test_the_aggregate_prefixes_and_resolves_names() -> None:
    view = View(hub(), ANONYMOUS, None)
    assert [tool.name for tool in view.tools()] == [
        "github__search",
        "github__create",
        "files__read",
    ]
    found = view.resolve("github__create")
    assert found is not None
    assert (found[0].name, found[1]) == ("github", "create")
    assert view.resolve("github") is None
    assert view.resolve("nowhere__x") is None
    assert view.resolve("github__") is None


def test_one_server_is_unprefixed() -> None:
    view = View(hub(), ANONYMOUS, "github")
    assert [tool.name for tool in view.tools()] == ["search", "create"]
    found = view.resolve("search")
    assert found is not None
    assert found[0].name == "github"


def test_grants_filter_what_is_listed() -> None:
    principal = Principal(mcp=frozenset({"github/search"}))
    view = View(hub(), principal, None)
    assert [tool.name for tool in view.tools()] == ["github__search"]
    assert [upstream.name for upstream in view.servers()] == ["github"]


def test_a_server_that_is_down_lists_nothing() -> None:
    shared = hub()
    shared.upstreams["files"].health = "down"
    shared.upstreams["files"].tools = []
    view = View(shared, ANONYMOUS, None)
    assert [tool.name for tool in view.tools()] == ["github__search", "github__create"]


def test_admin_description_shows_no_url_command_or_headers() -> None:
    described = hub().describe()
    assert [server["name"] for server in described] == ["github", "files"]
    assert described[0]["tool_count"] == 2
    assert not {"url", "headers", "command", "env"} & set(described[0])
