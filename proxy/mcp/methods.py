"""The MCP methods the gateway answers for a session: :class:`Methods`.

``ping``, ``tools/list``, ``tools/call``, ``resources/list``, ``resources/templates/list``,
``resources/read``, ``prompts/list``, ``prompts/get`` and ``logging/setLevel`` (accepted, a
no-op). Params are validated with the SDK's types (``INVALID_PARAMS`` otherwise); results are the
SDK's result types, as JSON. Lists are the gateway's own pages of ``mcp.page_size`` items over
what the servers list (their pages all followed), with an opaque ``nextCursor``. An unknown
tool, prompt or resource is ``INVALID_PARAMS`` (``RESOURCE_NOT_FOUND`` -32002 for a resource),
as the spec asks; a server the caller may not use is ``FORBIDDEN``
(:mod:`proxy.mcp.faults`). A server's own JSON-RPC error is relayed as it is.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import mcp.types as types
from pydantic import BaseModel, ValidationError

from proxy.mcp.calls import ToolCalls
from proxy.mcp.faults import FORBIDDEN, UNAVAILABLE, McpFault
from proxy.mcp.hub import View
from proxy.mcp.upstream import Progress, ServerUnavailable, Upstream

RESOURCE_NOT_FOUND = -32002
_Params = TypeVar("_Params", bound=BaseModel)
Handler = Callable[[View, dict[str, Any], "Progress | None", str], Awaitable[dict[str, Any]]]


class Methods:
    """See the module docstring. ``page_size``: items per page of a list."""

    def __init__(self, calls: ToolCalls, page_size: int, logger: Any) -> None:
        self._calls = calls
        self._page_size = page_size
        self._logger = logger
        self.handlers: dict[str, Handler] = {
            "ping": self._ping,
            "logging/setLevel": self._ping,
            "tools/list": self._tools_list,
            "tools/call": self._tools_call,
            "resources/list": self._resources_list,
            "resources/templates/list": self._templates_list,
            "resources/read": self._resources_read,
            "prompts/list": self._prompts_list,
            "prompts/get": self._prompts_get,
        }

    async def answer(
        self,
        view: View,
        method: str,
        params: dict[str, Any] | None,
        progress: Progress | None,
        request_id: str,
    ) -> dict[str, Any]:
        """The result of ``method``; raises :class:`McpFault` or the server's ``MCPError``."""
        handler = self.handlers.get(method)
        if handler is None:
            raise McpFault(types.METHOD_NOT_FOUND, f"Method not found: {method}")
        return await handler(view, params or {}, progress, request_id)

    async def _ping(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        return {}

    async def _tools_list(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        items, cursor = self._page(view.tools(), params)
        return _dump(types.ListToolsResult(tools=items, next_cursor=cursor))

    async def _tools_call(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        call = _params(types.CallToolRequestParams, params)
        upstream, name = self._target(view, call.name, "tool")
        if not any(tool.name == name for tool in upstream.tools) and upstream.health == "up":
            raise McpFault(types.INVALID_PARAMS, f"Unknown tool: {call.name}")
        result = await self._calls.call(
            view.principal, upstream, name, call.arguments, progress, request_id
        )
        return _dump(result)

    async def _resources_list(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        items, cursor = self._page(await view.resources(self._logger), params)
        return _dump(types.ListResourcesResult(resources=items, next_cursor=cursor))

    async def _templates_list(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        items, cursor = self._page(await view.resource_templates(self._logger), params)
        return _dump(
            types.ListResourceTemplatesResult(resource_templates=items, next_cursor=cursor)
        )

    async def _resources_read(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        read = _params(types.ReadResourceRequestParams, params)
        uri = str(read.uri)
        upstream = await view.resource_server(uri, self._logger)
        if upstream is None:
            raise McpFault(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
        _check_server(view, upstream)
        return _dump(await _unavailable_as_fault(upstream, upstream.read_resource(uri)))

    async def _prompts_list(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        items, cursor = self._page(await view.prompts(self._logger), params)
        return _dump(types.ListPromptsResult(prompts=items, next_cursor=cursor))

    async def _prompts_get(
        self, view: View, params: dict[str, Any], progress: Progress | None, request_id: str
    ) -> dict[str, Any]:
        get = _params(types.GetPromptRequestParams, params)
        upstream, name = self._target(view, get.name, "prompt")
        return _dump(
            await _unavailable_as_fault(upstream, upstream.get_prompt(name, get.arguments))
        )

    def _target(self, view: View, public: str, kind: str) -> tuple[Upstream, str]:
        found = view.resolve(public)
        if found is None:
            raise McpFault(types.INVALID_PARAMS, f"Unknown {kind}: {public}")
        upstream, name = found
        if kind != "tool":  # a tool is checked (and the refusal counted) by ToolCalls
            _check_server(view, upstream)
        return upstream, name

    def _page(self, items: list[Any], params: dict[str, Any]) -> tuple[list[Any], str | None]:
        """One page of ``items`` from the request's cursor, and the next page's cursor."""
        cursor = _params(types.PaginatedRequestParams, params).cursor
        start = 0 if cursor is None else _offset(cursor)
        end = start + self._page_size
        return items[start:end], _cursor(end) if end < len(items) else None


def _check_server(view: View, upstream: Upstream) -> None:
    if not view.principal.allows_tool(upstream.name):
        raise McpFault(
            FORBIDDEN,
            f"this API key may not use the MCP server {upstream.name!r}",
            status=403,
            reason="server_not_allowed",
        )


async def _unavailable_as_fault(upstream: Upstream, pending: Awaitable[Any]) -> Any:
    try:
        return await pending
    except ServerUnavailable:
        raise McpFault(
            UNAVAILABLE,
            f"the MCP server {upstream.name!r} is unavailable",
            status=503,
            reason="server_unavailable",
        ) from None


def _params(kind: type[_Params], params: dict[str, Any]) -> _Params:
    try:
        return kind.model_validate(params, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        raise McpFault(types.INVALID_PARAMS, f"Invalid params: {where}: {first['msg']}") from None


def _dump(result: BaseModel) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"crossway:{offset}".encode()).decode()


def _offset(cursor: str) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
        prefix, _, number = text.partition(":")
        offset = int(number)
    except (binascii.Error, UnicodeError, ValueError):
        raise McpFault(types.INVALID_PARAMS, "Invalid params: cursor") from None
    if prefix != "crossway" or offset < 0:
        raise McpFault(types.INVALID_PARAMS, "Invalid params: cursor")
    return offset
