"""``GET /admin/overview`` (master key): what the gateway is doing, for the UI's front page.

Everything but ``today`` comes from the process's own counters (:mod:`proxy.admin.readings`):

- ``now``: the last ``window_seconds`` (60) — ``requests_per_second``, ``error_rate`` (4xx and
  5xx among requests), ``latency_p50_ms`` / ``latency_p99_ms``, ``overhead_p50_ms`` /
  ``overhead_p99_ms`` (the gateway's own time), ``tokens_per_second``, ``cache_hit_rate`` (hits
  among cache lookups), ``rate_limited`` and ``budget_rejected`` refusals, ``in_flight``.
  Ratios and quantiles are null when nothing was counted.
- ``totals``: since the process started — requests, errors, tokens, cost, cache hits and
  lookups, rate-limit, budget and auth refusals.
- ``series``: the last hour, one point per sampling interval (10 s): ``time`` (UNIX seconds,
  the end of each interval) and, per point, ``requests_per_second``, ``error_rate``,
  ``latency_p99_ms``, ``overhead_p99_ms``, ``tokens_per_second``, ``cost_usd``.
- ``today``: requests, tokens and spend of the current UTC day, from the spend ledger (every
  instance's), read at most every ``TODAY_TTL`` seconds; null when the database cannot answer.

With several worker processes each keeps its own hour of readings of the shared counters, so
two workers answer the same totals and nearly the same series.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from aiohttp import web

from proxy.admin.guard import ADMIN, admin_route, json_response
from proxy.admin.readings import Reading, Sampler, rates
from proxy.core.errors import NotFound
from proxy.db import DatabaseError
from proxy.governance.ledger.spend_db import TOKEN_FIELDS, SpendFilter, SpendRepository
from proxy.governance.ledger.writer import LedgerWriter
from proxy.governance.pricing import nanos_to_usd

WINDOW = 60.0
TODAY_TTL = 10.0


class Overview:
    """The sampler of this process's counters and a short-lived cache of today's ledger sums."""

    def __init__(
        self,
        sampler: Sampler,
        read_now: Callable[[], Reading],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sampler = sampler
        self._read_now = read_now
        self._clock = clock
        self._today: tuple[float, str, dict[str, Any] | None] | None = None

    async def summary(
        self, spend: SpendRepository | None, ledger: LedgerWriter | None = None
    ) -> dict[str, Any]:
        """The whole answer (module docstring); ``spend`` None leaves ``today`` null.
        ``ledger``'s queue is written before today's sums are read again."""
        now = self._clock()
        current: Reading = self._read_now()
        start = self.sampler.baseline(now, WINDOW) or current
        recent = rates(start, current)
        readings = [*self.sampler.readings, current]
        steps = [rates(a, b) for a, b in itertools.pairwise(readings)]
        return {
            "time": _rfc3339(now),
            "window_seconds": round(recent.seconds, 3),
            "now": {
                "requests_per_second": round(recent.requests_per_second, 3),
                "error_rate": recent.error_rate,
                "latency_p50_ms": recent.latency_p50_ms,
                "latency_p99_ms": recent.latency_p99_ms,
                "overhead_p50_ms": recent.overhead_p50_ms,
                "overhead_p99_ms": recent.overhead_p99_ms,
                "tokens_per_second": round(recent.tokens_per_second, 3),
                "cache_hit_rate": recent.cache_hit_rate,
                "rate_limited": recent.rate_limited,
                "budget_rejected": recent.budget_rejected,
                "in_flight": current.in_flight,
            },
            "totals": {
                "requests": current.requests,
                "errors": current.errors,
                "server_errors": current.server_errors,
                "tokens": current.tokens,
                "cost_usd": round(current.cost_usd, 9),
                "cache_hits": current.cache_hits,
                "cache_lookups": current.cache_lookups,
                "rate_limited": current.rate_limited,
                "budget_rejected": current.budget_rejected,
                "auth_failures": current.auth_failures,
            },
            "series": {
                "interval_seconds": self.sampler.interval,
                "time": [round(b.time, 3) for b in readings[1:]],
                "requests_per_second": [round(s.requests_per_second, 3) for s in steps],
                "error_rate": [s.error_rate for s in steps],
                "latency_p99_ms": [s.latency_p99_ms for s in steps],
                "overhead_p99_ms": [s.overhead_p99_ms for s in steps],
                "tokens_per_second": [round(s.tokens_per_second, 3) for s in steps],
                "cost_usd": [round(s.cost_usd, 9) for s in steps],
            },
            "today": None if spend is None else await self._today_sums(spend, ledger, now),
        }

    async def _today_sums(
        self, spend: SpendRepository, ledger: LedgerWriter | None, now: float
    ) -> dict[str, Any] | None:
        day = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")
        cached = self._today
        if cached is not None and cached[1] == day and now - cached[0] < TODAY_TTL:
            return cached[2]
        midnight = datetime.fromisoformat(day).replace(tzinfo=UTC)
        try:
            if ledger is not None:
                await ledger.flush()
            _, total = await spend.totals(SpendFilter(start=midnight), [])
        except (sa.exc.SQLAlchemyError, DatabaseError, OSError):
            sums = None
        else:
            sums = {
                "day": day,
                "requests": total["requests"],
                "tokens": sum(total[name] for name in TOKEN_FIELDS),
                "input_tokens": total["input_tokens"],
                "output_tokens": total["output_tokens"],
                "cost_usd": nanos_to_usd(total["cost_nanos"]),
                "saved_usd": nanos_to_usd(total["saved_nanos"]),
            }
        self._today = (now, day, sums)
        return sums


def _rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


@admin_route
async def overview(request: web.Request) -> web.Response:
    """``GET /admin/overview``."""
    context = request.app[ADMIN]
    if context.overview is None:
        raise NotFound("this app keeps no overview", code="overview_unavailable")
    spend = SpendRepository(context.database)
    return json_response(await context.overview.summary(spend, context.ledger))


ROUTES = (("GET", "/admin/overview", overview),)
