"""OpenAI-compatible vendors: their base URLs, whether they need a key, and their known quirks.

``type: openai`` with ``preset: NAME`` points the OpenAI provider at a vendor without the user
looking up its URL, and adapts each request to what that vendor accepts. A quirk is a fact from
the vendor's documentation (or a rejection its API is known to answer with), never a guess:

- ``drop``: request fields the vendor rejects (an HTTP 400/422) that the gateway removes
  silently, so a client written for OpenAI keeps working. ``drop_for_models`` does the same
  for models whose name contains a marker (reasoning models that reject sampling knobs).
- ``rename``: fields the vendor spells differently (Mistral's ``random_seed``).
- ``strip_message_names``: the vendor rejects ``messages[].name``.
- ``stream_options``: False when the vendor rejects ``stream_options`` (it reports usage on
  every stream anyway).

Dropped fields are removed without a log line (providers do no I/O); :func:`rejected_fields`
tells which fields a preset removes for a model, for whoever wants to report it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple

import msgspec
from msgspec import UNSET

from proxy.core.canonical import Call, Message, Params

PresetName = Literal[
    "openai",
    "groq",
    "mistral",
    "together",
    "deepseek",
    "xai",
    "fireworks",
    "openrouter",
    "perplexity",
    "vllm",
    "ollama",
    "lmstudio",
]


class Preset(NamedTuple):
    """One vendor: where it is, whether it needs a key, and what it rejects."""

    base_url: str
    key_required: bool = True
    drop: frozenset[str] = frozenset()
    drop_for_models: tuple[tuple[str, frozenset[str]], ...] = ()
    rename: tuple[tuple[str, str], ...] = ()
    strip_message_names: bool = False
    stream_options: bool = True

    @property
    def adapts_requests(self) -> bool:
        """Whether any request needs changing for this vendor."""
        return bool(self.drop or self.drop_for_models or self.rename or self.strip_message_names)


_XAI_REASONING = frozenset({"stop", "presence_penalty", "frequency_penalty"})

PRESETS: Mapping[str, Preset] = MappingProxyType(
    {
        "openai": Preset("https://api.openai.com/v1"),
        # Groq documents these as unsupported, answered with a 400.
        "groq": Preset(
            "https://api.groq.com/openai/v1",
            drop=frozenset({"logprobs", "logit_bias", "top_logprobs"}),
            strip_message_names=True,
        ),
        # Mistral forbids unknown fields (422 extra_forbidden) and always reports stream usage.
        "mistral": Preset(
            "https://api.mistral.ai/v1",
            drop=frozenset({"logit_bias", "logprobs", "top_logprobs", "user", "reasoning_effort"}),
            rename=(("seed", "random_seed"), ("max_completion_tokens", "max_tokens")),
            strip_message_names=True,
            stream_options=False,
        ),
        "together": Preset("https://api.together.ai/v1"),
        # deepseek-reasoner answers logprobs / top_logprobs with an error.
        "deepseek": Preset(
            "https://api.deepseek.com",
            drop_for_models=(("deepseek-reasoner", frozenset({"logprobs", "top_logprobs"})),),
        ),
        # xAI reasoning models reject stop and the penalties.
        "xai": Preset(
            "https://api.x.ai/v1",
            drop_for_models=(
                ("grok-3-mini", _XAI_REASONING),
                ("grok-4", _XAI_REASONING),
                ("grok-code-fast", _XAI_REASONING),
            ),
        ),
        "fireworks": Preset("https://api.fireworks.ai/inference/v1"),
        # OpenRouter reports usage.cost, kept as the authoritative cost (Usage.cost_usd).
        "openrouter": Preset("https://openrouter.ai/api/v1"),
        # Perplexity serves a subset of OpenAI's parameters: no tools, no logprobs, one choice.
        "perplexity": Preset(
            "https://api.perplexity.ai",
            drop=frozenset(
                {
                    "tools",
                    "tool_choice",
                    "parallel_tool_calls",
                    "n",
                    "stop",
                    "seed",
                    "user",
                    "logit_bias",
                    "logprobs",
                    "top_logprobs",
                }
            ),
            stream_options=False,
        ),
        "vllm": Preset("http://localhost:8000/v1", key_required=False),
        "ollama": Preset("http://localhost:11434/v1", key_required=False),
        "lmstudio": Preset("http://localhost:1234/v1", key_required=False),
    }
)


class Adapted(NamedTuple):
    """A call's body parts as the vendor accepts them."""

    messages: list[Message]
    params: Params
    extra: dict[str, msgspec.Raw]


_ENCODER = msgspec.json.Encoder()


def rejected_fields(preset: Preset, model: str) -> frozenset[str]:
    """The request fields ``preset`` removes when calling ``model``."""
    fields = preset.drop
    for marker, names in preset.drop_for_models:
        if marker in model:
            fields = fields | names
    return fields


def adapt(preset: Preset, call: Call, model: str) -> Adapted:
    """The call's messages, params and extra fields with the vendor's quirks applied.

    Nothing of ``call`` is modified; parts that need no change are returned as they are.
    """
    params, extra, messages = call.params, call.extra, call.messages
    changes: dict[str, object] = {}
    extra_changes: dict[str, msgspec.Raw | None] = {}
    for old, new in preset.rename:
        value = getattr(params, old, UNSET) if old in Params.__struct_fields__ else UNSET
        if value is not UNSET and value is not None:
            changes[old] = UNSET
            if new in Params.__struct_fields__:
                changes[new] = value
            else:
                extra_changes[new] = msgspec.Raw(_ENCODER.encode(value))
        elif old in extra:
            extra_changes[old] = None
            extra_changes[new] = extra[old]
    for name in rejected_fields(preset, model):
        if name in Params.__struct_fields__:
            if getattr(params, name) is not UNSET:
                changes[name] = UNSET
        elif name in extra:
            extra_changes[name] = None
    if changes:
        params = msgspec.structs.replace(params, **changes)
    if extra_changes:
        merged = {**extra, **extra_changes}
        extra = {name: raw for name, raw in merged.items() if raw is not None}
    if preset.strip_message_names and any(m.name is not UNSET for m in messages):
        messages = [
            m if m.name is UNSET else msgspec.structs.replace(m, name=UNSET) for m in messages
        ]
    return Adapted(messages, params, extra)
