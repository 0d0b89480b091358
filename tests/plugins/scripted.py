"""An in-process innermost link for plugin tests: per-deployment scripts of answers and errors.

``ScriptedUpstream`` stands where :class:`proxy.upstream.call.Upstream` stands in the chain: it
serves ``call.deployment`` (or the first of ``call.deployments``), records every call, and answers
with the next outcome scripted for that deployment's ``provider/model`` — an error factory (raised),
``"ok"`` (a whole response, or a primed stream for a streaming call) or ``cut(n)`` (a stream
that fails after ``n`` chunks). ``latency[target]`` advances ``clock`` per call, so
latency-aware code is tested without sleeping.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog

from proxy.core.canonical import Call, Deployment, Message, Usage
from proxy.core.errors import GatewayError, UpstreamUnavailable, upstream_error_for_status
from proxy.core.metrics import Metrics
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response
from proxy.governance.pricing import PriceBook
from proxy.runtime.plugins import PluginContext
from proxy.upstream.router import DeploymentConfig, Router
from tests.faults import FakeClock

ErrorFactory = Callable[[], GatewayError]
USAGE = Usage(input=10, output=5)
WORDS = ("one", "two", "three", "four")


def fail(status: int, provider: str = "p", retry_after: float | None = None) -> ErrorFactory:
    """A factory of the error an upstream answering ``status`` produces."""
    return lambda: upstream_error_for_status(
        status, f"scripted {status}", provider=provider, retry_after=retry_after
    )


def cut(chunks: int) -> tuple[str, int]:
    """A stream outcome that fails after ``chunks`` chunks."""
    return ("cut", chunks)


class ScriptedUpstream:
    """See the module docstring."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.calls: list[Call] = []
        self.latency: dict[str, float] = {}
        self.clock = clock or FakeClock()
        self._scripts: dict[str, collections.deque[Any]] = {}
        self._then: dict[str, Any] = {}

    def script(self, target: str, *outcomes: Any, then: Any = "ok") -> None:
        self._scripts[target] = collections.deque(outcomes)
        self._then[target] = then

    def targets(self) -> list[str]:
        """The ``provider/model`` each call was sent to, in order."""
        return [self.served(call).target for call in self.calls]

    @staticmethod
    def served(call: Call) -> Deployment:
        return call.deployment or call.deployments[0]

    async def __call__(self, call: Call) -> Reply:
        self.calls.append(call)
        deployment = self.served(call)
        target = deployment.target
        self.clock.advance(self.latency.get(target, 0.0))
        script = self._scripts.get(target)
        outcome = script.popleft() if script else self._then.get(target, "ok")
        if callable(outcome):
            raise outcome()
        if call.stream:
            stream = _stream(deployment, outcome[1] if isinstance(outcome, tuple) else None)
            return Reply(provider=deployment.provider, model=deployment.model, stream=stream)
        message = Message(role="assistant", content=" ".join(WORDS))
        response = Response(
            id="r", model=deployment.model, choices=[Choice(index=0, message=message)], usage=USAGE
        )
        return Reply(provider=deployment.provider, model=deployment.model, response=response)


async def _stream(deployment: Deployment, cut_after: int | None) -> AsyncIterator[Chunk]:
    for sent, word in enumerate(WORDS):
        if cut_after is not None and sent >= cut_after:
            raise UpstreamUnavailable("scripted cut", provider=deployment.provider)
        yield Chunk(
            id="c",
            model=deployment.model,
            choices=[ChunkChoice(index=0, delta=Delta(content=word))],
        )
    yield Chunk(id="c", model=deployment.model, choices=[], usage=USAGE)


async def drain(stream: AsyncIterator[Chunk], texts: list[str]) -> None:
    """Read ``stream`` to its end, appending each chunk's text to ``texts``."""
    async for chunk in stream:
        texts.extend(str(c.delta.content) for c in chunk.choices if c.delta.content)


def router(
    models: dict[str, list[str | tuple[str, float]]],
    not_ready: tuple[str, ...] = (),
    providers: tuple[str, ...] = ("p",),
) -> Router:
    """A real router over ``models`` (alias → targets, optionally with weights); ``providers``
    are configured too (so ``provider/model`` resolves), ``not_ready`` ones are not ready."""
    aliases = {
        alias: tuple(
            DeploymentConfig(target=t) if isinstance(t, str) else DeploymentConfig(t[0], t[1])
            for t in targets
        )
        for alias, targets in models.items()
    }
    names = {t.target.partition("/")[0] for ts in aliases.values() for t in ts} | set(providers)
    return Router(aliases, {p: p not in not_ready for p in names})


def context(
    resolver: Router | None = None,
    metrics: Metrics | None = None,
    prices: PriceBook | None = None,
) -> PluginContext:
    """A plugin context on ``resolver`` (a router with no aliases by default) and ``prices``
    (an empty price book by default)."""
    resolve = (resolver or router({})).resolve
    return PluginContext(resolve, metrics or Metrics(), structlog.get_logger(), prices=prices)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    """The current value of one metric sample (0 when absent)."""
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
