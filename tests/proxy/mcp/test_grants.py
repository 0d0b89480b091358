"""A principal's MCP grants: the key's and its team's lists, both applying."""

from __future__ import annotations

from proxy.core.canonical import ANONYMOUS, Principal
from proxy.governance.auth.records import mcp_grants


def test_no_list_allows_everything() -> None:
    assert mcp_grants(None) is None
    assert ANONYMOUS.allows_tool("github", "anything")
    assert ANONYMOUS.allows_tool("github")


def test_a_list_allows_its_tools_and_whole_servers() -> None:
    grants = mcp_grants({"github": ["search_issues", "get_issue"], "files": "*"})
    assert grants == frozenset({"github/search_issues", "github/get_issue", "files/*"})
    principal = Principal(mcp=grants)
    assert principal.allows_tool("github", "get_issue")
    assert not principal.allows_tool("github", "create_issue")
    assert principal.allows_tool("files", "read")
    assert principal.allows_tool("github")  # some of its tools
    assert not principal.allows_tool("search")
    assert not principal.allows_tool("search", "query")


def test_the_key_and_the_team_must_both_allow() -> None:
    principal = Principal(
        mcp=mcp_grants({"github": "*"}), team_mcp=mcp_grants({"github": ["get_issue"]})
    )
    assert principal.allows_tool("github", "get_issue")
    assert not principal.allows_tool("github", "create_issue")
    assert not Principal(mcp=frozenset(), team_mcp=None).allows_tool("github")
