"""The provider registry: every upstream family the gateway can reach, by its config ``type``.

Adding a provider is adding one module with a config Struct (a tagged subclass of
:class:`~proxy.providers.base.ProviderConfig`) and a class implementing
:class:`~proxy.providers.base.HttpProvider` or :class:`~proxy.providers.base.LocalProvider`,
plus one row here; config decoding, the transport and the conformance tests pick it up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from proxy.providers.anthropic.provider import AnthropicConfig, AnthropicProvider
from proxy.providers.azure import AzureConfig, AzureProvider
from proxy.providers.base import Provider, ProviderConfig
from proxy.providers.bedrock.provider import BedrockConfig, BedrockProvider
from proxy.providers.gemini.provider import GeminiConfig, GeminiProvider
from proxy.providers.mock.provider import MockConfig, MockProvider
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider


class ProviderType(NamedTuple):
    """A provider family: its config Struct and the constructor ``(name, config) -> provider``."""

    config: type[ProviderConfig]
    build: Callable[[str, Any], Provider]


PROVIDER_TYPES: dict[str, ProviderType] = {
    "openai": ProviderType(OpenAIConfig, OpenAIProvider),
    "mock": ProviderType(MockConfig, MockProvider),
    "azure": ProviderType(AzureConfig, AzureProvider),
    "bedrock": ProviderType(BedrockConfig, BedrockProvider),
    "anthropic": ProviderType(AnthropicConfig, AnthropicProvider),
    "gemini": ProviderType(GeminiConfig, GeminiProvider),
}


def build_provider(name: str, config: ProviderConfig) -> Provider:
    """Instantiate the provider ``name`` described by ``config``."""
    for provider_type in PROVIDER_TYPES.values():
        if type(config) is provider_type.config:
            return provider_type.build(name, config)
    raise TypeError(f"no provider type is registered for {type(config).__name__}")
