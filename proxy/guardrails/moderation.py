"""The ``moderation`` check: a provider's moderation capability (``/v1/moderations``' own).

The provider is one of the config's that serves the ``moderation`` media operation
(:class:`~proxy.providers.base.ServesMedia` — OpenAI-compatible, Azure — or, in-process,
:class:`~proxy.providers.base.ServesMediaLocally`: the mock): the request is the one the
``/v1/moderations`` route would send it (its base URL, key and headers), over the gateway's
upstream transport (:mod:`proxy.upstream.transport`: pooled connections, bounded bodies, the
provider's errors classified and sanitised). It asks ``{"model", "input": [texts]}``; the
answer's ``results[].category_scores`` are compared with ``threshold``: a text is flagged when
one of ``categories`` (all of them when not given; ``self-harm`` also covers
``self-harm/intent``) scores at least the threshold. A failure — an error status, an unreadable
answer, no answer within ``timeout_ms`` — is a failed finding that ``on_error`` decides. The
check's call is not a request of its own: it is neither limited, priced nor in the ledger.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import msgspec

from proxy.core.canonical import Call, MediaRequest
from proxy.core.errors import GatewayError
from proxy.core.reply import MediaAnswer, MediaStream
from proxy.guardrails.clients import Clients
from proxy.guardrails.config import CheckConfig, ModerationCheck, Phase
from proxy.guardrails.texts import TextSet
from proxy.guardrails.verdicts import CLEAN, Finding
from proxy.pii.detectors import Finder
from proxy.providers.base import HttpProvider, Provider, ServesMedia, capabilities_of


class _Result(msgspec.Struct):
    category_scores: dict[str, float] = msgspec.field(default_factory=dict)


class _Answer(msgspec.Struct):
    results: list[_Result]


_DECODER = msgspec.json.Decoder(_Answer)


class Moderation:
    """A ``moderation`` check (see the module docstring)."""

    __slots__ = (
        "_categories",
        "_clients",
        "_local",
        "_model",
        "_remote",
        "_threshold",
        "_timeout",
        "config",
        "finder",
        "name",
    )

    _model: str
    _timeout: float
    _threshold: float
    _categories: tuple[str, ...] | None
    _clients: Clients
    _local: Callable[[Call, str], Awaitable[MediaAnswer | MediaStream]] | None
    _remote: tuple[ServesMedia, HttpProvider | None] | None

    def __init__(
        self,
        name: str,
        config: ModerationCheck,
        providers: Mapping[str, Provider],
        clients: Clients,
    ) -> None:
        provider = providers.get(config.provider)
        served = None if provider is None else capabilities_of(provider)
        if served is None or "moderation" not in served.media_operations:
            raise ValueError(f"provider {config.provider!r} of the config serves no moderations")
        self._local = served.media  # in-process (the mock), else over HTTP:
        self._remote = None if served.media_server is None else (served.media_server, served.http)
        if self._remote is not None and served.http is not None:
            clients.moderate_with(served.http)
        self.name = name
        self.config: CheckConfig = config
        self.finder: Finder | None = None
        self._clients = clients
        self._model = config.model
        self._categories = tuple(config.categories) if config.categories else None
        self._threshold = config.threshold
        self._timeout = config.timeout_ms / 1000

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """Flagged when a text scores at least the threshold in a watched category."""
        asked = Call(
            request_id=call.request_id,
            dialect=call.dialect,
            model=self._model,
            messages=[],
            media=MediaRequest("moderation", {"input": texts.texts}),
        )
        try:
            async with asyncio.timeout(self._timeout):
                body = await self._moderate(asked)
        except TimeoutError:
            return Finding(failed=True, reason="timed out")
        except GatewayError as error:
            return Finding(failed=True, reason=error.code)
        if body is None:
            return Finding(failed=True, reason="answered an error status")
        try:
            answer = _DECODER.decode(body)
        except msgspec.DecodeError:
            return Finding(failed=True, reason="answered something that is not a moderation")
        for result in answer.results:
            category = self._flagged(result.category_scores)
            if category is not None:
                return Finding(flagged=True, reason=category)
        return CLEAN

    async def _moderate(self, asked: Call) -> bytes | None:
        """The provider's answer to ``asked``; None for an error status."""
        if self._local is not None:
            answer = await self._local(asked, self._model)
            assert isinstance(answer, MediaAnswer)  # a moderation is never streamed
            return answer.body
        assert self._remote is not None  # one of the two, by construction
        server, http = self._remote
        assert http is not None  # a media server is an HTTP provider
        request = server.build_media(asked, self._model)
        status, _, body = await self._clients.transport().request(http, request)
        return body if status < 300 else None

    def _flagged(self, scores: Mapping[str, float]) -> str | None:
        """The first watched category at or above the threshold, if any."""
        for category, score in scores.items():
            if score < self._threshold:
                continue
            watched = self._categories
            if watched is None or any(
                category == name or category.startswith(name + "/") for name in watched
            ):
                return category
        return None
