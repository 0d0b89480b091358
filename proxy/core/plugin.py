"""The plugin contract and the chain runner.

A plugin is one link of the chain: an object with ``async __call__(call, next) -> Reply``. It may
change the call, answer without calling ``next`` (a cache hit, a refusal), call ``next`` several
times (retry, fallback), or wrap the reply — for a stream, by returning a Reply whose ``stream``
wraps the inner one. Links run in YAML order, the first entry outermost; the innermost ``next``
is the upstream call. An empty chain *is* the upstream call: it costs nothing.

A plugin class may declare ``Options``, a msgspec Struct (``forbid_unknown_fields=True``
recommended) that its YAML options are validated against at load; it is then built as
``cls(options)``, otherwise as ``cls()`` and any option is an error. A constructor that has a
``context`` parameter also receives the :class:`PluginContext` (model resolution, metrics,
logger). It may define ``async def close()``, awaited when the runtime snapshot that owns it is
retired, ``async def start()``, awaited before its snapshot serves at start-up (and run
beside the new snapshot after a reload), and
``def finished(request: FinishedRequest) -> None``, called by the app once per
request that ran on its snapshot, after the answer (it must not block and should not raise: an
exception is logged and the other hooks still run). A plugin that establishes who is calling
(``auth``) may also define
``async def authenticate(headers) -> Principal``, raising a :class:`~proxy.core.errors.GatewayError`
(401) for a bad key, so that what the app does outside the chain — ``GET`` / ``DELETE
/v1/responses/{id}``, the stored conversation a request continues — knows the caller the same
way (:func:`authenticator`).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec
import structlog

from proxy.core.canonical import ANONYMOUS, Call, Deployment, Principal, Reply, Usage
from proxy.core.metrics import Metrics
from proxy.core.redact import Redactor
from proxy.governance.pricing import Catalog, PriceBook
from proxy.runtime.config import PluginSpec
from proxy.state.config import StateConfig
from proxy.state.policy import SharedState
from proxy.state.store import Store

if TYPE_CHECKING:
    from proxy.db import Database
    from proxy.governance.auth.authenticator import Authenticator
    from proxy.governance.ledger.writer import LedgerWriter

Next = Callable[[Call], Awaitable[Reply]]


class FinishedRequest(msgspec.Struct, gc=False):
    """One request as the app finalised it, for plugins that keep a record of every request.

    The app builds it once the answer is complete (or failed, or the client went away) and
    gives it to the ``finished`` hook of every plugin of the snapshot the request ran on —
    whether or not the request reached that plugin. ``call`` is None when the body could not be
    decoded; ``principal`` is who called (known before the body is read, so also then).
    ``provider`` / ``upstream_model`` name the deployment that answered (None when
    none did); ``usage`` is what the reply reported; ``status`` the HTTP status sent (499: the
    client went away); ``duration`` seconds since the request arrived; ``ended_at`` the wall
    time (``time.time()``) at the end; ``attempts`` the upstream calls made.
    """

    request_id: str
    dialect: str
    call: Call | None
    principal: Principal
    status: int
    provider: str | None
    upstream_model: str | None
    usage: Usage | None
    error_code: str | None
    duration: float
    ended_at: float
    attempts: int


Authenticate = Callable[[Mapping[str, str]], Awaitable[Principal]]


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
        if authenticator is None:
            from proxy.governance.auth.authenticator import Authenticator
            from proxy.governance.auth.config import AuthConfig

            authenticator = Authenticator(AuthConfig(), None, metrics, logger)
        self.authenticator: Authenticator = authenticator


@runtime_checkable
class Plugin(Protocol):
    """One link of the chain. Raising a :class:`proxy.core.errors.GatewayError` answers the client
    with that error; any other exception is a 500 that hides its details."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Handle ``call``, usually by awaiting ``next(call)`` once or more."""
        ...


class PluginLoadError(Exception):
    """A plugin entry cannot be loaded; the message starts with the entry's YAML path."""


def compose(plugins: Sequence[Plugin], upstream: Next) -> Next:
    """The chain as one callable: ``plugins[0]`` outermost, ``upstream`` innermost."""
    chain = upstream
    for plugin in reversed(plugins):
        chain = _link(plugin, chain)
    return chain


def _link(plugin: Plugin, following: Next) -> Next:
    """``plugin`` with ``following`` as its ``next``. A closure over the bound ``__call__``,
    not ``functools.partial(plugin, next=…)``: a partial with a keyword builds a keyword dict
    on every call, which made each link about twice as dear."""
    handle = plugin.__call__

    def link(call: Call) -> Awaitable[Reply]:
        return handle(call, next=following)

    return link


async def anonymous(headers: Mapping[str, str]) -> Principal:
    """The caller when no plugin establishes one: :data:`~proxy.core.canonical.ANONYMOUS`."""
    return ANONYMOUS


def authenticator(plugins: Sequence[Plugin]) -> Authenticate:
    """The ``authenticate`` of the first plugin that offers one, else :func:`anonymous`."""
    for plugin in plugins:
        authenticate = getattr(plugin, "authenticate", None)
        if authenticate is not None:
            return authenticate  # type: ignore[no-any-return]
    return anonymous


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
    return plugin


def _wants_context(cls: type) -> bool:
    try:
        return "context" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def _validation_context() -> PluginContext:
    def resolve(model: str, provider: str | None = None) -> list[Deployment]:
        return []

    return PluginContext(resolve, Metrics(), structlog.get_logger())
