"""Fold a completed stream's chunks into the whole answer it amounts to.

Per choice index: the text, reasoning and refusal deltas are concatenated, tool-call fragments
are joined by their index (id, type and name from the first fragment that has them, argument
pieces in order), logprob and annotation lists are concatenated, and the last finish reason
(with its stop sequence) counts. The first
chunk gives the id, model, creation time and fingerprint; the last usage seen is the usage.

Only a *complete* stream becomes an answer: every choice finished and the usage reported.
Anything else — a stream cut short, or one from an upstream that never reports usage — is not
an answer the cache may store, and :func:`assemble` returns None.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from msgspec import UNSET, UnsetType

from proxy.core.canonical import FinishReason, FunctionCall, Message, ToolCall, Usage
from proxy.core.reply import Choice, Chunk, Response, ToolCallDelta


class _ToolCallParts:
    __slots__ = ("arguments", "id", "name", "type")

    def __init__(self) -> None:
        self.id = ""
        self.type = "function"
        self.name = ""
        self.arguments: list[str] = []

    def add(self, fragment: ToolCallDelta) -> None:
        if fragment.id:
            self.id = self.id or fragment.id
        if fragment.type:
            self.type = fragment.type
        function = fragment.function
        if function is not UNSET:
            if function.name:
                self.name = self.name or function.name
            if function.arguments:
                self.arguments.append(function.arguments)

    def call(self) -> ToolCall:
        return ToolCall(
            id=self.id,
            type=self.type,
            function=FunctionCall(name=self.name, arguments="".join(self.arguments)),
        )


class _ChoiceParts:
    __slots__ = (
        "annotations",
        "content",
        "finish",
        "logprobs",
        "reasoning",
        "refusal",
        "stop_sequence",
        "tools",
    )

    def __init__(self) -> None:
        self.content: list[str] | None = None
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.annotations: list[dict[str, Any]] = []
        self.tools: dict[int, _ToolCallParts] = {}
        self.finish: FinishReason | None = None
        self.stop_sequence: str | UnsetType = UNSET
        self.logprobs: dict[str, Any] | None = None

    def message(self) -> Message:
        tools = [self.tools[index].call() for index in sorted(self.tools)]
        return Message(
            role="assistant",
            content="".join(self.content) if self.content is not None else None,
            tool_calls=tools or UNSET,
            refusal="".join(self.refusal) if self.refusal else UNSET,
            reasoning_content="".join(self.reasoning) if self.reasoning else UNSET,
            annotations=self.annotations or UNSET,
        )

    def add_logprobs(self, logprobs: dict[str, Any]) -> None:
        merged = self.logprobs
        if merged is None:
            self.logprobs = {k: list(v) if isinstance(v, list) else v for k, v in logprobs.items()}
            return
        for name, value in logprobs.items():
            known = merged.get(name)
            if isinstance(known, list) and isinstance(value, list):
                known.extend(value)
            elif value is not None:
                merged[name] = value


def assemble(
    chunks: Iterable[Chunk], *, partial: bool = False, usage_required: bool = True
) -> Response | None:
    """The whole answer of a completed stream (every choice finished and, when
    ``usage_required``, a usage reported), or None if the stream was not complete. With
    ``partial``, what a stream cut short (or without usage) amounts to so far: None only when
    it had no chunk (the request logs keep what a client was sent)."""
    first: Chunk | None = None
    usage: Usage | None = None
    choices: dict[int, _ChoiceParts] = {}
    for chunk in chunks:
        if first is None:
            first = chunk
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            parts = choices.get(choice.index)
            if parts is None:
                parts = choices[choice.index] = _ChoiceParts()
            delta = choice.delta
            if delta.content is not UNSET and delta.content is not None:
                if parts.content is None:
                    parts.content = []
                parts.content.append(delta.content)
            if delta.reasoning_content:
                parts.reasoning.append(delta.reasoning_content)
            if delta.refusal:
                parts.refusal.append(delta.refusal)
            if delta.annotations:
                parts.annotations.extend(delta.annotations)
            for fragment in delta.tool_calls or ():
                tool = parts.tools.get(fragment.index)
                if tool is None:
                    tool = parts.tools[fragment.index] = _ToolCallParts()
                tool.add(fragment)
            if choice.logprobs is not None:
                parts.add_logprobs(choice.logprobs)
            if choice.finish_reason is not None:
                parts.finish = choice.finish_reason
                parts.stop_sequence = choice.stop_sequence
    if first is None:
        return None
    if not partial and (
        (usage is None and usage_required)
        or not choices
        or any(parts.finish is None for parts in choices.values())
    ):
        return None
    return Response(
        id=first.id,
        model=first.model,
        created=first.created,
        usage=usage,
        system_fingerprint=first.system_fingerprint,
        choices=[
            Choice(
                index=index,
                message=parts.message(),
                finish_reason=parts.finish,
                logprobs=parts.logprobs,
                stop_sequence=parts.stop_sequence,
            )
            for index, parts in sorted(choices.items())
        ],
    )
