"""The plugin contract and the chain runner.

A plugin is one link of the chain: an object with ``async __call__(call, next) -> Reply``
(:class:`Plugin`). It may change the call, answer without calling ``next`` (a cache hit, a
refusal), call ``next`` several times (retry, fallback), or wrap the reply — for a stream, by
returning a Reply whose ``stream`` wraps the inner one (keeping the fast paths of
:mod:`proxy.core.streams`, or knowingly giving them up). Links run in YAML order, the first entry
outermost; the innermost ``next`` is the upstream call. An empty chain *is* the upstream call:
it costs nothing.

A plugin class may declare ``Options``, a msgspec Struct (``forbid_unknown_fields=True``
recommended) that its YAML options are validated against at load; it is then built as
``cls(options)``, otherwise as ``cls()`` and any option is an error. A constructor that has a
``context`` parameter also receives the :class:`~proxy.runtime.plugins.PluginContext` (model
resolution, metrics, logger).

Optional hooks, each a protocol here (:data:`HOOKS`), found once when the plugin is loaded —
an attribute named like a hook that does not have its shape is a load error — and never looked
up per request:

- :class:`Starts` — ``async def start()``, awaited before its snapshot serves at start-up (and
  run beside the new snapshot after a reload); a failure is logged, the others still start.
- :class:`Closes` — ``async def close()``, awaited when the runtime snapshot that owns it is
  retired; a failure is logged, the others still close.
- :class:`Finishes` — ``def finished(request: FinishedRequest) -> None``, called by the app
  once per request that ran on its snapshot, after the answer. It must not block and should
  not raise: an exception is logged and the other hooks still run.
- :class:`Authenticates` — ``async def authenticate(headers) -> Principal``, for a plugin that
  establishes who is calling (``auth``), raising a :class:`~proxy.core.errors.GatewayError`
  (401) for a bad key. The app then demands a key on every client request before reading its
  body, and what it does outside the chain — ``GET`` / ``DELETE /v1/responses/{id}``, the
  stored conversation a request continues — knows the caller the same way. The chain's
  :data:`Authenticate` is that of the first plugin that offers one (:func:`authentication`),
  else :func:`anonymous`.
- :class:`DescribesSpan` — ``def span_attributes(call) -> Mapping[str, AttributeValue]``, for a
  plugin whose decision belongs on its span when tracing is on (the cache's hit or miss): read
  after the plugin's link returns, set on the link's span. It must not block and should not
  raise: an exception is ignored (tracing never fails a request).

With a tracer that is on (:mod:`proxy.core.tracing`), :func:`compose` opens one span per link,
``crossway.plugin {name}``, current while the plugin runs, so that what the plugin calls
(``next``: the upstream attempts of a retry or a fallback) are its children; a link that raises
marks its span failed with the error's code. With tracing off the links are the plain ones.

One vocabulary: *authenticate* is the hook and the callable (:data:`Authenticate`);
:func:`authentication` finds it in a chain. The governance
:class:`~proxy.governance.auth.authenticator.Authenticator` is another thing: the resolver of
keys to principals that the ``auth`` plugin's ``authenticate`` uses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import msgspec

from proxy.core.canonical import ANONYMOUS, Call, Principal, Usage
from proxy.core.errors import GatewayError
from proxy.core.reply import Reply
from proxy.core.tracing import NO_TRACER, AttributeValue, Span, Tracer

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
"""``await authenticate(headers) -> Principal``: who is calling, from a request's headers;
raises a :class:`~proxy.core.errors.GatewayError` (401) for a bad key."""


@runtime_checkable
class Plugin(Protocol):
    """One link of the chain. Raising a :class:`proxy.core.errors.GatewayError` answers the client
    with that error; any other exception is a 500 that hides its details."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Handle ``call``, usually by awaiting ``next(call)`` once or more."""
        ...


def compose(
    plugins: Sequence[Plugin],
    upstream: Next,
    tracer: Tracer = NO_TRACER,
    names: Sequence[str | None] = (),
) -> Next:
    """The chain as one callable: ``plugins[0]`` outermost, ``upstream`` innermost. With
    ``tracer`` on, each link opens a span named after its plugin (``names``, one per plugin;
    the class's name where missing; ``None``: a link of the gateway's own that opens none)."""
    chain = upstream
    for index in reversed(range(len(plugins))):
        plugin = plugins[index]
        name = names[index] if index < len(names) else type(plugin).__name__
        if tracer.enabled and name is not None:
            chain = _traced_link(plugin, chain, name, tracer)
        else:
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


def _traced_link(plugin: Plugin, following: Next, name: str, tracer: Tracer) -> Next:
    """:func:`_link` inside a span of its own (see the module docstring)."""
    handle = plugin.__call__
    describe = plugin.span_attributes if isinstance(plugin, DescribesSpan) else None
    span_name = f"crossway.plugin {name}"
    attributes: dict[str, AttributeValue] = {"crossway.plugin": name}

    async def link(call: Call) -> Reply:
        span = tracer.child_span(span_name, attributes)
        try:
            with tracer.activate(span):
                reply = await handle(call, next=following)
        except GatewayError as error:
            span.fail(error.code)
            raise
        except BaseException as error:
            span.fail(type(error).__qualname__)
            raise
        finally:
            if describe is not None and span.recording:
                _describe(span, describe, call)
            span.end()
        return reply

    return link


def _describe(
    span: Span, describe: Callable[[Call], Mapping[str, AttributeValue]], call: Call
) -> None:
    try:
        span.set_many(describe(call))
    except Exception:  # a plugin's description never fails its request
        return


@runtime_checkable
class Starts(Protocol):
    """A plugin with a ``start`` hook (see the module docstring)."""

    async def start(self) -> None:
        """Get ready before the snapshot serves (connect, warm a cache)."""
        ...


@runtime_checkable
class Closes(Protocol):
    """A plugin with a ``close`` hook (see the module docstring)."""

    async def close(self) -> None:
        """Release what the plugin holds; its snapshot is retired."""
        ...


@runtime_checkable
class Finishes(Protocol):
    """A plugin with a ``finished`` hook (see the module docstring)."""

    def finished(self, request: FinishedRequest) -> None:
        """One request of the plugin's snapshot is over; must not block."""
        ...


@runtime_checkable
class Authenticates(Protocol):
    """A plugin that establishes who is calling (see the module docstring)."""

    async def authenticate(self, headers: Mapping[str, str]) -> Principal:
        """The caller of a request with these headers; a GatewayError (401) for a bad key."""
        ...


@runtime_checkable
class DescribesSpan(Protocol):
    """A plugin that puts its decision on its span (see the module docstring)."""

    def span_attributes(self, call: Call) -> Mapping[str, AttributeValue]:
        """Attributes for the plugin's span, once its link has returned or raised."""
        ...


class Hook(NamedTuple):
    """One optional hook of a plugin: its protocol, whether it is a coroutine function, the
    number of positional arguments it is called with, and its shape in words."""

    protocol: type
    is_async: bool
    arguments: int
    shape: str


HOOKS: dict[str, Hook] = {
    "start": Hook(Starts, True, 0, "async def start(self) -> None"),
    "close": Hook(Closes, True, 0, "async def close(self) -> None"),
    "finished": Hook(Finishes, False, 1, "def finished(self, request: FinishedRequest) -> None"),
    "authenticate": Hook(
        Authenticates, True, 1, "async def authenticate(self, headers) -> Principal"
    ),
    "span_attributes": Hook(
        DescribesSpan, False, 1, "def span_attributes(self, call) -> Mapping[str, AttributeValue]"
    ),
}
"""The optional hooks by attribute name; the loader
(:func:`proxy.runtime.plugins.load_plugins`) checks every plugin against them once."""


async def anonymous(headers: Mapping[str, str]) -> Principal:
    """The caller when no plugin establishes one: :data:`~proxy.core.canonical.ANONYMOUS`."""
    return ANONYMOUS


def authentication(plugins: Sequence[Plugin]) -> Authenticate:
    """The ``authenticate`` hook of the first plugin that offers one (:class:`Authenticates`),
    else :func:`anonymous`. Called when a chain is built, never per request."""
    for plugin in plugins:
        if isinstance(plugin, Authenticates):
            return plugin.authenticate
    return anonymous
