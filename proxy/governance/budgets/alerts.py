"""Soft-limit alerts: what the ``cost`` plugin does when a budget's spend crosses ``soft_usd``.

Once per period (a rolling period once a day;
:meth:`~proxy.governance.budgets.counters.SpendCounters.first_alert` decides, in the state store, so
that instances sharing it alert once between them): a warning log line
``budget_soft_limit_crossed``, one count of ``crossway_budget_alerts_total{scope}`` and, with
``alerts.webhook_url``, a JSON POST (:class:`~proxy.governance.alerts.WebhookAlerts`: retried in the
background, never holding up a request). A store that cannot be reached counts one ``open`` decision
of the budgets' policy and sends nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from proxy.core.metrics import Metrics
from proxy.governance.alerts import WebhookAlerts
from proxy.governance.budgets.counters import SpendCounters
from proxy.governance.budgets.plans import Crossing
from proxy.governance.pricing import nanos_to_usd
from proxy.state.policy import SharedState
from proxy.state.store import StoreUnavailable


class AlertsConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where soft-limit alerts are POSTed (JSON), and how hard a delivery is tried."""

    webhook_url: Annotated[str, Meta(pattern=r"^https?://")] | None = None
    attempts: Annotated[int, Meta(ge=1, le=10)] = 3
    timeout: Annotated[float, Meta(gt=0, le=60)] = 5.0


class SoftLimitAlerts:
    """The alerts of one ``cost`` plugin (see the module docstring). ``webhook`` is None
    without a URL."""

    def __init__(
        self,
        options: AlertsConfig,
        counters: SpendCounters,
        state: SharedState,
        metrics: Metrics,
        logger: Any,
    ) -> None:
        self._counters = counters
        self._state = state
        self._metrics = metrics
        self._logger = logger
        url = options.webhook_url
        self.webhook = (
            None
            if url is None
            else WebhookAlerts(url, logger, attempts=options.attempts, timeout=options.timeout)
        )

    async def crossed(self, crossing: Crossing) -> None:
        """Alert on ``crossing`` unless its scope was alerted on already this period."""
        budget = crossing.budget
        now = self._counters.clock()
        try:
            first = await self._counters.first_alert(crossing, now)
        except StoreUnavailable:
            self._state.degraded("budgets", "open")
            return
        if not first:
            return
        self._metrics.budget_alerts(crossing.scope).inc()
        spent = nanos_to_usd(crossing.spent)
        self._logger.warning(
            "budget_soft_limit_crossed",
            scope=crossing.scope,
            id=crossing.ident,
            spent_usd=spent,
            soft_usd=budget.soft_usd,
            max_usd=budget.max_usd,
            period=budget.period,
        )
        if self.webhook is not None:
            self.webhook.send(
                {
                    "event": "budget.soft_limit_crossed",
                    "scope": crossing.scope,
                    "id": crossing.ident,
                    "spent_usd": spent,
                    "soft_usd": budget.soft_usd,
                    "max_usd": budget.max_usd,
                    "period": budget.period,
                    "time": rfc3339(datetime.fromtimestamp(now, UTC)),
                }
            )

    async def close(self) -> None:
        """Stop the deliveries still pending."""
        if self.webhook is not None:
            await self.webhook.close()


def rfc3339(moment: datetime) -> str:
    """``moment`` (UTC) as RFC 3339 with a ``Z``."""
    return moment.isoformat().replace("+00:00", "Z")
