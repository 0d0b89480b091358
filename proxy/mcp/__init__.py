"""The MCP gateway: one governed MCP endpoint over every configured tool server.

``config`` (the ``mcp:`` section), ``upstream`` (one server kept connected, over streamable
HTTP, SSE or stdio, with the MCP SDK's client), ``hub`` (every server, and a caller's view of
them), ``calls`` (a governed ``tools/call``: grants, limits, ledger, metrics), ``faults`` (the
gateway's JSON-RPC errors), ``methods`` (the MCP methods answered), ``sessions``
(``Mcp-Session-Id``), ``routes`` (``/mcp`` and ``/mcp/{server}`` over streamable HTTP),
``gateway`` (the app's one call). See ``docs/mcp.md``.
"""
