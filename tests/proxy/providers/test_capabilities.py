"""proxy/providers/base.py: each provider type's optional capabilities, decided once
(:func:`capabilities_of`), are what the table below says; each is implemented with its protocol's
shape; and each is present exactly when the provider has the attributes the transport and the
upstream used to look up per request."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from proxy.providers import PROVIDER_TYPES
from proxy.providers.base import (
    BatchesNatively,
    Capabilities,
    CountsTokens,
    CountsTokensLocally,
    DecodesStreams,
    DropsFields,
    Embeds,
    EmbedsLocally,
    HttpProvider,
    ListsModels,
    LocalProvider,
    NamesPreset,
    ParsesStreams,
    Provider,
    ServesMedia,
    ServesMediaLocally,
    StreamsMedia,
    VouchesFrames,
    capabilities_of,
)

CONFIGS: dict[str, dict[str, Any]] = {
    "openai": {"api_key": "k"},
    "mock": {},
    "azure": {"endpoint": "https://x.openai.azure.com", "api_key": "k"},
    "bedrock": {"region": "us-east-1", "access_key_id": "AKID", "secret_access_key": "secret"},
    "anthropic": {"api_key": "k"},
    "gemini": {"api_key": "k"},
}

CAPABILITIES: dict[str, tuple[type, set[type]]] = {
    "openai": (
        HttpProvider,
        {Embeds, DropsFields, VouchesFrames, ServesMedia, StreamsMedia, BatchesNatively},
    ),
    "mock": (LocalProvider, {CountsTokensLocally, EmbedsLocally, ListsModels, ServesMediaLocally}),
    "azure": (HttpProvider, {Embeds, ServesMedia, StreamsMedia, BatchesNatively}),
    "bedrock": (HttpProvider, {Embeds, DecodesStreams, ParsesStreams, ServesMedia}),
    "anthropic": (HttpProvider, {CountsTokens, ParsesStreams, BatchesNatively}),
    "gemini": (HttpProvider, {Embeds, ParsesStreams, ServesMedia}),
}
"""Each provider type: its kind, and the optional capabilities it offers."""

OPTIONAL = (
    ParsesStreams,
    DecodesStreams,
    VouchesFrames,
    CountsTokens,
    CountsTokensLocally,
    Embeds,
    EmbedsLocally,
    DropsFields,
    ListsModels,
    ServesMedia,
    ServesMediaLocally,
    StreamsMedia,
    BatchesNatively,
)

FIELD: dict[type, str] = {
    ParsesStreams: "stream_parser",
    DecodesStreams: "stream_decoder",
    VouchesFrames: "relay_frames",
    CountsTokens: "token_counter",
    CountsTokensLocally: "count_tokens",
    Embeds: "embedder",
    EmbedsLocally: "embed",
    DropsFields: "dropped_fields",
    ListsModels: "listed_models",
    ServesMedia: "media_server",
    ServesMediaLocally: "media",
    StreamsMedia: "media_meter",
    BatchesNatively: "batcher",
}
"""The :class:`Capabilities` field that carries each capability."""


def _build(kind: str) -> Provider:
    provider_type = PROVIDER_TYPES[kind]
    return provider_type.build(kind, provider_type.config(**CONFIGS[kind]))


def _members(protocol: type) -> list[str]:
    """A capability protocol's members: its methods and its data members."""
    methods = [name for name in vars(protocol) if not name.startswith("_")]
    return methods + [
        name for name in vars(protocol).get("__annotations__", {}) if name not in methods
    ]


def test_the_table_covers_every_provider_type() -> None:
    assert set(CAPABILITIES) == set(PROVIDER_TYPES) == set(CONFIGS)


@pytest.mark.parametrize("kind", list(CAPABILITIES))
def test_each_provider_offers_the_capabilities_of_the_table(kind: str) -> None:
    provider = _build(kind)
    capabilities = capabilities_of(provider)
    provider_kind, offered = CAPABILITIES[kind]
    assert isinstance(provider, provider_kind)
    assert (capabilities.local is provider) == (provider_kind is LocalProvider)
    assert (capabilities.http is provider) == (provider_kind is HttpProvider)
    for protocol in OPTIONAL:
        assert isinstance(provider, protocol) == (protocol in offered), protocol.__name__
        carried = getattr(capabilities, FIELD[protocol])
        assert bool(carried) == (protocol in offered), FIELD[protocol]
    assert capabilities.embeds == bool(offered & {Embeds, EmbedsLocally})


@pytest.mark.parametrize("kind", list(CAPABILITIES))
def test_each_capability_has_its_protocols_shape(kind: str) -> None:
    cls = type(_build(kind))
    for protocol in CAPABILITIES[kind][1]:
        for name in _members(protocol):
            wanted = inspect.getattr_static(protocol, name, None)
            got = inspect.getattr_static(cls, name, None)
            if wanted is None or not callable(wanted):  # listed_models, media_operations
                assert isinstance(getattr(_build(kind), name), tuple | frozenset), name
                continue
            assert got is not None, f"{cls.__name__}.{name}"
            assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(wanted), name
            assert list(inspect.signature(got).parameters) == list(
                inspect.signature(wanted).parameters
            ), f"{cls.__name__}.{name}"


@pytest.mark.parametrize("kind", list(CAPABILITIES))
def test_a_capability_is_there_exactly_when_its_attributes_are(kind: str) -> None:
    # What the transport and the upstream looked up per request before capabilities were
    # decided once: the same answer for every provider.
    provider = _build(kind)
    capabilities = capabilities_of(provider)
    assert (capabilities.stream_decoder is not None) == hasattr(provider, "stream_decoder")
    assert (capabilities.stream_parser is not None) == hasattr(provider, "stream_parser")
    assert (capabilities.relay_frames is not None) == hasattr(provider, "relay_frames")
    assert (capabilities.count_tokens is not None) == hasattr(provider, "count_tokens")
    assert (capabilities.token_counter is not None) == hasattr(provider, "count_tokens_request")
    assert capabilities.embeds == (
        hasattr(provider, "build_embeddings") or hasattr(provider, "embed")
    )
    assert (capabilities.dropped_fields is not None) == hasattr(provider, "dropped_fields")
    assert bool(capabilities.media_operations) == hasattr(provider, "media_operations")
    assert capabilities.listed_models == getattr(provider, "listed_models", ())
    assert (capabilities.batcher is not None) == hasattr(provider, "submit_batch")
    assert (capabilities.media_meter is not None) == hasattr(provider, "media_meter")


def test_a_provider_without_optional_capabilities_has_none() -> None:
    class Bare:
        name = "bare"
        config: Any = None
        ready = True
        secrets: tuple[str, ...] = ()

        def build_request(self, call: Any, model: str) -> Any: ...
        def parse_response(self, body: bytes, model: str) -> Any: ...
        def parse_event(self, event: str, data: bytes) -> Any: ...
        def parse_error(self, status: int, headers: Any, body: bytes) -> Any: ...

    bare = Bare()
    assert capabilities_of(bare) == Capabilities(http=bare)  # type: ignore[arg-type]


def test_only_an_openai_config_names_a_preset() -> None:
    for kind, provider_type in PROVIDER_TYPES.items():
        config = provider_type.config(**CONFIGS[kind])
        assert isinstance(config, NamesPreset) == (kind == "openai"), kind
