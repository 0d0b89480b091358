"""Mask the messages of one call: what is scanned, and what replaces each value found.

Scanned are the messages whose role is listed (``developer`` counts as ``system``, ``function``
as ``tool``): their text content, their text parts, an assistant turn's refusal, reasoning and
tool-call arguments, a tool turn's result. Image, audio and file parts are not. Tool-call
arguments are JSON: the strings inside are masked and the JSON re-encoded, so the upstream
still gets valid JSON (arguments that are not JSON are masked as text).

Messages of the roles not listed are not scanned, but a value found elsewhere in the request is
replaced in them too: a chat client sends the earlier turns back, and an assistant turn the
gateway restored holds the very values the user's turn had masked.

Nothing here raises but a bug; a found value of a ``block`` entity is reported in
:attr:`Findings.blocked` (and redacted in the returned messages, which the plugin then drops).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import msgspec

from proxy.core.canonical import ContentPart, FunctionCall, Message, RefusalPart, TextPart, ToolCall
from proxy.pii.scanner import Scanner
from proxy.pii.vault import PLACEHOLDER, Action, Replacer, Vault

_ROLE_OF = {"developer": "system", "function": "tool"}
_JSON_DECODER = msgspec.json.Decoder()
_JSON_ENCODER = msgspec.json.Encoder()


class Rule(NamedTuple):
    """What to do with the values of one entity, and the label its replacements carry."""

    action: Action
    label: str


class Findings:
    """What masking one request found: occurrences by ``(entity, action)``, and the entities
    whose action is ``block``."""

    __slots__ = ("blocked", "counts")

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, Action]] = Counter()
        self.blocked: set[str] = set()


class Masked(NamedTuple):
    """The masked messages, the request's vault (for restoring) and what was found."""

    messages: list[Message]
    vault: Vault
    findings: Findings


def mask_messages(
    messages: list[Message],
    scanner: Scanner,
    rules: Mapping[str, Rule],
    roles: Collection[str],
    replacer: Replacer,
) -> Masked:
    """Mask ``messages`` (see the module docstring); the input messages are not changed.

    ``rules`` must name every entity ``scanner`` finds.
    """
    vault = Vault(_placeholders_in(messages))
    run = _Run(scanner, rules, replacer, vault)
    masked: list[Message] = []
    skipped: list[int] = []
    for index, message in enumerate(messages):
        if _ROLE_OF.get(message.role, message.role) in roles:
            masked.append(_map_message(message, run.text))
        else:
            masked.append(message)
            skipped.append(index)
    if skipped and run.replacements:
        known = run.known_values()
        for index in skipped:
            masked[index] = _map_message(masked[index], known)
    return Masked(masked, vault, run.findings)


class _Run:
    """The state of masking one request's messages."""

    __slots__ = ("findings", "replacements", "replacer", "rules", "scanner", "vault")

    def __init__(
        self, scanner: Scanner, rules: Mapping[str, Rule], replacer: Replacer, vault: Vault
    ) -> None:
        self.scanner = scanner
        self.rules = rules
        self.replacer = replacer
        self.vault = vault
        self.findings = Findings()
        self.replacements: dict[str, str] = {}

    def text(self, text: str) -> str:
        found = self.scanner.scan(text)
        if not found:
            return text
        pieces: list[str] = []
        last = 0
        for start, end, entity in found:
            action, label = self.rules[entity]
            self.findings.counts[entity, action] += 1
            if action == "block":
                self.findings.blocked.add(entity)
            value = text[start:end]
            replacement = self.replacer(action, label, value, self.vault)
            self.replacements[value] = replacement
            pieces.append(text[last:start])
            pieces.append(replacement)
            last = end
        pieces.append(text[last:])
        return "".join(pieces)

    def known_values(self) -> Callable[[str], str]:
        """A function replacing the values found so far wherever they occur."""
        replacements = self.replacements
        pattern = re.compile(
            "|".join(re.escape(value) for value in sorted(replacements, key=len, reverse=True))
        )

        def replace(text: str) -> str:
            return pattern.sub(lambda match: replacements[match.group()], text)

        return replace


def _map_message(message: Message, mask: Callable[[str], str]) -> Message:
    """``message`` with ``mask`` applied to each of its texts (a copy if any changed)."""
    changes: dict[str, Any] = {}
    content = message.content
    if isinstance(content, str):
        if content and (masked := mask(content)) is not content:
            changes["content"] = masked
    elif content:
        parts = [_map_part(part, mask) for part in content]
        if any(new is not old for new, old in zip(parts, content, strict=True)):
            changes["content"] = parts
    for field in ("refusal", "reasoning_content"):
        value = getattr(message, field)
        if isinstance(value, str) and value and (masked := mask(value)) is not value:
            changes[field] = masked
    if message.tool_calls:
        calls = [_map_tool_call(call, mask) for call in message.tool_calls]
        if any(new is not old for new, old in zip(calls, message.tool_calls, strict=True)):
            changes["tool_calls"] = calls
    return msgspec.structs.replace(message, **changes) if changes else message


def _map_part(part: ContentPart, mask: Callable[[str], str]) -> ContentPart:
    if type(part) is TextPart:
        masked = mask(part.text)
        return part if masked is part.text else TextPart(text=masked)
    if type(part) is RefusalPart:
        masked = mask(part.refusal)
        return part if masked is part.refusal else RefusalPart(refusal=masked)
    return part  # images, audio and files are not scanned


def _map_tool_call(call: ToolCall, mask: Callable[[str], str]) -> ToolCall:
    arguments = call.function.arguments
    masked = map_json_strings(arguments, mask) if arguments else arguments
    if masked is arguments:
        return call
    function = FunctionCall(name=call.function.name, arguments=masked)
    return ToolCall(id=call.id, function=function, type=call.type)


def map_json_strings(document: str, change: Callable[[str], str]) -> str:
    """``document`` with ``change`` applied to every string value inside it, re-encoded if any
    changed (``document`` itself otherwise); applied to the whole text if it is not JSON."""
    try:
        value = _JSON_DECODER.decode(document)
    except msgspec.DecodeError:
        return change(document)
    changed, new = _map_strings(value, change)
    return _JSON_ENCODER.encode(new).decode() if changed else document


def _map_strings(value: Any, change: Callable[[str], str]) -> tuple[bool, Any]:
    if isinstance(value, str):
        new = change(value)
        return new is not value, new
    if isinstance(value, list):
        results = [_map_strings(item, change) for item in value]
        if any(changed for changed, _ in results):
            return True, [item for _, item in results]
        return False, value
    if isinstance(value, dict):
        members = {key: _map_strings(item, change) for key, item in value.items()}
        if any(changed for changed, _ in members.values()):
            return True, {key: item for key, (_, item) in members.items()}
        return False, value
    return False, value


def _placeholders_in(messages: Iterable[Message]) -> set[str]:
    """Placeholder-shaped strings already present in ``messages``' texts."""
    found: set[str] = set()
    for message in messages:
        for text in _texts(message):
            if "<" in text:
                found.update(match.group() for match in PLACEHOLDER.finditer(text))
    return found


def _texts(message: Message) -> Iterator[str]:
    """Every text of ``message`` as written (tool-call arguments as their JSON)."""
    content = message.content
    if isinstance(content, str):
        yield content
    elif content:
        for part in content:
            if type(part) is TextPart:
                yield part.text
            elif type(part) is RefusalPart:
                yield part.refusal
    for field in ("refusal", "reasoning_content"):
        value = getattr(message, field)
        if isinstance(value, str):
            yield value
    for call in message.tool_calls or ():
        yield call.function.arguments
