"""MCP tools for any model: a Responses request's ``{"type": "mcp"}`` tools run by the gateway.

:meth:`McpToolLoop.run` takes a Responses call whose envelope names MCP tools
(:class:`~proxy.dialects.responses.objects.McpToolSpec`) and:

1. **Resolves each server before any connection**: ``server_label`` names a configured server
   (``mcp.servers``), or ``server_url`` must be the URL of one (the config is the allow-list;
   a URL it does not list is a 400 ``mcp_server_not_allowed``, and nothing is fetched: the
   gateway is never an open proxy). The caller's grants apply
   (:meth:`~proxy.core.canonical.Principal.allows_tool`): a server it may not use is a 403.
2. **Lists the tools** (the server's kept list, filtered by ``allowed_tools`` and the grants) as
   an ``mcp_list_tools`` output item, and offers them to the model as function tools named
   ``<server_label>__<tool>``. A server that is down lists none (the item carries ``error``).
3. **Runs the rounds**: each round is the whole plugin chain (so the caller's limits and budget
   apply to every round); when the model calls offered tools, the gateway calls them
   (:class:`~proxy.mcp.calls.ToolCalls`: grants, limits, ledger, metrics), records an
   ``mcp_call`` item each, feeds the results back as tool messages, and asks again. After
   ``max_tool_calls`` calls (0: none at all) the MCP tools are withdrawn for a last round. A
   reply that calls no offered tool (or a function tool of the client's own) ends the loop: it
   is the answer.

Every round is asked whole (its tool calls must be complete to run them). A streamed request
is answered as a stream: ``response.created``, the MCP items (``response.output_item.added``,
their ``response.mcp_*`` events, ``done``, at output indexes 0…k-1:
:class:`~proxy.dialects.responses.stream.ResponsesStreamEncoder`),
then the last round's answer told as the Responses API streams it (replayed from the whole
answer: its text arrives at once, not token by token). The usage of the answer is the sum of
every round's.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import mcp.types as types
import msgspec
from mcp.shared.exceptions import MCPError

from proxy.cache.replay import ReplayStream
from proxy.core.canonical import Call, FunctionDefinition, Message, Tool, ToolCall, Usage
from proxy.core.errors import BadRequest, PermissionDenied
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.dialects.responses.objects import (
    Envelope,
    McpCallItem,
    McpListToolsItem,
    McpToolSpec,
)
from proxy.mcp.calls import ToolCalls
from proxy.mcp.faults import McpFault
from proxy.mcp.hub import McpHub
from proxy.mcp.upstream import Upstream

_MAX_NAME = 64  # the longest function name every provider takes
_MAX_ROUNDS = 32  # rounds without max_tool_calls: a model that never stops calling is cut off


class _Offered(msgspec.Struct, frozen=True):
    upstream: Upstream
    tool: str
    label: str


class McpToolLoop:
    """See the module docstring. ``hub`` None: no MCP server is configured (every MCP tool is
    then refused as not allowed)."""

    def __init__(self, hub: McpHub | None, calls: ToolCalls | None) -> None:
        self._hub = hub
        self._calls = calls

    async def run(self, call: Call, envelope: Envelope, chain: Next) -> Reply:
        """The answer to ``call`` with its MCP tools run (module docstring)."""
        servers = [self._server(spec, index, call) for index, spec in enumerate(envelope.mcp)]
        streamed, call.stream = call.stream, False  # every round whole: its tool calls complete
        offered = self._offer(servers, call, envelope)
        limit = envelope.max_tool_calls
        made = 0
        if limit is not None and limit <= 0:
            _withdraw(call, offered)  # listed, never called
        usage: Usage | None = None
        for _ in range(_MAX_ROUNDS):
            reply = await chain(call)
            response = reply.response
            assert response is not None  # a whole call answers whole
            usage = _sum(usage, response.usage)
            message = response.choices[0].message
            requested = message.tool_calls or []
            ours = [c for c in requested if c.function.name in offered]
            if not ours or len(ours) != len(requested):
                break
            call.messages.append(
                Message(role="assistant", content=message.content, tool_calls=list(ours))
            )
            for tool_call in ours:
                call.messages.append(await self._run(tool_call, offered, call, envelope))
                made += 1
            if limit is not None and made >= limit:
                _withdraw(call, offered)
        final = reply.response
        assert final is not None
        final.usage = usage
        if not streamed:
            return reply
        call.stream = True
        return msgspec.structs.replace(reply, response=None, stream=ReplayStream(final))

    def _server(self, spec: McpToolSpec, index: int, call: Call) -> tuple[McpToolSpec, Upstream]:
        """The configured server ``spec`` names; raises before any connection is made."""
        upstreams = {} if self._hub is None else self._hub.upstreams
        param = f"tools[{index}]"
        found: Upstream | None
        if spec.server_url is not None:
            found = next((u for u in upstreams.values() if u.config.url == spec.server_url), None)
            if found is None:
                raise BadRequest(
                    "server_url: this MCP server is not on the gateway's allow-list",
                    param=f"{param}.server_url",
                    code="mcp_server_not_allowed",
                )
        else:
            found = upstreams.get(spec.server_label)
            if found is None:
                raise BadRequest(
                    f"server_label: no MCP server {spec.server_label!r} is configured "
                    "(give a configured server's name, or its server_url)",
                    param=f"{param}.server_label",
                    code="mcp_server_not_allowed",
                )
        if not call.principal.allows_tool(found.name):
            raise PermissionDenied(
                f"this API key may not use the MCP server {spec.server_label!r}",
                code="mcp_server_not_allowed",
                param=param,
            )
        return spec, found

    def _offer(
        self, servers: list[tuple[McpToolSpec, Upstream]], call: Call, envelope: Envelope
    ) -> dict[str, _Offered]:
        """List each server's tools (an ``mcp_list_tools`` item) and offer them to the model."""
        offered: dict[str, _Offered] = {}
        tools = list(call.params.tools or [])
        for spec, upstream in servers:
            allowed = None if spec.allowed_tools is None else set(spec.allowed_tools)
            listed = [
                tool
                for tool in upstream.tools
                if (allowed is None or tool.name in allowed)
                and call.principal.allows_tool(upstream.name, tool.name)
            ]
            envelope.mcp_output.append(
                McpListToolsItem(
                    id=_item_id("mcpl"),
                    server_label=spec.server_label,
                    tools=[_listed(tool) for tool in listed],
                    error=None if upstream.health == "up" else "the MCP server is unavailable",
                )
            )
            for tool in listed:
                name = f"{spec.server_label}__{tool.name}"[:_MAX_NAME]
                offered[name] = _Offered(upstream, tool.name, spec.server_label)
                definition = FunctionDefinition(
                    name=name,
                    description=tool.description or msgspec.UNSET,
                    parameters=tool.input_schema or {"type": "object"},
                )
                tools.append(Tool(function=definition))
        call.params.tools = tools
        return offered

    async def _run(
        self, tool_call: ToolCall, offered: dict[str, _Offered], call: Call, envelope: Envelope
    ) -> Message:
        """Call one tool; its ``mcp_call`` item, and the tool message for the model."""
        target = offered[tool_call.function.name]
        arguments_text = tool_call.function.arguments or "{}"
        item = McpCallItem(
            id=_item_id("mcp"),
            server_label=target.label,
            name=target.tool,
            arguments=arguments_text,
        )
        envelope.mcp_output.append(item)
        try:
            arguments = json.loads(arguments_text)
            if not isinstance(arguments, dict):
                raise ValueError("not an object")
        except ValueError:
            return self._failed(item, tool_call, "the arguments are not a JSON object")
        assert self._calls is not None  # a hub comes with its calls
        try:
            result = await self._calls.call(
                call.principal, target.upstream, target.tool, arguments, None, call.request_id
            )
        except McpFault as fault:
            return self._failed(item, tool_call, fault.message)
        except MCPError as error:
            return self._failed(item, tool_call, error.message)
        text = _text(result)
        if result.is_error:
            return self._failed(item, tool_call, text)
        item.output = text
        return Message(role="tool", tool_call_id=tool_call.id, content=text)

    def _failed(self, item: McpCallItem, tool_call: ToolCall, error: str) -> Message:
        item.error = error
        item.status = "failed"
        return Message(role="tool", tool_call_id=tool_call.id, content=f"Error: {error}")


def _withdraw(call: Call, offered: dict[str, _Offered]) -> None:
    """``max_tool_calls`` is reached: the MCP tools leave the request (the model answers)."""
    left = [tool for tool in call.params.tools or [] if tool.function.name not in offered]
    call.params.tools = left or None
    if not left:
        call.params.tool_choice = None
    offered.clear()


def _listed(tool: types.Tool) -> dict[str, Any]:
    shown: dict[str, Any] = {"name": tool.name, "input_schema": tool.input_schema}
    if tool.description is not None:
        shown["description"] = tool.description
    if tool.annotations is not None:
        shown["annotations"] = tool.annotations.model_dump(mode="json", exclude_none=True)
    return shown


def _text(result: types.CallToolResult) -> str:
    """The text a tool result gives the model: its text blocks, else its structured content,
    else its blocks as JSON."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content)
    return json.dumps([block.model_dump(mode="json") for block in result.content])


def _sum(total: Usage | None, more: Usage | None) -> Usage | None:
    if total is None or more is None:
        return more if total is None else total
    return Usage(
        **{
            field: getattr(total, field) + getattr(more, field)
            for field in ("input", "cache_read", "cache_write", "output", "reasoning")
        }
    )


def _item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"
