"""The dialect registry: every client wire format the gateway serves.

Adding a dialect is adding one module implementing :class:`~proxy.dialects.base.Dialect` and
one entry here; the app routes its paths and the conformance tests pick it up. Completion
dialects (chat, text, messages) are :func:`all_dialects`, which the completion conformance suite
covers; dialects of other kinds of call (embeddings; audio, images, moderations and rerank,
:mod:`proxy.dialects.openai_media`) are :func:`other_dialects`.
"""

from __future__ import annotations

from proxy.dialects.anthropic import AnthropicDialect
from proxy.dialects.base import Dialect
from proxy.dialects.bifrost import BifrostDialect
from proxy.dialects.fabro import FabroDialect
from proxy.dialects.openai_chat import OpenAIChatDialect
from proxy.dialects.openai_completions import OpenAICompletionsDialect
from proxy.dialects.openai_embeddings import OpenAIEmbeddingsDialect
from proxy.dialects.openai_media import media_dialects
from proxy.dialects.orq import OrqDialect
from proxy.dialects.responses import ResponsesDialect


def all_dialects() -> tuple[Dialect, ...]:
    """One instance of every registered dialect."""
    return (
        OpenAIChatDialect(),
        OpenAICompletionsDialect(),
        BifrostDialect(),
        OrqDialect(),
        FabroDialect(),
        AnthropicDialect(),
        ResponsesDialect(),
    )


def other_dialects() -> tuple[Dialect, ...]:
    """One instance of every registered dialect that is not a completion dialect."""
    return (OpenAIEmbeddingsDialect(), *media_dialects())
