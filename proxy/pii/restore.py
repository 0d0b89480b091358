"""Rewrite what a model wrote: put masked values back, and redact values it wrote itself.

Two stages, each usable on a whole text or on a stream of pieces of one text:

- :class:`Restorer` replaces the request's placeholders (``<EMAIL_1>``) by their values.
  Placeholders the request did not make are left as written. In JSON (tool-call arguments) a
  placeholder may also be written ``\\u003cEMAIL_1\\u003e``, and the value is inserted
  JSON-escaped, so the arguments stay valid JSON whatever the value holds. Fed pieces, it holds
  back a tail that may be the start of a placeholder (``<EMA``) until the next piece says
  whether it is one: a placeholder split across chunks is never sent half restored, and text
  without ``<`` passes through untouched.
- :class:`OutputRedactor` redacts the entities a scanner finds (``output: scan``), as
  ``<LABEL>``. Fed pieces, it holds back the last ``window`` characters, and any detection that
  reaches into them, so that a value split across chunks is redacted whole.

:class:`Rewriter` chains them (redact first, so restored values are not redacted again).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from proxy.core.canonical import ContentPart, FunctionCall, Message, RefusalPart, TextPart, ToolCall
from proxy.core.reply import Response
from proxy.pii.scanner import Found, Scanner
from proxy.pii.vault import PLACEHOLDER, Vault

_LONGEST_LABEL = 40
_TEXT_TAIL = re.compile(rf"<[A-Z0-9_]{{0,{_LONGEST_LABEL}}}\Z")
_JSON_PLACEHOLDER = re.compile(r"(?:<|\\u003[cC])([A-Z][A-Z0-9_]*_[1-9][0-9]{0,5})(?:>|\\u003[eE])")
_PARTIAL_ESCAPE = r"\\(?:u(?:0(?:0(?:3{close}?)?)?)?)?"
_JSON_TAIL = re.compile(
    rf"(?:(?:<|\\u003[cC])[A-Z0-9_]{{0,{_LONGEST_LABEL}}}(?:{_PARTIAL_ESCAPE.format(close='[eE]')})?"
    rf"|{_PARTIAL_ESCAPE.format(close='[cC]')})\Z"
)
_TAIL_REACH = _LONGEST_LABEL + 16
_ENCODER = msgspec.json.Encoder()


class Restorer:
    """Puts ``vault``'s values back into text (``json``: into JSON text, escaped)."""

    __slots__ = ("_held", "_json", "_vault")

    def __init__(self, vault: Vault, *, json: bool = False) -> None:
        self._vault = vault
        self._json = json
        self._held = ""

    @property
    def holding(self) -> bool:
        """Whether text is held back waiting for the next piece."""
        return bool(self._held)

    def whole(self, text: str) -> str:
        """``text`` with every placeholder of the vault restored."""
        if self._json:
            if "<" not in text and "\\u003" not in text:
                return text
            return _JSON_PLACEHOLDER.sub(self._json_value, text)
        if "<" not in text:
            return text
        return PLACEHOLDER.sub(self._text_value, text)

    def feed(self, piece: str) -> str:
        """The restored text that ``piece`` completes (held-back text first)."""
        held = self._held
        if not held and "<" not in piece and not (self._json and "\\" in piece):
            return piece
        text = held + piece
        tail = (_JSON_TAIL if self._json else _TEXT_TAIL).search(
            text, max(len(text) - _TAIL_REACH, 0)
        )
        cut = len(text) if tail is None else tail.start()
        self._held = text[cut:]
        return self.whole(text[:cut])

    def flush(self) -> str:
        """What is held back, as it is (the text has ended: it was not a placeholder)."""
        held, self._held = self._held, ""
        return held

    def _text_value(self, match: re.Match[str]) -> str:
        value = self._vault.value(match.group())
        return match.group() if value is None else value

    def _json_value(self, match: re.Match[str]) -> str:
        value = self._vault.value(f"<{match.group(1)}>")
        return match.group() if value is None else _ENCODER.encode(value).decode()[1:-1]


class OutputRedactor:
    """Redacts what ``scanner`` finds as ``<LABEL>`` (``labels`` by entity); ``on_found`` is
    told the entity of each value redacted. ``window``: characters held back when fed."""

    __slots__ = ("_held", "_labels", "_on_found", "_scanner", "_window")

    def __init__(
        self,
        scanner: Scanner,
        labels: Mapping[str, str],
        on_found: Callable[[str], None],
        window: int,
    ) -> None:
        self._scanner = scanner
        self._labels = labels
        self._on_found = on_found
        self._window = window
        self._held = ""

    @property
    def holding(self) -> bool:
        """Whether text is held back waiting for the next piece."""
        return bool(self._held)

    def whole(self, text: str) -> str:
        """``text`` with every detection redacted."""
        return self._redacted(text, len(text))

    def feed(self, piece: str) -> str:
        """The redacted text that can be released once ``piece`` has arrived."""
        text = self._held + piece
        cut = max(len(text) - self._window, 0)
        found = self._scanner.scan(text)
        for start, end, _ in found:
            if start < cut < end:
                cut = start  # a value reaching into the held-back tail waits for its end
                break
        self._held = text[cut:]
        return self._redacted(text[:cut], cut, found)

    def flush(self) -> str:
        """Everything held back, redacted (the text has ended)."""
        held, self._held = self._held, ""
        return self.whole(held)

    def _redacted(self, text: str, limit: int, found: list[Found] | None = None) -> str:
        if found is None:
            found = self._scanner.scan(text)
        pieces: list[str] = []
        last = 0
        for start, end, entity in found:
            if end > limit:
                break
            self._on_found(entity)
            pieces += (text[last:start], f"<{self._labels[entity]}>")
            last = end
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)


class Pipeline:
    """The stages one text goes through, in order (see the module docstring)."""

    __slots__ = ("_stages",)

    def __init__(self, stages: list[Restorer | OutputRedactor]) -> None:
        self._stages = stages

    @property
    def holding(self) -> bool:
        """Whether any stage holds text back."""
        return any(stage.holding for stage in self._stages)

    def whole(self, text: str) -> str:
        """``text`` through every stage."""
        for stage in self._stages:
            text = stage.whole(text)
        return text

    def feed(self, piece: str) -> str:
        """What ``piece`` releases through every stage."""
        for stage in self._stages:
            piece = stage.feed(piece)
        return piece

    def flush(self) -> str:
        """Everything still held, through the stages after the one holding it."""
        text = ""
        for stage in self._stages:
            text = stage.feed(text) + stage.flush() if text else stage.flush()
        return text


class Rewriter:
    """How one reply is rewritten: ``vault``'s placeholders restored (None: not restored) and,
    with ``redactor`` (a factory of fresh :class:`OutputRedactor`), the model's own values
    redacted."""

    __slots__ = ("_redactor", "_vault")

    def __init__(
        self, vault: Vault | None, redactor: Callable[[], OutputRedactor] | None = None
    ) -> None:
        self._vault = vault
        self._redactor = redactor

    @property
    def scans(self) -> bool:
        """Whether output is scanned (so every text must be looked at)."""
        return self._redactor is not None

    def pipeline(self, *, json: bool = False) -> Pipeline:
        """Fresh stages for one text (``json``: tool-call arguments)."""
        stages: list[Restorer | OutputRedactor] = []
        if self._redactor is not None:
            stages.append(self._redactor())
        if self._vault:
            stages.append(Restorer(self._vault, json=json))
        return Pipeline(stages)

    def response(self, response: Response) -> Response:
        """``response`` with every text of its choices rewritten (a copy: the original may be
        shared, as a cache's entry is). When output is scanned, the upstream's verbatim body is
        dropped, so that no member the canonical types do not model gets through unscanned."""
        choices = [
            msgspec.structs.replace(choice, message=_rewritten(choice.message, self))
            for choice in response.choices
        ]
        if self._redactor is not None:
            return msgspec.structs.replace(
                response, choices=choices, raw=None, raw_fingerprint=None
            )
        return msgspec.structs.replace(response, choices=choices)


def _rewritten(message: Message, rewriter: Rewriter) -> Message:
    text = rewriter.pipeline().whole
    changes: dict[str, Any] = {}
    content = message.content
    if isinstance(content, str):
        changes["content"] = text(content)
    elif content:
        changes["content"] = [_rewritten_part(part, text) for part in content]
    for field in ("refusal", "reasoning_content"):
        value = getattr(message, field)
        if isinstance(value, str):
            changes[field] = text(value)
    if message.tool_calls:
        arguments = rewriter.pipeline(json=True).whole
        changes["tool_calls"] = [
            ToolCall(
                id=call.id,
                type=call.type,
                function=FunctionCall(
                    name=call.function.name, arguments=arguments(call.function.arguments)
                ),
            )
            for call in message.tool_calls
        ]
    return msgspec.structs.replace(message, **changes)


def _rewritten_part(part: ContentPart, text: Callable[[str], str]) -> ContentPart:
    if type(part) is TextPart:
        return TextPart(text=text(part.text))
    if type(part) is RefusalPart:
        return RefusalPart(refusal=text(part.refusal))
    return part
