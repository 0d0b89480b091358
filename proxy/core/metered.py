"""What a reply generated, counted in characters for the cost plugin's estimate.

A reply that comes without usage — a stream abandoned by its client or cut by its upstream, or
a provider that reports none — is still charged for its text: :func:`message_tokens` estimates
a whole reply's message, :func:`chunk_characters` what a stream's chunk carried (the stream end
hooks of :mod:`proxy.core.observed` add it up for a hook that meters).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from proxy.core.canonical import Message
from proxy.core.token_estimate import estimate_tokens


def message_tokens(message: Message) -> int:
    """The output tokens of a whole reply's ``message``: its text, reasoning and tool-call
    arguments, one token per four characters."""
    characters = len(message.text()) + len(message.reasoning_content or "")
    for tool_call in message.tool_calls or ():
        characters += len(tool_call.function.arguments)
    return estimate_tokens(characters)


def chunk_characters(choices: Iterable[Any]) -> int:
    """The characters of text, reasoning and tool-call arguments in a chunk's ``choices``."""
    characters = 0
    for choice in choices:
        delta = choice.delta
        if delta.content:
            characters += len(delta.content)
        if delta.reasoning_content:
            characters += len(delta.reasoning_content)
        if delta.tool_calls:
            for fragment in delta.tool_calls:
                function = fragment.function
                if function and function.arguments:
                    characters += len(function.arguments)
    return characters
