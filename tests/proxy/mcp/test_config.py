"""The ``mcp:`` section: parsed into its types, and what types cannot say checked."""

from __future__ import annotations

import pytest

from proxy.runtime.config import ConfigError, parse_config


def test_servers_of_every_transport_are_read() -> None:
    config = parse_config(
        """
        mcp:
          tool_separator: "."
          servers:
            github: {url: "https://mcp.example.com/github", headers: {Authorization: "Bearer x"}}
            files: {transport: stdio, command: [python, -m, files_mcp], env: {ROOT: /srv}}
            search: {transport: sse, url: "http://search:8080/sse", price_per_call: 0.01}
        """
    ).mcp
    assert config.tool_separator == "."
    assert config.servers["github"].transport == "streamable_http"
    assert config.servers["files"].command == ("python", "-m", "files_mcp")
    assert config.servers["search"].price_per_call == 0.01


@pytest.mark.parametrize(
    ("server", "error"),
    [
        ("{transport: stdio}", "$.mcp.servers.s.command: a stdio server needs a command"),
        ("{transport: sse}", "$.mcp.servers.s.url: a sse server needs a url"),
        ("{url: 'ftp://x'}", "url: Expected `str` matching"),
        ("{url: 'http://x', bogus: 1}", "bogus"),
    ],
)
def test_a_server_without_what_its_transport_needs_is_refused(server: str, error: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(f"mcp: {{servers: {{s: {server}}}}}")
    assert any(error in message for message in refused.value.errors), refused.value.errors


def test_a_server_name_holding_the_separator_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config("mcp: {servers: {a__b: {url: 'http://x'}}}")
    assert refused.value.errors == ["$.mcp.servers.a__b: the name contains the tool separator '__'"]


def test_team_and_key_grants_are_read() -> None:
    auth = parse_config(
        """
        auth:
          teams: {support: {mcp: {github: [search_issues], files: "*"}}}
          keys: [{key: "sk-cw-declared-abcdefghijabcdefghij", alias: a, mcp: {github: "*"}}]
        """
    ).auth
    assert auth.teams["support"].mcp == {"github": ["search_issues"], "files": "*"}
    assert auth.keys[0].mcp == {"github": "*"}
    with pytest.raises(ConfigError):
        parse_config("auth: {teams: {t: {mcp: {github: 'some'}}}}")
