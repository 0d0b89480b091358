"""A ``tools/call`` as the gateway governs it: :class:`ToolCalls`.

Each call, in order:

1. **Grants**: the caller's key and team must allow the tool
   (:meth:`~proxy.core.canonical.Principal.allows_tool`), else :class:`McpFault` ``FORBIDDEN``
   (the MCP spelling of a 403; ``data.status`` 403).
2. **Limits**: the key's and team's ``rpm`` and ``max_parallel`` apply, in the same state-store
   counters the ``limits`` plugin keeps for model requests (a key's ``rpm`` counts its model
   requests and its tool calls together); over a limit: ``RATE_LIMITED`` (``data.status`` 429,
   ``data.retry_after``). A store that cannot answer follows ``state.on_unavailable.limits``.
3. **The call** on the upstream server (progress relayed, cancellation passed through); a
   server that is down: ``UNAVAILABLE`` (``data.status`` 503).
4. **Accounting**: one spend-ledger record (``dialect`` ``mcp``, ``model`` ``server/tool``,
   ``mcp_server``, ``mcp_tool``, key, team, duration, status, ``mcp_bytes`` of the result, cost
   ``price_per_call`` or 0), ``crossway_mcp_tool_calls_total{server,result}`` and
   ``crossway_mcp_tool_call_duration_seconds{server}``, one ``mcp_tool_call`` log line, and,
   when tracing is on, one client span ``tools/call <tool>`` under the current span (the
   Responses API's MCP loop: the request's; a call on ``/mcp``: a trace of its own) with the
   conventions' ``mcp.method.name``, ``gen_ai.operation.name`` ``execute_tool``,
   ``gen_ai.tool.name`` and ``error.type``, and ``crossway.mcp.server``, ``crossway.mcp.result``,
   ``crossway.key_alias``, ``crossway.team``. The arguments and the result are never logged nor
   put on the span.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import mcp.types as types
from mcp.shared.exceptions import MCPError

from proxy.core.canonical import Principal
from proxy.core.metrics import Metrics
from proxy.core.tracing import NO_TRACER, AttributeValue, Span, Tracer
from proxy.governance.ledger.records import RecordIds, SpendRecord
from proxy.governance.pricing import usd_to_nanos
from proxy.mcp.faults import FORBIDDEN, RATE_LIMITED, UNAVAILABLE, McpFault
from proxy.mcp.upstream import Progress, ServerUnavailable, Upstream
from proxy.state.policy import SharedState
from proxy.state.store import Admission, LimitPlan, StoreUnavailable

_PREFIX = "crossway:limits:"  # the limits plugin's counters: a key's rpm counts both kinds
_PARALLEL_RETRY_AFTER = 1.0
_MAX_TEXT = 256


class Ledger(Protocol):
    """Where spend records go (:class:`~proxy.governance.ledger.writer.LedgerWriter`)."""

    def record(self, record: SpendRecord) -> None:
        """Queue ``record`` to be written; never blocks, never raises."""


class ToolCalls:
    """See the module docstring. ``ledger`` None: records are not kept; ``prices``: each
        server's price per call in USD (``mcp.servers.<name>.price_per_call``); ``recent``: where
    the last calls are kept (newest first) for the admin API."""

    def __init__(
        self,
        state: SharedState,
        ledger: Ledger | None,
        metrics: Metrics,
        logger: Any,
        prices: Mapping[str, float],
        recent: deque[dict[str, Any]],
        tracer: Callable[[], Tracer] = lambda: NO_TRACER,
    ) -> None:
        self._recent = recent
        self._tracer = tracer
        self._prices = {name: usd_to_nanos(usd) or 0 for name, usd in prices.items() if usd}
        self._state = state
        self._store = state.store_for("limits")
        self._closed = state.policy("limits") == "closed"
        self._ledger = ledger
        self._metrics = metrics
        self._logger = logger
        self._ids = RecordIds()
        self._plans: dict[str | None, tuple[Principal, LimitPlan | None]] = {}

    async def call(
        self,
        principal: Principal,
        upstream: Upstream,
        tool: str,
        arguments: dict[str, Any] | None,
        progress: Progress | None,
        request_id: str,
    ) -> types.CallToolResult:
        """Call ``tool`` of ``upstream`` for ``principal`` (module docstring); raises
        :class:`McpFault` for a refusal, and the server's own :class:`MCPError`."""
        server = upstream.name
        started = time.perf_counter()
        span = self._span(principal, server, tool)
        if not principal.allows_tool(server, tool):
            self._finish(principal, server, tool, "denied", 403, "tool_not_allowed", started, span)
            raise McpFault(
                FORBIDDEN,
                f"this API key may not call the tool {tool!r} of the MCP server {server!r}",
                status=403,
                reason="tool_not_allowed",
            )
        admission = await self._admit(principal, server, tool, started, span)
        result: types.CallToolResult | None = None
        outcome, status = "error", 502
        code: str | None = "upstream_error"
        try:
            result = await upstream.call_tool(tool, arguments, progress)
            outcome, status, code = "ok", 200, None
            if result.is_error:
                outcome = code = "tool_error"
            return result
        except ServerUnavailable:
            outcome, status, code = "unavailable", 503, "server_unavailable"
            raise McpFault(
                UNAVAILABLE,
                f"the MCP server {server!r} is unavailable",
                status=503,
                reason="server_unavailable",
            ) from None
        except MCPError:
            raise
        except asyncio.CancelledError:
            outcome, status, code = "cancelled", 499, "cancelled"
            raise
        finally:
            if admission is not None:
                self._store.settle(admission, 0)
            size = None if result is None else len(result.model_dump_json(by_alias=True))
            self._metrics.mcp_tool_call_duration(server).observe(time.perf_counter() - started)
            self._finish(
                principal, server, tool, outcome, status, code, started, span, size, request_id
            )

    def _span(self, principal: Principal, server: str, tool: str) -> Span | None:
        """The call's span when tracing is on (see the module docstring); None when off."""
        tracer = self._tracer()
        if not tracer.enabled:
            return None
        attributes: dict[str, AttributeValue] = {
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool[:_MAX_TEXT],
            "crossway.mcp.server": server,
        }
        if principal.key_alias is not None:
            attributes["crossway.key_alias"] = principal.key_alias
        if principal.team is not None:
            attributes["crossway.team"] = principal.team
        return tracer.child_span(f"tools/call {tool[:_MAX_TEXT]}", attributes, client=True)

    async def _admit(
        self, principal: Principal, server: str, tool: str, started: float, span: Span | None
    ) -> Admission | None:
        """Take from the principal's rpm buckets and hold a max_parallel slot; None when it has
        no such limits (or the store could not answer and the policy admits uncounted)."""
        plan = self._plan(principal)
        if plan is None:
            return None
        try:
            admission = await self._store.admit(plan, 0)
        except StoreUnavailable:
            if self._closed:
                self._state.degraded("limits", "closed")
                self._finish(
                    principal, server, tool, "limited", 503, "state_unavailable", started, span
                )
                raise McpFault(
                    RATE_LIMITED,
                    "rate limits cannot be checked right now",
                    status=503,
                    reason="state_unavailable",
                    retry_after=1.0,
                ) from None
            self._state.degraded("limits", "open")
            return None
        if admission.full is None and admission.refused is None:
            return admission
        if admission.full is not None:
            message = f"{plan.slot_limits[admission.full]} tool calls in flight are taken"
            retry_after = _PARALLEL_RETRY_AFTER
        else:
            assert admission.refused is not None
            message = f"the rpm limit of {plan.limits[admission.refused]} is reached"
            retry_after = admission.retry_after
        self._finish(principal, server, tool, "limited", 429, "rate_limit_exceeded", started, span)
        raise McpFault(
            RATE_LIMITED, message, status=429, reason="rate_limit_exceeded", retry_after=retry_after
        )

    def _plan(self, principal: Principal) -> LimitPlan | None:
        kept = self._plans.get(principal.key_id)
        if kept is not None and kept[0] is principal:
            return kept[1]
        slots: list[tuple[str, int]] = []
        requests: list[tuple[str, int]] = []
        for scope, ident, limits in (
            ("key", principal.key_id, principal.limits),
            ("team", principal.team, principal.team_limits),
        ):
            if ident is None or limits is None:
                continue
            if limits.max_parallel is not None:
                slots.append((f"{_PREFIX}parallel:{scope}:{ident}", limits.max_parallel))
            if limits.rpm is not None:
                requests.append((f"{_PREFIX}rpm:{scope}:{ident}", limits.rpm))
        plan = LimitPlan(slots, requests) if slots or requests else None
        if len(self._plans) >= 10_000:
            self._plans.clear()
        self._plans[principal.key_id] = (principal, plan)
        return plan

    def _finish(
        self,
        principal: Principal,
        server: str,
        tool: str,
        outcome: str,
        status: int,
        code: str | None,
        started: float,
        span: Span | None,
        size: int | None = None,
        request_id: str = "",
    ) -> None:
        """Count, log and record one call, and end its span."""
        if span is not None:
            span.set("crossway.mcp.result", outcome)
            if code is not None:
                span.fail(code)
            span.end()
        duration = time.perf_counter() - started
        self._metrics.mcp_tool_calls(server, outcome).inc()
        duration_ms = round(duration * 1000, 3)
        self._logger.info(
            "mcp_tool_call",
            server=server,
            tool=tool[:_MAX_TEXT],
            key_id=principal.key_id,
            team=principal.team,
            result=outcome,
            status=status,
            duration_ms=duration_ms,
            bytes=size,
        )
        self._recent.appendleft(
            {
                "time": time.time(),
                "server": server,
                "tool": tool[:_MAX_TEXT],
                "key_alias": principal.key_alias,
                "team": principal.team,
                "result": outcome,
                "status": status,
                "duration_ms": duration_ms,
                "bytes": size,
            }
        )
        if self._ledger is None:
            return
        price = self._prices.get(server, 0)
        self._ledger.record(
            SpendRecord(
                id=self._ids(),
                request_id=request_id,
                time=time.time(),
                key_id=principal.key_id,
                key_alias=principal.key_alias,
                team=principal.team,
                user=principal.user,
                dialect="mcp",
                model=f"{server}/{tool}"[:_MAX_TEXT],
                provider=None,
                upstream_model=None,
                input_tokens=0,
                cache_read_tokens=0,
                cache_write_tokens=0,
                output_tokens=0,
                reasoning_tokens=0,
                cost_nanos=price if status == 200 else 0,
                cost_source="authoritative",
                saved_nanos=None,
                status=status,
                error_code=code,
                duration_ms=duration_ms,
                ttft_ms=None,
                attempts=1,
                fallback=None,
                cache=None,
                mcp_server=server,
                mcp_tool=tool[:_MAX_TEXT],
                mcp_bytes=size,
            )
        )
