"""Runtime snapshots: everything built from one config, swapped atomically on reload.

A :class:`Snapshot` holds the providers, router, plugin chain, transport and redactor of one
config. Requests take the current snapshot when they start and keep it to the end, so a reload
never changes a request midway. :class:`Runtime` owns the current snapshot; :meth:`Runtime.reload`
builds a new one and swaps one reference, or keeps the old one serving if anything fails — or if
the new config is weaker than the serving one (:func:`weakenings`) and the serving one does not
allow that (``server.allow_weaker_reload``). A retired snapshot closes its sessions and plugins
once its last request has finished.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from proxy.core.errors import GatewayError
from proxy.core.logs import AccessLog, LineWriter, make_logger
from proxy.core.metrics import Metrics
from proxy.core.plugin import (
    Authenticate,
    Closes,
    FinishedRequest,
    Finishes,
    Next,
    Plugin,
    Starts,
    anonymous,
    authentication,
    compose,
)
from proxy.core.redact import Redactor
from proxy.db import Database
from proxy.governance.auth.authenticator import Authenticator
from proxy.governance.ledger.writer import LedgerWriter
from proxy.governance.price_catalog import PricingError, catalog_path, load_catalog
from proxy.governance.pricing import Catalog, PriceBook, ProviderPricing, family_of
from proxy.providers import build_provider
from proxy.providers.base import (
    Capabilities,
    HttpProvider,
    NamesPreset,
    Provider,
    capabilities_of,
)
from proxy.request_logs.capture import capture_for, placed
from proxy.request_logs.service import RequestLogs
from proxy.runtime.config import ConfigError, GatewayConfig, load_config
from proxy.runtime.plugins import PluginContext, PluginLoadError, load_plugins
from proxy.state.config import StateConfig
from proxy.state.policy import SharedState
from proxy.tracing import build_tracer
from proxy.upstream.call import Upstream
from proxy.upstream.router import Router
from proxy.upstream.transport import HttpTransport

ErrorHook = Callable[[str, GatewayError], None]

WEAKENINGS: dict[str, str] = {
    "auth_removed": "it demands no key (no plugin authenticates), where the serving config does",
    "master_key_removed": "it has no auth.master_key (the admin API would be off)",
    "metrics_opened": "it serves /metrics without the master key, where the serving config"
    " demands it (server.require_auth_for_metrics)",
    "no_providers": "it has no providers",
    "no_models": "it has no model aliases",
}
"""What a reload may not drop without the operator's consent (:func:`weakenings`), by reason."""


class ReloadRefused(ConfigError):
    """A valid config that is weaker than the serving one, which does not allow that.

    ``reasons`` are keys of :data:`WEAKENINGS`; ``errors`` say each in words, and how to consent.
    """

    def __init__(self, reasons: tuple[str, ...]) -> None:
        super().__init__(
            [f"refused: {WEAKENINGS[reason]}" for reason in reasons]
            + [
                "to swap in a weaker config, first reload one with server.allow_weaker_reload:"
                " true, or restart the gateway with the new config"
            ]
        )
        self.reasons = reasons


class Blueprint:
    """The parts of a snapshot that need no event loop: validated, ready to describe or build.

    Besides providers (and their :class:`~proxy.providers.base.Capabilities`, decided here once),
    router and plugins it holds the logger of this config (its redactor knows this config's
    keys), its price book, the authenticator of its ``auth`` section and the plugin context.
    Raises :class:`ConfigError` if a plugin or the price catalog cannot be loaded.
    """

    def __init__(self, config: GatewayConfig, loader: Loader) -> None:
        self.config = config
        self.prices = price_book(config, loader.config_path.parent)
        self.providers: dict[str, Provider] = {
            name: build_provider(name, provider_config)
            for name, provider_config in config.providers.items()
        }
        self.capabilities: dict[str, Capabilities] = {
            name: capabilities_of(provider) for name, provider in self.providers.items()
        }
        self.router = Router(
            config.models,
            {name: provider.ready for name, provider in self.providers.items()},
            {
                name: provider_config.default_model
                for name, provider_config in config.providers.items()
                if provider_config.default_model
            },
        )
        secrets = [secret for p in self.providers.values() for secret in p.secrets]
        secrets += [config.auth.master_key, *(declared.key for declared in config.auth.keys)]
        traces = config.telemetry.traces
        if traces is not None and traces.headers:
            secrets += list(traces.headers.values())  # an OTLP back end's API key
        self.redactor = Redactor(secrets)
        self.logger = make_logger(
            self.redactor, level=config.server.log_level, stream=loader.log_lines
        )
        self.access_log = AccessLog(self.redactor, loader.log_lines, level=config.server.log_level)
        self.authenticator = Authenticator(
            config.auth,
            loader.database,
            loader.metrics,
            self.logger,
            on_change=loader.on_key_change,
        )
        context = PluginContext(
            self.router.resolve,
            loader.metrics,
            self.logger,
            loader.state.store,
            self.prices,
            state=loader.state,
            database=loader.database,
            authenticator=self.authenticator,
            ledger=loader.ledger,
            guardrails=config.guardrails,
            providers=self.providers,
        )
        try:
            self.plugins: list[Plugin] = load_plugins(config.plugins, loader.builtins, context)
        except PluginLoadError as exc:
            raise ConfigError(str(exc).splitlines()) from None
        self.request_logs = loader.request_logs
        self.masking_refs = ("masking", loader.builtins.get("masking", "masking"))


def price_book(config: GatewayConfig, config_dir: Path) -> PriceBook:
    """The price book of ``config``: its catalog (see
    :func:`proxy.governance.price_catalog.catalog_path`) and overrides. Raises :class:`ConfigError`
    if the catalog cannot be read or is invalid."""
    path = catalog_path(config.pricing, config_dir)
    try:
        catalog = Catalog({}) if path is None else load_catalog(path)
    except PricingError as exc:
        raise ConfigError(
            [f"$.pricing.catalog: {line}" for line in str(exc).splitlines()]
        ) from None
    providers = {
        name: ProviderPricing(
            family_of(
                str(type(provider).__struct_config__.tag),
                provider.preset if isinstance(provider, NamesPreset) else None,
            ),
            config.provider_prices.get(name, {}),
        )
        for name, provider in config.providers.items()
    }
    return PriceBook(catalog, providers, config.deployment_prices)


class Loader:
    """Loads one config file into blueprints, with what every snapshot of it shares: the
    metrics, the log stream, the shared state (so that counters outlive a reload; in memory
    when none is given), the database and the spend ledger writer (None when only validating)."""

    def __init__(
        self,
        config_path: Path,
        builtins: dict[str, str],
        metrics: Metrics,
        log_stream: IO[str] | None = None,
        state: SharedState | None = None,
        database: Database | None = None,
        ledger: LedgerWriter | None = None,
        request_logs: RequestLogs | None = None,
    ) -> None:
        self.config_path = config_path
        self.request_logs = request_logs
        self.builtins = builtins
        self.metrics = metrics
        self.log_stream = log_stream
        self.state = SharedState(StateConfig(), metrics) if state is None else state
        self.log_lines = LineWriter(log_stream or sys.stdout)  # access lines: one write a turn
        self.database = database
        self.ledger = ledger
        self.on_key_change: Callable[[str | None], None] | None = None
        """Where the authenticators of this config announce key changes (None: nowhere)."""

    def load(self) -> Blueprint:
        """Read and validate the file and its plugins, reporting every error at once.

        Raises :class:`ConfigError` listing config errors and plugin errors together.
        """
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            try:
                load_plugins(exc.plugins, self.builtins)
            except PluginLoadError as plugin_errors:
                raise ConfigError([*exc.errors, *str(plugin_errors).splitlines()]) from None
            raise
        return Blueprint(config, self)


class Snapshot:
    """One config's live runtime. ``chain`` is the whole plugin chain ending at ``upstream``;
    ``authenticate`` identifies a caller outside it (:func:`proxy.core.plugin.authentication`:
    the ``authenticate`` hook of the first plugin that has one, else the anonymous caller).

    ``demands_key`` is True when a plugin has that hook (the ``auth`` plugin): every client
    request must then pass ``authenticate`` before its body is read; False when the gateway is
    open. The plugins are sorted by their optional hooks once, here (the loader has checked
    their shapes; :mod:`proxy.core.plugin`): ``finishers`` are the ``finished`` hooks, which the
    app calls once per request, ``starters`` and ``closers`` the plugins with ``start`` and
    ``close``. ``capabilities`` are each provider's optional abilities
    (:class:`~proxy.providers.base.Capabilities`). ``weakened`` is what this snapshot dropped
    from the one it replaced (reasons of :data:`WEAKENINGS`), which only a serving config with
    ``allow_weaker_reload`` lets through. ``tracer`` is this config's
    (:func:`proxy.tracing.build_tracer`: off without ``telemetry.traces``), closed with the
    snapshot; the chain's links and the upstream attempts open their spans with it.
    """

    def __init__(self, blueprint: Blueprint, on_upstream_error: ErrorHook) -> None:
        """Build the transport and chain. Must run inside the event loop."""
        self.config = blueprint.config
        self.providers = blueprint.providers
        self.router = blueprint.router
        self.prices = blueprint.prices
        self.redactor = blueprint.redactor
        self.logger = blueprint.logger
        self.access_log = blueprint.access_log
        self.plugins = blueprint.plugins
        self.authenticator = blueprint.authenticator
        self.authenticate: Authenticate = authentication(self.plugins)
        self.demands_key = self.authenticate is not anonymous
        self.capabilities = blueprint.capabilities
        http: dict[str, HttpProvider] = {
            name: capabilities.http
            for name, capabilities in self.capabilities.items()
            if capabilities.http is not None
        }
        self.transport = HttpTransport(http, self.capabilities)
        self.tracer = build_tracer(self.config.telemetry.traces)
        on_dropped = None
        if self.config.server.log_level == "debug":
            logger = self.logger

            def on_dropped(provider: str, model: str, fields: list[str]) -> None:
                logger.debug(
                    "request_fields_dropped", provider=provider, model=model, fields=fields
                )

        upstream = Upstream(
            self.providers,
            self.transport,
            self.redactor,
            on_upstream_error,
            on_dropped=on_dropped,
            capabilities=self.capabilities,
            tracer=self.tracer,
        )
        self.upstream = upstream
        capture = capture_for(  # the request logs' link, just inside masking
            blueprint.request_logs,
            self.config.telemetry.request_logs.store,
            self.redactor,
            self.demands_key,
        )
        links = self.plugins
        if capture is not None:
            refs = [spec.ref for spec in self.config.plugins]
            links = placed(self.plugins, refs, blueprint.masking_refs, capture)
        names = {
            id(plugin): spec.ref.rpartition(":")[2]
            for plugin, spec in zip(self.plugins, self.config.plugins, strict=True)
        }
        link_names = [names.get(id(link)) for link in links]  # the capture link: no span
        self.chain: Next = compose(links, upstream, self.tracer, link_names)
        self.litellm_headers = self.config.compat.litellm  # the app adds them to every reply
        self.finishers: list[Callable[[FinishedRequest], None]] = [
            plugin.finished for plugin in self.plugins if isinstance(plugin, Finishes)
        ]
        if capture is not None:
            self.finishers.append(capture.finished)
        self.starters: list[Starts] = [p for p in self.plugins if isinstance(p, Starts)]
        self.closers: list[Closes] = [p for p in self.plugins if isinstance(p, Closes)]
        self.weakened: tuple[str, ...] = ()
        self._active = 0
        self._retired = False
        self._closed: asyncio.Future[None] | None = None

    async def start(self) -> None:
        """Await every plugin's ``start()`` hook, in chain order; one failing is logged and the
        rest still start."""
        for plugin in self.starters:
            try:
                await plugin.start()
            except Exception:
                self.logger.exception("plugin_start_failed", plugin=type(plugin).__qualname__)

    @property
    def ready(self) -> bool:
        """At least one provider can serve."""
        return any(p.ready for p in self.providers.values())

    def enter(self) -> None:
        """A request starts on this snapshot."""
        self._active += 1

    def leave(self) -> None:
        """A request on this snapshot finished; the last one out of a retired snapshot closes it."""
        self._active -= 1
        if self._retired and self._active == 0:
            self._schedule_close()

    def retire(self) -> None:
        """No new request will start here; close once the in-flight ones are done."""
        self._retired = True
        if self._active == 0:
            self._schedule_close()

    async def close(self) -> None:
        """Close sessions and plugins now (idempotent)."""
        if self._closed is None:
            self._schedule_close()
        assert self._closed is not None
        await self._closed

    def _schedule_close(self) -> None:
        if self._closed is None:
            self._closed = asyncio.ensure_future(self._close())

    @property
    def closed(self) -> bool:
        """Whether closing has finished."""
        return self._closed is not None and self._closed.done()

    async def _close(self) -> None:
        """Close the transport and every plugin; one failing is logged, the rest still close."""
        try:
            await self.transport.close()
        except Exception:
            self.logger.exception("transport_close_failed")
        for plugin in self.closers:
            try:
                await plugin.close()
            except Exception:
                self.logger.exception("plugin_close_failed", plugin=type(plugin).__qualname__)
        try:
            await self.tracer.close()  # after the plugins: their last spans are exported too
        except Exception:
            self.logger.exception("tracer_close_failed")


def weakenings(serving: Snapshot, fresh: Blueprint) -> tuple[str, ...]:
    """What ``fresh`` would drop from ``serving`` that protects the gateway or keeps it serving:
    the reasons of :data:`WEAKENINGS`, in that order (empty when nothing).

    A key is demanded when a plugin authenticates (:attr:`Snapshot.demands_key`), whatever its
    name or place in the chain: the app runs it before any plugin. ``/metrics`` is opened when
    ``server.require_auth_for_metrics`` is dropped. Providers and aliases count as dropped only
    when ``fresh`` has none at all, where ``serving`` had some.
    """
    now, then = fresh.config, serving.config
    dropped = {
        "auth_removed": serving.demands_key and authentication(fresh.plugins) is anonymous,
        "master_key_removed": bool(then.auth.master_key) and not now.auth.master_key,
        "metrics_opened": then.server.require_auth_for_metrics
        and not now.server.require_auth_for_metrics,
        "no_providers": bool(then.providers) and not now.providers,
        "no_models": bool(then.models) and not now.models,
    }
    return tuple(reason for reason in WEAKENINGS if dropped[reason])


class Runtime:
    """Owns the current snapshot of a config file and swaps it on reload."""

    def __init__(self, loader: Loader, snapshot: Snapshot, on_upstream_error: ErrorHook) -> None:
        self.loader = loader
        self.snapshot = snapshot
        self._on_upstream_error = on_upstream_error
        self.starting: asyncio.Future[None] | None = None  # the reloaded snapshot's start()
        self._retired: list[Snapshot] = []  # swapped out, possibly not closed yet

    def reload(self) -> Snapshot:
        """Load the config file again and swap in its snapshot.

        Raises :class:`ConfigError` (the current snapshot stays) if the file is invalid, and
        :class:`ReloadRefused` (a ConfigError; the current snapshot stays) if it is weaker than
        the serving config (:func:`weakenings`) and that does not set
        ``server.allow_weaker_reload``; when it does, the new snapshot's ``weakened`` says what
        was dropped.
        """
        blueprint = self.loader.load()
        weakened = weakenings(self.snapshot, blueprint)
        if weakened and not self.snapshot.config.server.allow_weaker_reload:
            raise ReloadRefused(weakened)
        fresh = Snapshot(blueprint, self._on_upstream_error)
        fresh.weakened = weakened
        previous, self.snapshot = self.snapshot, fresh
        previous.retire()
        self._retired = [s for s in self._retired if not s.closed]
        self._retired.append(previous)
        return fresh

    async def close(self) -> None:
        """Close the current snapshot and every retired one (requests still on them fail),
        then write out the log lines still held."""
        for snapshot in (*self._retired, self.snapshot):
            await snapshot.close()
        self._retired.clear()
        self.loader.log_lines.drain()
