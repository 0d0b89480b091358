"""The ``moderation`` check: an OpenAI-compatible provider's ``POST {base_url}/moderations``.

The provider is one of the config's (``type: openai``, any preset): its base URL, key and
headers are the ones its chat calls use, and the call goes through the gateway's upstream
transport (:mod:`proxy.upstream.transport`: pooled connections, bounded bodies, the provider's
errors classified and sanitised). The body is ``{"model", "input": [texts]}``; the answer's
``results[].category_scores`` are compared with ``threshold``: a text is flagged when one of
``categories`` (all of them when not given; ``self-harm`` also covers ``self-harm/intent``)
scores at least the threshold. A failure — an error status, an unreadable answer, no answer
within ``timeout_ms`` — is a failed finding that ``on_error`` decides.

This is a stop-gap until the gateway's providers offer a moderation capability: then this
module should call it instead of building its own request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import msgspec

from proxy.core.canonical import Call
from proxy.core.errors import GatewayError
from proxy.guardrails.clients import Clients
from proxy.guardrails.config import CheckConfig, ModerationCheck, Phase
from proxy.guardrails.texts import TextSet
from proxy.guardrails.verdicts import CLEAN, Finding
from proxy.pii.detectors import Finder
from proxy.providers.base import HttpProvider, HttpRequest, Provider
from proxy.providers.openai.provider import DEFAULT_BASE_URL, OpenAIConfig
from proxy.providers.presets import PRESETS


class _Result(msgspec.Struct):
    category_scores: dict[str, float] = msgspec.field(default_factory=dict)


class _Answer(msgspec.Struct):
    results: list[_Result]


class _Request(msgspec.Struct):
    model: str
    input: list[str]


_DECODER = msgspec.json.Decoder(_Answer)
_ENCODER = msgspec.json.Encoder()


class Moderation:
    """A ``moderation`` check (see the module docstring)."""

    __slots__ = (
        "_categories",
        "_clients",
        "_headers",
        "_model",
        "_provider",
        "_threshold",
        "_timeout",
        "_url",
        "config",
        "finder",
        "name",
    )

    def __init__(
        self,
        name: str,
        config: ModerationCheck,
        providers: Mapping[str, Provider],
        clients: Clients,
    ) -> None:
        provider = providers.get(config.provider)
        provider_config = getattr(provider, "config", None)
        if not isinstance(provider, HttpProvider) or not isinstance(provider_config, OpenAIConfig):
            raise ValueError(
                f"provider {config.provider!r} is not an OpenAI-compatible provider of the config"
            )
        preset = PRESETS[provider_config.preset] if provider_config.preset else None
        base_url = provider_config.base_url or (
            preset.base_url if preset is not None else DEFAULT_BASE_URL
        )
        headers = {"content-type": "application/json", **provider_config.headers}
        if provider_config.api_key:
            headers["authorization"] = f"Bearer {provider_config.api_key}"
        clients.moderate_with(provider)
        self.name = name
        self.config: CheckConfig = config
        self.finder: Finder | None = None
        self._provider = provider
        self._clients = clients
        self._url = base_url.rstrip("/") + "/moderations"
        self._headers = headers
        self._model = config.model
        self._categories = tuple(config.categories) if config.categories else None
        self._threshold = config.threshold
        self._timeout = config.timeout_ms / 1000

    async def inspect(self, texts: TextSet, call: Call, phase: Phase) -> Finding:
        """Flagged when a text scores at least the threshold in a watched category."""
        request = HttpRequest(
            url=self._url,
            headers=self._headers,
            body=_ENCODER.encode(_Request(model=self._model, input=texts.texts)),
        )
        try:
            async with asyncio.timeout(self._timeout):
                status, _, body = await self._clients.transport().request(self._provider, request)
        except TimeoutError:
            return Finding(failed=True, reason="timed out")
        except GatewayError as error:
            return Finding(failed=True, reason=error.code)
        if status >= 300:
            return Finding(failed=True, reason=f"answered {status}")
        try:
            answer = _DECODER.decode(body)
        except msgspec.DecodeError:
            return Finding(failed=True, reason="answered something that is not a moderation")
        for result in answer.results:
            category = self._flagged(result.category_scores)
            if category is not None:
                return Finding(flagged=True, reason=category)
        return CLEAN

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
