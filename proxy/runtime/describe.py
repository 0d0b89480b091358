"""What ``crossway check`` (and ``crossway import litellm``) print of a valid config: the
server, the providers and whether each is ready, the models and their deployments, prices, the
state store, authentication and the plugin chain."""

from __future__ import annotations

from typing import Any, TextIO

from proxy.core.plugin import Authenticates


def describe(blueprint: Any, label: str, out: TextIO) -> None:
    """What ``check`` prints of a valid config's ``blueprint`` (``label`` names the file)."""
    config = blueprint.config
    server = config.server
    print(f"config {label}: ok", file=out)
    print(f"server: {server.host}:{server.port}, {server.workers} worker(s)", file=out)
    print("providers:", file=out)
    for name, provider in blueprint.providers.items():
        state = "ready" if provider.ready else "NOT READY (missing credentials)"
        print(f"  {name} ({type(provider.config).__struct_config__.tag}): {state}", file=out)
    print("models:", file=out)
    if not config.models:
        print("  (none: address models as provider/model)", file=out)
    for alias, deployments in blueprint.router.aliases().items():
        targets = ", ".join(
            f"{d.target} (weight {d.weight:g}"
            + ("" if blueprint.router.is_ready(d.provider) else ", not ready")
            + ")"
            for d in deployments
        )
        print(f"  {alias} -> {targets}", file=out)
    _print_prices(blueprint, out)
    print("plugin chain (outermost first):", file=out)
    if not config.plugins:
        print("  (empty)", file=out)
    for spec, plugin in zip(config.plugins, blueprint.plugins, strict=True):
        print(f"  {spec.ref}: {type(plugin).__module__}.{type(plugin).__name__}", file=out)
    _print_auth(blueprint, out)
    _print_state(config, out)


def _print_state(config: Any, out: TextIO) -> None:
    """Where shared state lives, its policies, and what stays per worker."""
    from proxy.state.config import USES, per_worker, per_worker_message

    state = config.state
    if state.backend == "redis":
        policies = ", ".join(f"{use}: {getattr(state.on_unavailable, use)}" for use in USES)
        where = state.redis.description
        print(f"state: redis {where}; when unavailable: {policies}", file=out)
    else:
        print("state: memory (this process only)", file=out)
    workers = config.server.workers
    uses = per_worker(state, [spec.ref for spec in config.plugins], workers)
    if uses:
        print(f"  WARNING: {per_worker_message(uses, workers)}", file=out)


def _print_auth(blueprint: Any, out: TextIO) -> None:
    """Whether keys are demanded, the admin API, declared keys and teams, the database."""
    auth = blueprint.config.auth
    demanded = any(isinstance(plugin, Authenticates) for plugin in blueprint.plugins)
    admin = "on (master key set)" if auth.master_key else "off (no auth.master_key)"
    print(
        f"auth: {'keys demanded' if demanded else 'open (no auth plugin)'}; admin API {admin}; "
        f"{len(auth.keys)} declared key(s), {len(auth.teams)} declared team(s)",
        file=out,
    )
    from proxy.db import Database

    print(f"database: {Database(blueprint.config.database.url).description}", file=out)


def _print_prices(blueprint: Any, out: TextIO) -> None:
    """The catalog in use and every configured model it cannot price (its cost is unknown)."""
    prices = blueprint.prices
    catalog = prices.catalog
    where = catalog.path if catalog.path is not None else "none found"
    print(f"prices: catalog {where} ({len(catalog)} models)", file=out)
    targets = {d.target: d for ds in blueprint.router.aliases().values() for d in ds}
    for name, provider in blueprint.config.providers.items():
        if provider.default_model:
            targets.setdefault(f"{name}/{provider.default_model}", None)
    for target in sorted(targets):
        provider, _, model = target.partition("/")
        if prices.price(provider, model) is None:
            print(
                f"  NO PRICE: {target} (its cost is unknown; set prices on the deployment,"
                " the provider or in the catalog)",
                file=out,
            )
