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

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from proxy.core.canonical import ANONYMOUS, Call, Principal, Usage
from proxy.core.reply import Reply

if TYPE_CHECKING:
    pass

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


@runtime_checkable
class Plugin(Protocol):
    """One link of the chain. Raising a :class:`proxy.core.errors.GatewayError` answers the client
    with that error; any other exception is a 500 that hides its details."""

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Handle ``call``, usually by awaiting ``next(call)`` once or more."""
        ...


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
