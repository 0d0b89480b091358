"""The texts a guardrail looks at, taken from a call or an answer, and put back when a webhook
modified them.

Input: each message's text (its string content, or its text parts joined), then each tool call's
arguments, in message order; an embeddings call's input texts. Output: per choice, its text, its
refusal, then each tool call's arguments. A :class:`TextSet` keeps where each text came from, so
that replacement texts (one per text, in the same order) go back to the same places: a message
whose text parts are replaced keeps its other parts, with one text part where its first was.
"""

from __future__ import annotations

from typing import Any

import msgspec

from proxy.core.canonical import Call, ContentPart, FunctionCall, Message, TextPart, ToolCall
from proxy.core.reply import Response
from proxy.pii.text import TextView

# Where a text lives: ("content" | "refusal", item) or ("arguments", item, tool call index,
# function name);
# ``item`` is a message's index (input) or a choice's (output).
Place = tuple[Any, ...]


class TextSet:
    """Texts and their places (see the module docstring)."""

    __slots__ = ("_view", "places", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.places: list[Place] = []
        self._view: TextView | None = None

    def add(self, text: str, place: Place) -> None:
        """Keep ``text`` from ``place`` (an empty text is left out)."""
        if text:
            self.texts.append(text)
            self.places.append(place)

    def view(self) -> TextView:
        """Every text, one per line, as the detectors read it (made once, shared by the
        checks that read this set)."""
        if self._view is None:
            self._view = TextView("\n".join(self.texts))
        return self._view


def input_texts(call: Call) -> TextSet:
    """The texts of ``call`` a check reads."""
    found = TextSet()
    if call.embedding is not None:
        for index, text in enumerate(call.embedding.texts or ()):
            found.add(text, ("embedding", index))
        return found
    for index, message in enumerate(call.messages):
        _add_message(found, message, index)
    return found


def output_texts(response: Response) -> TextSet:
    """The texts of ``response`` a check reads."""
    found = TextSet()
    for index, choice in enumerate(response.choices):
        _add_message(found, choice.message, index)
    return found


def _add_message(found: TextSet, message: Message, index: int) -> None:
    content = message.content
    if type(content) is str and not (message.refusal or message.tool_calls):
        found.add(content, ("content", index))  # the common case: text alone
        return
    found.add(message.text(), ("content", index))
    if isinstance(message.refusal, str):
        found.add(message.refusal, ("refusal", index))
    for position, tool_call in enumerate(message.tool_calls or ()):
        found.add(
            tool_call.function.arguments, ("arguments", index, position, tool_call.function.name)
        )


def replace_input(call: Call, texts: TextSet, replacement: list[str]) -> None:
    """Put ``replacement`` (one per text of ``texts``) into ``call`` in place."""
    if call.embedding is not None:
        inputs = list(call.embedding.texts or ())
        for place, text in zip(texts.places, replacement, strict=True):
            inputs[place[1]] = text
        call.embedding = msgspec.structs.replace(call.embedding, texts=inputs)
        return
    messages = list(call.messages)
    for place, text in zip(texts.places, replacement, strict=True):
        messages[place[1]] = _replaced(messages[place[1]], place, text)
    call.messages = messages


def replace_output(response: Response, texts: TextSet, replacement: list[str]) -> Response:
    """A copy of ``response`` with ``replacement`` (one per text of ``texts``) put back; its
    upstream bytes are dropped (they no longer describe it)."""
    choices = list(response.choices)
    for place, text in zip(texts.places, replacement, strict=True):
        choice = choices[place[1]]
        choices[place[1]] = msgspec.structs.replace(
            choice, message=_replaced(choice.message, place, text)
        )
    return msgspec.structs.replace(response, choices=choices, raw=None, raw_fingerprint=None)


def _replaced(message: Message, place: Place, text: str) -> Message:
    kind = place[0]
    if kind == "refusal":
        return msgspec.structs.replace(message, refusal=text)
    if kind == "arguments":
        calls = list(message.tool_calls or ())
        old = calls[place[2]]
        calls[place[2]] = ToolCall(
            id=old.id, type=old.type, function=FunctionCall(name=old.function.name, arguments=text)
        )
        return msgspec.structs.replace(message, tool_calls=calls)
    content = message.content
    if content is None or isinstance(content, str):
        return msgspec.structs.replace(message, content=text)
    parts: list[ContentPart] = []
    placed = False
    for part in content:
        if isinstance(part, TextPart):
            if not placed:
                parts.append(TextPart(text=text))
                placed = True
            continue
        parts.append(part)
    return msgspec.structs.replace(message, content=parts)
