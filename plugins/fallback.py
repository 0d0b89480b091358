"""``fallback``: when a model fails, ask the next model of its chain, translating to its provider.

Chains are ordered lists of models (aliases or ``provider/model``): per model in ``chains``,
or per request (Bifrost's and orq's ``fallbacks`` option), which replaces the configured chain
when ``request_fallbacks`` allows it (at most ``max_request_fallbacks`` entries are used).
Which failures move on to the next model is ``on_kinds`` (error kinds; default rate limits,
overload, upstream 5xx, connection failures, timeouts, no ready deployment, and upstream
credential failures). Two failures have their own one-step routes, as LiteLLM's
``context_window_fallbacks`` and ``content_policy_fallbacks``: a context-window overflow goes to
``on_context_window[model]`` (a larger-context model) and a content-policy refusal to
``on_content_policy[model]``; without such an entry these errors reach the client. Any other
error (a bad request, the client's own auth) is final. A passed deadline
(:class:`~proxy.core.errors.DeadlineExceeded`) is final too: the retry plugin's deadline covers
every model. A failure after a stream's first chunk never falls back (the stream is the reply).

``order`` is the order a chain is tried in: ``config`` (as written, the default) or ``cost``:
cheapest first for the request's expected token mix (its estimated prompt and ``max_tokens``,
``expected_output_tokens`` when it sets none), a model costing what its cheapest ready
deployment charges at the config's prices (:mod:`proxy.governance.pricing`); equal prices keep the
written order, and models without a price come last.

A fallback call is a copy of the call with the next model and its deployments (resolved like a
client's model, ignoring a client's provider pin and per-request load-balancer targets, which
chose the primary). A model that cannot be resolved (unknown, or no ready provider) is skipped,
and so is one the caller's key may not use (``call.principal``): a configured chain never
leads outside a key's allow-list.
When every model failed, the last model's error is raised, ``attempts`` totalled.

The reply carries ``x-crossway-attempts`` (every upstream call) and, when a fallback served,
``x-crossway-fallback`` with the model that answered (also recorded in the call's
``accounting.fallback`` for the spend ledger); ``crossway_fallbacks_total{from_model,
to_model}`` counts each step. Place it outside ``retry`` so that each model's retries are spent
first: ``fallback`` → ``retry`` → ``balance``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from proxy.core.canonical import Call, Deployment
from proxy.core.errors import (
    DeadlineExceeded,
    ErrorKind,
    GatewayError,
    ModelNotFound,
    NoReadyDeployment,
)
from proxy.core.headers import ATTEMPTS_HEADER, FALLBACK_HEADER
from proxy.core.plugin import Next
from proxy.core.reply import Reply
from proxy.core.token_estimate import expected_tokens
from proxy.governance.pricing import expected_nanos
from proxy.runtime.plugins import PluginContext

_DEFAULT_KINDS: tuple[ErrorKind, ...] = (
    "rate_limited",
    "overloaded",
    "upstream_server",
    "connection",
    "timeout",
    "not_ready",
    "auth",
)


class FallbackConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """See the module docstring."""

    chains: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    on_context_window: dict[str, str] = msgspec.field(default_factory=dict)
    on_content_policy: dict[str, str] = msgspec.field(default_factory=dict)
    on_kinds: tuple[ErrorKind, ...] = _DEFAULT_KINDS
    request_fallbacks: bool = True
    max_request_fallbacks: Annotated[int, Meta(ge=0, le=10)] = 3
    order: Literal["config", "cost"] = "config"
    expected_output_tokens: Annotated[int, Meta(ge=0)] = 256


class FallbackPlugin:
    """Tries the models of a call's fallback chain in order; see the module docstring."""

    Options = FallbackConfig

    def __init__(self, options: FallbackConfig, context: PluginContext) -> None:
        """Raises :class:`ValueError` if a configured model cannot be resolved (unknown to the
        router, or not a valid name); a model without a ready provider is accepted."""
        self._options = options
        self._kinds = frozenset(options.on_kinds)
        self._resolve = context.resolve
        self._metrics = context.metrics
        self._prices = context.prices
        models = [
            *(m for chain in options.chains.values() for m in chain),
            *options.on_context_window.values(),
            *options.on_content_policy.values(),
        ]
        for model in models:
            try:
                context.resolve(model)
            except ModelNotFound:
                raise ValueError(f"fallback model {model!r} is not a configured model") from None
            except NoReadyDeployment:
                continue
            except GatewayError as error:  # an empty name without a default, a control character
                raise ValueError(f"fallback model {model!r}: {error.message}") from None

    async def __call__(self, call: Call, next: Next) -> Reply:
        """Answer with the first model of the chain that succeeds; see the module docstring."""
        model = call.model
        chain: Iterator[str] | None = None  # made on the first failure: most calls succeed
        tried = {model}
        attempts = 0
        current = call
        while True:
            try:
                reply = await next(current)
            except GatewayError as error:
                attempts += error.attempts
                error.attempts = attempts
                if chain is None:
                    chain = self._chain(call)
                target = self._next_model(error, model, chain, tried, call)
                if target is None:
                    raise
                metrics = self._metrics
                metrics.fallbacks(metrics.model_label(model), metrics.model_label(target[0])).inc()
                model = target[0]
                current = _retarget(call, *target)
                continue
            reply.attempts += attempts
            reply.headers[ATTEMPTS_HEADER] = str(reply.attempts)
            if current is not call:
                reply.headers[FALLBACK_HEADER] = model
                call.accounting.fallback = model
            return reply

    def _chain(self, call: Call) -> Iterator[str]:
        requested = call.options.fallbacks
        if requested is not None and self._options.request_fallbacks:
            chain: Sequence[str] = requested[: self._options.max_request_fallbacks]
        else:
            chain = self._options.chains.get(call.model, ())
        if self._options.order == "cost" and len(chain) > 1:
            mix = expected_tokens(call, self._options.expected_output_tokens)
            chain = sorted(chain, key=lambda model: self._expected_price(model, mix))
        return iter(chain)

    def _expected_price(self, model: str, mix: tuple[int, int]) -> tuple[bool, int]:
        """(unpriced, nano-dollars) of ``model``'s cheapest ready deployment for ``mix``."""
        try:
            deployments = self._resolve(model)
        except GatewayError:
            return (True, 0)
        prices = [expected_nanos(self._prices, d, mix) for d in deployments]
        known = [price for price in prices if price is not None]
        return (False, min(known)) if known else (True, 0)

    def _next_model(
        self, error: GatewayError, failed: str, chain: Iterator[str], tried: set[str], call: Call
    ) -> tuple[str, list[Deployment]] | None:
        """The next model to try and its deployments, or None when ``error`` is final."""
        if isinstance(error, DeadlineExceeded):
            return None
        if error.kind == "context_window":
            candidates: Iterator[str] = iter(_one(self._options.on_context_window.get(failed)))
        elif error.kind == "content_policy":
            candidates = iter(_one(self._options.on_content_policy.get(failed)))
        elif error.kind in self._kinds:
            candidates = chain
        else:
            return None
        allows = call.principal.allows
        for model in candidates:
            if model in tried or not allows(model):
                continue
            tried.add(model)
            try:
                deployments = self._resolve(model)
            except GatewayError:
                continue
            return model, deployments
        return None


def _one(model: str | None) -> tuple[str, ...]:
    return () if model is None else (model,)


def _retarget(call: Call, model: str, deployments: list[Deployment]) -> Call:
    """A copy of ``call`` for ``model``, without the choices that were made for the primary."""
    options = call.options
    if options.load_balancer is not None or options.provider is not None:
        options = msgspec.structs.replace(options, load_balancer=None, provider=None)
    return msgspec.structs.replace(
        call, model=model, deployments=deployments, deployment=None, options=options
    )
