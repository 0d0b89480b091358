"""``auth``: every request needs a key, and may use only the models its key allows.

With this plugin in the chain (``- auth: {}``, first), the gateway demands a key on every
dialect route: the app authenticates each request with the plugin's ``authenticate`` hook
(:class:`proxy.core.plugin.Authenticates`) before it reads the body
(:attr:`proxy.runtime.snapshot.Snapshot.demands_key`), so an unauthenticated client costs no
decoding and learns nothing about models; the principal is then on ``call.principal``. Called
on a call that carries no principal yet (a chain run without the app), the plugin
authenticates it itself, from ``call.client_headers``.

The plugin then checks every model the request names against the principal's allow-list: the
model, the Bifrost/orq ``fallbacks`` and orq's ``load_balancer.models``. One that is not
allowed is a 403 ``model_not_allowed`` naming it (counted as
``crossway_auth_failures_total{reason="model_not_allowed"}``). Models that the config adds
(fallback chains) are skipped by the fallback plugin when not allowed, never served.

Keys, teams and failures are :mod:`proxy.governance.auth.authenticator`'s; without this plugin every
call is :data:`~proxy.core.canonical.ANONYMOUS` and the gateway is open.
"""

from __future__ import annotations

from proxy.core.canonical import ANONYMOUS, Call, Principal
from proxy.core.errors import PermissionDenied
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.runtime.plugins import PluginContext


class AuthPlugin:
    """See the module docstring. ``authenticate(headers)`` is its ``authenticate`` hook, the
    chain's (:func:`proxy.core.plugin.authentication`): the governance
    :class:`~proxy.governance.auth.authenticator.Authenticator`'s key resolution."""

    def __init__(self, *, context: PluginContext) -> None:
        self.authenticate = context.authenticator.authenticate
        self._refused = context.metrics.auth_failures("model_not_allowed")

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Authenticate ``call`` unless the app did, check its models, then call ``next``."""
        principal = call.principal
        if principal is ANONYMOUS:
            principal = call.principal = await self.authenticate(call.client_headers)
        models = principal.models
        if models is not None:
            options = call.options
            if call.model not in models or options.fallbacks or options.load_balancer:
                self._check_models(call, principal)
        return await next(call)

    def _check_models(self, call: Call, principal: Principal) -> None:
        """Raise :class:`PermissionDenied` for the first model ``call`` names that
        ``principal`` may not use."""
        self._check(principal, call.model, "model")
        options = call.options
        for index, fallback in enumerate(options.fallbacks or ()):
            self._check(principal, fallback, f"fallbacks[{index}]")
        for index, target in enumerate(options.load_balancer or ()):
            self._check(principal, target.model, f"load_balancer.models[{index}]")

    def _check(self, principal: Principal, model: str, param: str) -> None:
        if not principal.allows(model):
            self._refused.inc()
            raise PermissionDenied(
                f"this API key may not use the model {model!r}",
                code="model_not_allowed",
                param=param,
            )
