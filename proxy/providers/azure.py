"""Azure OpenAI: OpenAI's chat API behind Azure's URLs, credentials and model deployments.

The request and response bodies are OpenAI's, so translation is the OpenAI provider's (this
module composes one). What differs:

- the URL: ``{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=…``, where
  the deployment is the configured one for the requested model (``deployments: {model: name}``)
  or, by default, the model name itself (the body's ``model`` names the deployment too);
- the credential: an ``api-key`` header, or a Microsoft Entra ID bearer token
  (``azure_ad_token``; it expires, typically after an hour — refresh it by reloading the config);
- streams: Azure opens a stream with an event that carries only prompt content-filter results
  (no choices), and in its asynchronous filter mode interleaves events that only annotate
  choices (no delta). Such events carry nothing for the client and are skipped, so the first
  chunk the gateway sees is the first real one;
- media: speech, transcriptions, translations, image generations and edits go to the
  deployment's ``audio/…`` and ``images/…`` paths (OpenAI's wire format,
  :mod:`proxy.providers.openai.media`); Azure OpenAI has no moderations or rerank route, so
  those are a 400 naming the provider and the operation;
- batches: Azure's batch API (a global-batch deployment) is OpenAI's at
  ``{endpoint}/openai/files`` and ``{endpoint}/openai/batches`` (with ``api-version``), its
  lines naming ``/chat/completions`` or ``/embeddings`` and the deployment as their model
  (:mod:`proxy.providers.openai.batches`);
- errors: a request refused by Azure's content filter (``code: content_filter``) is a
  :class:`~proxy.core.errors.ContentPolicyViolation`, as OpenAI's own policy errors are.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

import msgspec

from proxy.core.canonical import Call, MediaOperation
from proxy.core.errors import UpstreamError
from proxy.core.reply import Chunk, Delta, Embeddings, MediaAnswer, Response
from proxy.providers.base import HoldsBatchAPI, HttpRequest, ProviderConfig, path_segment
from proxy.providers.openai.batches import OpenAIBatchAPI
from proxy.providers.openai.media import (
    PATHS,
    StreamMeter,
    build_media_at,
    parse_media,
    stream_meter,
)
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider

DEFAULT_API_VERSION = "2024-10-21"
"""The latest generally available data-plane inference version (it supports ``stream_options``)."""

_EMPTY_DELTA = Delta()
BATCH_LINE_URLS = {"/v1/chat/completions": "/chat/completions", "/v1/embeddings": "/embeddings"}
"""The batch endpoints Azure's batch API takes, and how its lines and batches name them."""


class AzureConfig(
    ProviderConfig, tag="azure", frozen=True, forbid_unknown_fields=True, kw_only=True
):
    """An Azure OpenAI resource.

    ``endpoint`` is the resource URL (``https://NAME.openai.azure.com``). Exactly one credential:
    ``api_key`` (sent as ``api-key``) or ``azure_ad_token`` (sent as a Bearer token); an empty one
    makes the provider not ready. ``deployments`` maps a model name (as clients and the
    ``models:`` table address it) to its Azure deployment name; a model without an entry is
    taken to be deployed under its own name. ``api_version`` defaults to
    :data:`DEFAULT_API_VERSION`. ``headers`` and ``stream_usage`` are as for ``openai``.
    """

    endpoint: str
    api_key: str | None = None
    azure_ad_token: str | None = None
    api_version: str = DEFAULT_API_VERSION
    deployments: dict[str, str] = msgspec.field(default_factory=dict)
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    stream_usage: bool = True

    def __post_init__(self) -> None:
        if self.api_key is not None and self.azure_ad_token is not None:
            raise ValueError("set either api_key or azure_ad_token, not both")
        if self.api_key is None and self.azure_ad_token is None:
            raise ValueError("api_key or azure_ad_token is required")


class AzureProvider(HoldsBatchAPI):
    """Pure translation for Azure OpenAI; see the module docstring."""

    media_operations: frozenset[MediaOperation] = frozenset(
        {"speech", "transcription", "translation", "image_generation", "image_edit"}
    )

    def __init__(self, name: str, config: AzureConfig) -> None:
        self.name = name
        self.config = config
        credential = config.api_key if config.api_key is not None else config.azure_ad_token
        self.ready = bool(credential)
        self.secrets: tuple[str, ...] = (credential,) if credential else ()
        headers = dict(config.headers)
        if config.api_key:
            headers["api-key"] = config.api_key
        elif config.azure_ad_token:
            headers["authorization"] = f"Bearer {config.azure_ad_token}"
        self._openai = OpenAIProvider(
            name,
            OpenAIConfig(
                base_url=config.endpoint, headers=headers, stream_usage=config.stream_usage
            ),
        )
        self._base = config.endpoint.rstrip("/") + "/openai/deployments/"
        self._query = "/chat/completions?api-version=" + quote(config.api_version, safe="")
        self._embeddings_query = "/embeddings?api-version=" + quote(config.api_version, safe="")
        self._version = "?api-version=" + quote(config.api_version, safe="")
        self._headers = headers
        root = config.endpoint.rstrip("/") + "/openai"
        self.batch_api = OpenAIBatchAPI(
            lambda path: root + path + self._version, headers, BATCH_LINE_URLS, self.deployment
        )

    def deployment(self, model: str) -> str:
        """The Azure deployment that serves ``model``."""
        return self.config.deployments.get(model, model)

    def build_request(self, call: Call, model: str) -> HttpRequest:
        """See :meth:`proxy.providers.base.HttpProvider.build_request`."""
        deployment = self.deployment(model)
        request = self._openai.build_request(call, deployment)
        request.url = self._base + path_segment(deployment) + self._query
        return request

    def parse_response(self, body: bytes, model: str) -> Response:
        """See :meth:`proxy.providers.base.HttpProvider.parse_response`."""
        return self._openai.parse_response(body, model)

    def build_embeddings(self, call: Call, model: str) -> list[HttpRequest]:
        """An embeddings call to the deployment serving ``model`` (OpenAI's wire format)."""
        deployment = self.deployment(model)
        [request] = self._openai.build_embeddings(call, deployment)
        request.url = self._base + path_segment(deployment) + self._embeddings_query
        return [request]

    def parse_embeddings(self, bodies: list[bytes], call: Call, model: str) -> Embeddings:
        """The vectors of an embeddings answer (OpenAI's wire format)."""
        return self._openai.parse_embeddings(bodies, call, model)

    def build_media(self, call: Call, model: str) -> HttpRequest:
        """A media call to the deployment serving ``model`` (OpenAI's wire format)."""
        media = call.media
        assert media is not None  # a media call
        deployment = self.deployment(model)
        url = self._base + path_segment(deployment) + PATHS[media.operation] + self._version
        return build_media_at(url, self._headers, call, deployment)

    def parse_media(
        self, headers: Mapping[str, str], body: bytes, call: Call, model: str
    ) -> MediaAnswer:
        """A media answer, passed on as it came (OpenAI's wire format)."""
        return parse_media(self.name, headers, body, call)

    def media_meter(self, headers: Mapping[str, str], call: Call, model: str) -> StreamMeter:
        """What reads a streamed media answer's usage (OpenAI's wire format)."""
        return stream_meter(self.name, self.config, headers, call)

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """See :meth:`proxy.providers.base.HttpProvider.parse_event`; annotations give None."""
        chunk = self._openai.parse_event(event, data)
        if chunk is None or chunk.usage is not None:
            return chunk
        for choice in chunk.choices:
            if choice.delta != _EMPTY_DELTA or choice.finish_reason is not None:
                return chunk
        return None

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamError:
        """See :meth:`proxy.providers.base.HttpProvider.parse_error`."""
        return self._openai.parse_error(status, headers, body)
