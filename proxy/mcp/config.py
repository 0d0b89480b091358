"""The ``mcp:`` section of the config file: the MCP servers the gateway fronts.

```yaml
mcp:
  servers:
    github:  {url: "https://mcp.example.com/github", transport: streamable_http,
              headers: {Authorization: "Bearer ${GITHUB_MCP_TOKEN}"}, price_per_call: 0.001}
    files:   {command: ["python", "-m", "files_mcp"], transport: stdio, env: {ROOT: /srv/docs}}
    search:  {url: "http://search-mcp:8080/sse", transport: sse}
  tool_separator: "__"            # github__create_issue on /mcp
  page_size: 100                  # items per page of the gateway's own lists
  health_interval: 10             # seconds between pings of a connected server
```

A server's ``headers`` and ``env`` are its credentials: they stay in the gateway, and no answer,
log line or metric ever shows them. ``url`` is needed for ``streamable_http`` and ``sse``,
``command`` for ``stdio`` (:func:`check_mcp`). ``price_per_call`` (USD) is what the ledger
charges each ``tools/call`` of the server (0 when omitted). The section applies as the process
started: a reload keeps the servers it connected.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

ServerName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
Transport = Literal["streamable_http", "sse", "stdio"]


class McpServerConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """One upstream MCP server (module docstring). ``timeout`` bounds each request to it,
    ``connect_timeout`` its connection and handshake (seconds)."""

    transport: Transport = "streamable_http"
    url: Annotated[str, Meta(pattern=r"^https?://.+")] | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    command: tuple[Annotated[str, Meta(min_length=1)], ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    timeout: Annotated[float, Meta(gt=0, le=3600)] = 60.0
    connect_timeout: Annotated[float, Meta(gt=0, le=600)] = 10.0
    price_per_call: Annotated[float, Meta(ge=0)] = 0.0


class McpConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring. ``restart_backoff`` is the first wait (seconds) before a
    server that went down is connected (or started) again, doubled per failure up to
    ``max_restart_backoff``."""

    servers: dict[ServerName, McpServerConfig] = msgspec.field(default_factory=dict)
    tool_separator: Annotated[str, Meta(min_length=1, max_length=8)] = "__"
    page_size: Annotated[int, Meta(ge=1, le=10_000)] = 100
    health_interval: Annotated[float, Meta(gt=0, le=3600)] = 10.0
    restart_backoff: Annotated[float, Meta(gt=0, le=600)] = 0.5
    max_restart_backoff: Annotated[float, Meta(gt=0, le=3600)] = 30.0


def check_mcp(config: McpConfig, errors: list[str]) -> None:
    """Append to ``errors`` what is wrong with ``config`` beyond its types: a server without
    what its transport needs, and a server name containing the tool separator (its prefixed
    names would be ambiguous)."""
    for name, server in config.servers.items():
        path = f"$.mcp.servers.{name}"
        if server.transport == "stdio":
            if not server.command:
                errors.append(f"{path}.command: a stdio server needs a command")
        elif server.url is None:
            errors.append(f"{path}.url: a {server.transport} server needs a url")
        if config.tool_separator in name:
            errors.append(f"{path}: the name contains the tool separator {config.tool_separator!r}")
