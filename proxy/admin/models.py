"""``GET /admin/models`` (master key): every alias, its deployments and their state and prices.

``{"data": [{"alias", "routable": bool, "deployments": [deployment]}], "providers":
[{"name", "type", "ready"}]}`` — aliases in config order; each deployment is ``{"target",
"provider", "model", "weight", "provider_ready", "health", "cooldown_seconds", "prices"}``:

- ``health`` is ``healthy``, ``ejected`` (the balance plugin's cooldown, ``cooldown_seconds``
  left) or ``unknown`` when the shared state cannot answer; ``routable`` says whether any
  deployment of the alias is ready and not ejected.
- ``prices`` are USD per million tokens for ``input``, ``cache_read``, ``cache_write``,
  ``output`` and ``reasoning`` as the gateway charges them (deployment, provider, catalog),
  with ``tiers`` (``above_tokens`` and the same five) for long prompts; null when nothing prices
  the model (its cost is unknown).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from msgspec import structs

from proxy.admin.guard import ADMIN, admin_route, json_response
from proxy.core.canonical import Deployment
from proxy.core.errors import NotFound
from proxy.governance.pricing import ModelPrice, PriceBook, Rates
from proxy.state.store import Store, StoreUnavailable
from proxy.upstream.health import cooldown_left

_PICOS_PER_MICRO = 1_000_000  # rates are pico-dollars per token = micro-USD per million


@admin_route
async def list_models(request: web.Request) -> web.Response:
    """``GET /admin/models``."""
    context = request.app[ADMIN]
    if context.snapshot is None:
        raise NotFound("this app serves no model list", code="models_unavailable")
    snapshot = context.snapshot()
    router = snapshot.router
    aliases = []
    for alias, deployments in router.aliases().items():
        shown = [
            await _deployment(d, router.is_ready(d.provider), context.health, snapshot.prices)
            for d in deployments
        ]
        routable = any(d["provider_ready"] and d["health"] != "ejected" for d in shown)
        aliases.append({"alias": alias, "routable": routable, "deployments": shown})
    providers = [
        {
            "name": name,
            "type": type(config).__struct_config__.tag,
            "ready": snapshot.providers[name].ready,
        }
        for name, config in snapshot.config.providers.items()
    ]
    return json_response({"data": aliases, "providers": providers})


async def _deployment(
    deployment: Deployment, ready: bool, health: Store | None, prices: PriceBook
) -> dict[str, Any]:
    state, left = "healthy", None
    if health is not None:
        try:
            left = await cooldown_left(health, deployment)
        except StoreUnavailable:
            state = "unknown"
        else:
            state = "healthy" if left is None else "ejected"
    return {
        "target": deployment.target,
        "provider": deployment.provider,
        "model": deployment.model,
        "weight": deployment.weight,
        "provider_ready": ready,
        "health": state,
        "cooldown_seconds": None if left is None else round(left, 1),
        "prices": _prices(prices.price(deployment.provider, deployment.model)),
    }


def _prices(price: ModelPrice | None) -> dict[str, Any] | None:
    if price is None:
        return None
    shown = _usd(price.base)
    shown["tiers"] = [
        {"above_tokens": threshold, **_usd(rates)} for threshold, rates in price.tiers
    ]
    return shown


def _usd(rates: Rates) -> dict[str, Any]:
    return {name: value / _PICOS_PER_MICRO for name, value in structs.asdict(rates).items()}


ROUTES = (("GET", "/admin/models", list_models),)
