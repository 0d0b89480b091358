"""The gateway's own MCP errors: :class:`McpFault`, a JSON-RPC error with an HTTP-like status.

MCP has no codes for "forbidden" or "rate limited"; the gateway uses codes of JSON-RPC's
server-error range that the SDK leaves free, and puts the HTTP status a model route would
answer (``status``), a machine-readable ``code`` and, when waiting helps, ``retry_after``
(seconds) in the error's ``data``.
"""

from __future__ import annotations

from typing import Any

FORBIDDEN = -32003
"""The key or team may not use this server or tool (``data.status`` 403)."""
RATE_LIMITED = -32029
"""A key or team limit refused the call (``data.status`` 429, or 503 when the limits cannot
be checked)."""
UNAVAILABLE = -32010
"""The MCP server is down or still connecting (``data.status`` 503)."""
UNAUTHORIZED = -32011
"""No key, or a key that is not valid (``data.status`` 401)."""


class McpFault(Exception):
    """A JSON-RPC error the gateway answers with (see the module docstring)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        status: int | None = None,
        reason: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data: dict[str, Any] | None = None
        if status is not None:
            self.data = {"status": status, "code": reason}
            if retry_after is not None:
                self.data["retry_after"] = round(retry_after, 3)

    def error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` member."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error
