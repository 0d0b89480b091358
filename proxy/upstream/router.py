"""Model addressing: from what a client asks for to the deployments that can serve it.

A client names a model by alias (a key of ``models:``) or directly as ``provider/model``. Aliases
win when a name is both. Only deployments whose provider is ready are candidates.

A client that names no model (Fabro allows it) gets the default (:meth:`Router.default_model`):
the ``default_model`` of the first ready provider, in config order, that sets one; failing that,
the first alias, in config order, with a ready deployment. A provider pin narrows both to that
provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from msgspec import Meta, Struct

from proxy.core.canonical import Deployment
from proxy.core.errors import BadRequest, ModelNotFound, NoReadyDeployment
from proxy.governance.price_catalog import PriceSpec

MAX_MODEL_NAME = 256
MAX_REMEMBERED_DIRECT = 1024
"""How many ``provider/model`` names a router keeps the resolved deployment of (clients choose
the names, so the memo is bounded; a name past it is resolved afresh each time)."""


class DeploymentConfig(Struct, frozen=True, forbid_unknown_fields=True):
    """One deployment of a model alias: ``provider/model``, its load-balancing weight and,
    optionally, its own ``prices`` (USD per million tokens; see :mod:`proxy.governance.pricing`).
    ``batch`` says how a batch of this alias runs (:mod:`proxy.batches`): ``gateway`` (each
    line through the chain) or ``native`` (the provider's own batch API, OpenAI's shape)."""

    target: str
    weight: Annotated[float, Meta(gt=0)] = 1.0
    prices: PriceSpec | None = None
    batch: Literal["gateway", "native"] = "gateway"


class Router:
    """Resolves model names; built once per runtime snapshot, and immutable but for a bounded
    memo of the ``provider/model`` names it resolved (their :class:`Deployment` is frozen)."""

    def __init__(
        self,
        aliases: Mapping[str, tuple[DeploymentConfig, ...]],
        ready: Mapping[str, bool],
        default_models: Mapping[str, str] | None = None,
    ) -> None:
        """``aliases`` from the config; ``ready`` maps every provider name to its readiness;
        ``default_models`` maps providers (in config order) to their default upstream model."""
        self._ready = dict(ready)
        self._defaults = dict(default_models or {})
        self._all: dict[str, tuple[Deployment, ...]] = {}
        self._routable: dict[str, list[Deployment]] = {}
        self._direct: dict[str, Deployment] = {}
        for alias, configs in aliases.items():
            deployments = tuple(_deployment(c) for c in configs)
            self._all[alias] = deployments
            self._routable[alias] = [d for d in deployments if self._ready.get(d.provider)]

    def resolve(self, model: str, provider: str | None = None) -> list[Deployment]:
        """The ready deployments for ``model`` (a fresh list the caller may reorder).

        ``provider`` pins the call to that provider's deployments. Raises
        :class:`ModelNotFound` for a name that is neither an alias nor ``provider/model`` with
        a configured provider, :class:`NoReadyDeployment` when none is ready, and
        :class:`BadRequest` for an empty name (:meth:`default_model` names the default) or
        when the pin excludes every deployment.
        """
        if provider is None:
            known = self._direct.get(model)  # never an alias: those are looked up first
            if known is not None:
                return [known]
        if not model:  # the app names the default (default_model) before resolving
            raise BadRequest("no model given", param="model")
        if len(model) > MAX_MODEL_NAME or not model.isprintable():
            raise BadRequest(
                f"the model name must be printable and at most {MAX_MODEL_NAME} characters",
                param="model",
            )
        if provider is not None:
            return self._pinned(model, provider)
        routable = self._routable.get(model)
        if routable is not None:
            if not routable:
                raise NoReadyDeployment(
                    f"model {model!r} has no ready deployment (check provider credentials)"
                )
            return routable.copy()
        provider, _, upstream_model = model.partition("/")
        ready = self._ready.get(provider)
        if ready is None or not upstream_model:
            raise ModelNotFound(
                f"The model {model!r} does not exist: use a configured alias or "
                "'provider/model' with a configured provider",
                param="model",
            )
        if not ready:
            raise NoReadyDeployment(
                f"provider {provider!r} is not ready (check its credentials)", param="model"
            )
        deployment = Deployment(provider=provider, model=upstream_model)
        if len(self._direct) < MAX_REMEMBERED_DIRECT:
            self._direct[model] = deployment
        return [deployment]

    def default_model(self, provider: str | None = None) -> str:
        """The model that serves a request naming none: ``provider/model`` for the first ready
        provider (config order) with a ``default_model``, else the first alias (config order)
        with a ready deployment; both only on ``provider`` when it is given.

        Raises :class:`BadRequest` naming ``model`` when there is no such model.
        """
        for name, model in self._defaults.items():
            if (provider is None or name == provider) and self._ready.get(name):
                return f"{name}/{model}"
        for alias, routable in self._routable.items():
            if any(provider is None or d.provider == provider for d in routable):
                return alias
        where = f"provider {provider!r}" if provider else "any ready provider"
        raise BadRequest(
            f"no model given, and {where} has neither a default_model nor an alias with a "
            "ready deployment: name a model",
            param="model",
        )

    def _pinned(self, model: str, provider: str) -> list[Deployment]:
        if provider not in self._ready:
            raise BadRequest(f"unknown provider {provider!r}", param="provider")
        pinned = [d for d in self.resolve(model) if d.provider == provider]
        if not pinned:
            raise BadRequest(
                f"model {model!r} has no ready deployment on provider {provider!r}",
                param="provider",
            )
        return pinned

    def aliases(self) -> dict[str, tuple[Deployment, ...]]:
        """Every alias with all its deployments, ready or not."""
        return dict(self._all)

    def is_ready(self, provider: str) -> bool:
        """Whether ``provider`` is configured and ready."""
        return self._ready.get(provider, False)


def _deployment(config: DeploymentConfig) -> Deployment:
    provider, _, model = config.target.partition("/")
    return Deployment(provider=provider, model=model, weight=config.weight)
