"""Loading the plugin chain of a config: built-in names or ``module:Class`` references, each
plugin's options validated against its ``Options`` Struct, and the :class:`PluginContext` a
plugin may ask for (the runtime's shared parts: model resolution, metrics, state, prices,
database, authenticator, ledger).

Any failure to load an entry — an unknown name, an import error, a bad option, a constructor
that raises, an object that is not a plugin, an attribute named like an optional hook
(:data:`proxy.core.plugin.HOOKS`: ``start``, ``close``, ``finished``, ``authenticate``) that
does not have the hook's shape — is a :class:`PluginLoadError` naming the entry's YAML path;
every bad entry is reported at once. A loaded plugin therefore conforms to the protocol of
every hook it has, which the runtime sorts it by once (``isinstance``), never per request.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from proxy.core.canonical import Deployment
from proxy.core.metrics import Metrics
from proxy.core.plugin import HOOKS, Plugin
from proxy.core.redact import Redactor
from proxy.governance.pricing import Catalog, PriceBook
from proxy.guardrails.config import CheckConfig
from proxy.providers.base import Provider
from proxy.runtime.config import PluginSpec
from proxy.state.config import StateConfig
from proxy.state.policy import SharedState
from proxy.state.store import Store

if TYPE_CHECKING:
    from proxy.db import Database
    from proxy.governance.auth.authenticator import Authenticator
    from proxy.governance.ledger.writer import LedgerWriter

BUILTINS: dict[str, str] = {
    "auth": "plugins.auth:AuthPlugin",
    "limits": "plugins.limits:LimitsPlugin",
    "headers": "plugins.headers:HeadersPlugin",
    "cache": "plugins.cache:CachePlugin",
    "retry": "plugins.retry:RetryPlugin",
    "fallback": "plugins.fallback:FallbackPlugin",
    "balance": "plugins.balance:BalancePlugin",
    "cost": "plugins.cost:CostPlugin",
    "masking": "plugins.masking:MaskingPlugin",
    "guardrails": "plugins.guardrails:GuardrailsPlugin",
}
"""The built-in plugins (:mod:`plugins`) by the name a config uses: ``module:Class`` references,
so that the loader imports only what a config uses (an unused plugin costs nothing) and the
gateway never imports :mod:`plugins` itself."""


class PluginContext:
    """What the runtime offers plugins that need more than their options.

    ``resolve(model, provider=None)`` is the router's: the ready deployments of an alias or a
    ``provider/model`` (raising the same errors as for a client's model). ``metrics`` is the
    process's :class:`proxy.core.metrics.Metrics`, ``logger`` its structlog logger. ``state`` is the
    process's :class:`~proxy.state.policy.SharedState`, kept across config reloads (counters,
    health, cache entries live there, not in a snapshot): a plugin reads and writes through
    ``state.store_for(use)`` and applies ``state.policy(use)`` when that raises; ``store`` is
    the shared store itself. When no state is given, an in-memory one (over ``store`` when
    that is given). ``prices`` is the config's :class:`~proxy.governance.pricing.PriceBook` (the
    catalog with the config's overrides; an empty one when none is given).
    ``database`` is the process's SQL database (:mod:`proxy.db`; kept across
    reloads, opened on first use), None when validating only. ``authenticator`` resolves
    client keys to principals for this config (:mod:`proxy.governance.auth.authenticator`); when
    none is given, one that knows no key. ``ledger`` is the process's spend ledger writer
    (:mod:`proxy.governance.ledger.writer`; kept across reloads), None when validating only.
    ``guardrails`` are the config's named checks (its ``guardrails:`` section), ``providers``
    its providers by name (what a moderation check calls); both empty when not given.
    """

    def __init__(
        self,
        resolve: Callable[..., list[Deployment]],
        metrics: Metrics,
        logger: Any,
        store: Store | None = None,
        prices: PriceBook | None = None,
        *,
        state: SharedState | None = None,
        database: Database | None = None,
        authenticator: Authenticator | None = None,
        ledger: LedgerWriter | None = None,
        guardrails: Mapping[str, CheckConfig] | None = None,
        providers: Mapping[str, Provider] | None = None,
    ) -> None:
        self.resolve = resolve
        self.metrics = metrics
        self.logger = logger
        if state is None:
            state = SharedState(StateConfig(), metrics, logger, store=store)
        self.state = state
        self.store: Store = state.store
        self.prices = PriceBook(Catalog({})) if prices is None else prices
        self.database = database
        self.ledger = ledger
        self.guardrails: Mapping[str, CheckConfig] = guardrails or {}
        self.providers: Mapping[str, Provider] = providers or {}
        if authenticator is None:
            from proxy.governance.auth.authenticator import Authenticator
            from proxy.governance.auth.config import AuthConfig

            authenticator = Authenticator(AuthConfig(), None, metrics, logger)
        self.authenticator: Authenticator = authenticator


class PluginLoadError(Exception):
    """A plugin entry cannot be loaded; the message starts with the entry's YAML path."""


def load_plugins(
    specs: Sequence[PluginSpec], builtins: dict[str, str], context: PluginContext | None = None
) -> list[Plugin]:
    """Instantiate every entry; raises :class:`PluginLoadError` listing each bad one (any
    exception a plugin's import or constructor raises is reported as one), with the values an
    entry took from the environment (:attr:`PluginSpec.environment`) redacted.

    ``builtins`` maps built-in names to ``module:Class`` references; any other reference must
    itself be ``module:Class``. ``context`` is given to plugins that ask for it (when None, as
    when only validating, such plugins are built with a context that resolves nothing).
    """
    plugins: list[Plugin] = []
    errors: list[str] = []
    for spec in specs:
        try:
            plugins.append(_load(spec, builtins, context))
        except PluginLoadError as exc:
            # A message may quote an option; options may hold values from the environment.
            message = str(exc)
            errors.append(Redactor(spec.environment).text(message) if spec.environment else message)
    if errors:
        raise PluginLoadError("\n".join(errors))
    return plugins


def _load(spec: PluginSpec, builtins: dict[str, str], context: PluginContext | None) -> Plugin:
    reference = builtins.get(spec.ref, spec.ref)
    module_name, _, class_name = reference.partition(":")
    if not class_name:
        known = ", ".join(sorted(builtins))
        raise PluginLoadError(
            f"{spec.path}: unknown plugin {spec.ref!r} (built-ins: {known}; "
            "a custom plugin is written {plugin: 'module:Class', options: {...}})"
        )
    try:
        cls: Any = getattr(importlib.import_module(module_name), class_name)
    except Exception as exc:  # a module may fail at import with anything
        raise PluginLoadError(f"{spec.path}: cannot import {reference!r}: {exc}") from None
    arguments: list[Any] = []
    options_type = getattr(cls, "Options", None)
    if options_type is None:
        if spec.options:
            raise PluginLoadError(f"{spec.path}: plugin {spec.ref!r} takes no options")
    else:
        try:
            arguments.append(msgspec.convert(spec.options, options_type, strict=False))
        except msgspec.ValidationError as exc:
            raise PluginLoadError(f"{spec.path}: {exc}") from None
    keywords: dict[str, Any] = {}
    if _wants_context(cls):
        keywords["context"] = context or _validation_context()
    try:
        plugin = cls(*arguments, **keywords)
    except ValueError as exc:
        raise PluginLoadError(f"{spec.path}: {exc}") from None
    except Exception as exc:  # a broken plugin must not break a reload or `check`
        raise PluginLoadError(
            f"{spec.path}: cannot build {reference!r}: {type(exc).__name__}: {exc}"
        ) from None
    call = type(plugin).__call__
    if not isinstance(plugin, Plugin) or not inspect.iscoroutinefunction(call):
        raise PluginLoadError(f"{spec.path}: {reference!r} is not a plugin (no async __call__)")
    if "next" not in inspect.signature(call).parameters:
        raise PluginLoadError(
            f"{spec.path}: {reference!r}.__call__ must take the parameters (call, next)"
        )
    _check_hooks(plugin, f"{spec.path}: {reference!r}")
    return plugin


def _check_hooks(plugin: object, entry: str) -> None:
    """Raise :class:`PluginLoadError` (starting with ``entry``) for the first attribute of
    ``plugin`` named like an optional hook that is not one: not callable, a coroutine function
    where a plain one is called (or the reverse), or not callable with the hook's arguments. An
    attribute that is None counts as absent, as for the hooks' protocols."""
    for name, hook in HOOKS.items():
        value = getattr(plugin, name, None)
        if value is None:
            continue
        if (
            not callable(value)
            or inspect.iscoroutinefunction(value) != hook.is_async
            or not _takes(value, hook.arguments)
        ):
            raise PluginLoadError(
                f"{entry}.{name} is not the {name!r} hook, which is `{hook.shape}`"
                " (rename the attribute if it is not meant as one)"
            )
        assert isinstance(plugin, hook.protocol)  # what the runtime sorts plugins by


def _takes(function: Any, arguments: int) -> bool:
    """Whether ``function`` can be called with ``arguments`` positional arguments (True when
    its signature cannot be read)."""
    try:
        inspect.signature(function).bind(*([None] * arguments))
    except TypeError:
        return False
    except ValueError:
        return True
    return True


def _wants_context(cls: type) -> bool:
    try:
        return "context" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def _validation_context() -> PluginContext:
    def resolve(model: str, provider: str | None = None) -> list[Deployment]:
        return []

    return PluginContext(resolve, Metrics(), structlog.get_logger())
