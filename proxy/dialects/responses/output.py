"""Output items from canonical replies: whole (:func:`whole_output`) or assembled chunk by chunk
(:class:`OutputBuilder`), with the stream events that announce each step.

A whole reply becomes, in order, a ``reasoning`` item (if the model reasoned), a ``message``
item (its text and refusal; an empty one when the reply has nothing else) and one
``function_call`` item per tool call. A stream becomes items in the order their deltas arrive:
a reasoning or message item stays open while deltas of its kind continue and is closed when
another kind starts; function calls stay open until the stream ends (fragments of several calls
may interleave) and are closed then, in output order. Only choice 0 is read.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, Struct

from proxy.canonical import (
    Chunk,
    FinishReason,
    FunctionCall,
    Message,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from proxy.dialects.responses.objects import (
    FunctionCallItem,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    Refusal,
    item_id,
)

# ---------------------------------------------------------------------------------------------
# Stream events about output items (``sequence_number`` is set when the event is framed)
# ---------------------------------------------------------------------------------------------


class OutputItemAdded(Struct, tag="response.output_item.added", tag_field="type"):
    output_index: int
    item: OutputItem
    sequence_number: int = 0


class OutputItemDone(Struct, tag="response.output_item.done", tag_field="type"):
    output_index: int
    item: OutputItem
    sequence_number: int = 0


class ContentPartAdded(Struct, tag="response.content_part.added", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | Refusal | ReasoningText
    sequence_number: int = 0


class ContentPartDone(Struct, tag="response.content_part.done", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | Refusal | ReasoningText
    sequence_number: int = 0


class OutputTextDelta(Struct, tag="response.output_text.delta", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any]
    sequence_number: int = 0


class OutputTextDone(Struct, tag="response.output_text.done", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any]
    sequence_number: int = 0


class RefusalDelta(Struct, tag="response.refusal.delta", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    sequence_number: int = 0


class RefusalDone(Struct, tag="response.refusal.done", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    refusal: str
    sequence_number: int = 0


class ReasoningTextDelta(Struct, tag="response.reasoning_text.delta", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    sequence_number: int = 0


class ReasoningTextDone(Struct, tag="response.reasoning_text.done", tag_field="type"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    sequence_number: int = 0


class ArgumentsDelta(Struct, tag="response.function_call_arguments.delta", tag_field="type"):
    item_id: str
    output_index: int
    delta: str
    sequence_number: int = 0


class ArgumentsDone(Struct, tag="response.function_call_arguments.done", tag_field="type"):
    item_id: str
    output_index: int
    name: str
    arguments: str
    sequence_number: int = 0


ItemEvent = (
    OutputItemAdded
    | OutputItemDone
    | ContentPartAdded
    | ContentPartDone
    | OutputTextDelta
    | OutputTextDone
    | RefusalDelta
    | RefusalDone
    | ReasoningTextDelta
    | ReasoningTextDone
    | ArgumentsDelta
    | ArgumentsDone
)

# ---------------------------------------------------------------------------------------------
# Whole replies
# ---------------------------------------------------------------------------------------------


def whole_output(response_id: str, message: Message) -> list[OutputItem]:
    """The output items of a whole reply's message (see the module docstring for the order)."""
    items: list[OutputItem] = []
    if message.reasoning_content:
        content = [ReasoningText(text=message.reasoning_content)]
        items.append(ReasoningItem(id=item_id(response_id, "rs", 0), content=content))
    parts: list[OutputText | Refusal] = []
    text = message.text()
    if text:
        parts.append(OutputText(text=text))
    if message.refusal:
        parts.append(Refusal(refusal=message.refusal))
    if parts or not message.tool_calls:
        if not parts:
            parts.append(OutputText(text=""))
        index = len(items)
        items.append(
            OutputMessage(id=item_id(response_id, "msg", index), status="completed", content=parts)
        )
    for call in message.tool_calls or ():
        items.append(
            FunctionCallItem(
                id=item_id(response_id, "fc", len(items)),
                call_id=call.id,
                name=call.function.name,
                arguments=call.function.arguments,
                status="completed",
            )
        )
    return items


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


class _Part:
    """One content part being streamed: its kind and the pieces received."""

    __slots__ = ("kind", "pieces")

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "output_text", "refusal" or "reasoning_text"
        self.pieces: list[str] = []

    def render(self) -> OutputText | Refusal | ReasoningText:
        text = "".join(self.pieces)
        if self.kind == "output_text":
            return OutputText(text=text)
        if self.kind == "refusal":
            return Refusal(refusal=text)
        return ReasoningText(text=text)


class _TextItem:
    """A ``message`` or ``reasoning`` item being streamed."""

    __slots__ = ("done", "id", "index", "kind", "parts")

    def __init__(self, kind: str, index: int, response_id: str) -> None:
        self.kind = kind  # "message" or "reasoning"
        self.index = index
        self.id = item_id(response_id, "msg" if kind == "message" else "rs", index)
        self.parts: list[_Part] = []
        self.done = False

    def render(self, status: ItemStatus) -> OutputItem:
        if self.kind == "reasoning":
            content = [part.render() for part in self.parts]
            return ReasoningItem(id=self.id, content=content, status=status)  # type: ignore[arg-type]
        parts = [part.render() for part in self.parts]
        return OutputMessage(id=self.id, status=status, content=parts)  # type: ignore[arg-type]


class _CallItem:
    """A ``function_call`` item being streamed."""

    __slots__ = ("arguments", "call_id", "done", "id", "index", "name")

    def __init__(self, index: int, response_id: str, call_id: str, name: str) -> None:
        self.index = index
        self.id = item_id(response_id, "fc", index)
        self.call_id = call_id
        self.name = name
        self.arguments: list[str] = []
        self.done = False

    def render(self, status: ItemStatus) -> FunctionCallItem:
        return FunctionCallItem(
            id=self.id,
            call_id=self.call_id,
            name=self.name,
            arguments="".join(self.arguments),
            status=status,
        )


_PART_OF = {"reasoning": "reasoning_text", "text": "output_text", "refusal": "refusal"}


class OutputBuilder:
    """The output items of one streamed reply, fed canonical chunks in order.

    With ``emit`` set, every step also appends its stream events to :attr:`events` (the caller
    drains them); without it only the items are kept (to render the final response). Two
    builders fed the same chunks render the same items. ``usage``, ``finish_reason`` and
    ``model`` hold the last values the chunks reported.
    """

    __slots__ = (
        "_calls",
        "_emit",
        "_items",
        "_open",
        "_response_id",
        "events",
        "finish_reason",
        "model",
        "usage",
    )

    def __init__(self, response_id: str, *, emit: bool) -> None:
        self._response_id = response_id
        self._emit = emit
        self._items: list[_TextItem | _CallItem] = []
        self._open: _TextItem | None = None
        self._calls: dict[int, _CallItem] = {}
        self.events: list[ItemEvent] = []
        self.finish_reason: FinishReason | None = None
        self.usage: Usage | None = None
        self.model = ""

    def add(self, chunk: Chunk) -> None:
        """Take one chunk."""
        if chunk.usage is not None:
            self.usage = chunk.usage
        if not self.model:
            self.model = chunk.model
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta.reasoning_content:
                self._text("reasoning", delta.reasoning_content)
            if delta.content:
                self._text("text", delta.content)
            if delta.refusal:
                self._text("refusal", delta.refusal)
            for fragment in delta.tool_calls or ():
                self._fragment(fragment)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def close(self) -> None:
        """The stream ended normally: close every open item, in output order. A reply that
        produced no item at all gets an empty message, as a whole reply does."""
        if not self._items:
            self._text("text", "")
        self._close_open()
        for item in self._items:
            if isinstance(item, _CallItem) and not item.done:
                self._close_call(item)

    def items(self, *, final: bool = True) -> list[OutputItem]:
        """The items so far: finished ones ``completed``; unfinished ones ``incomplete`` when
        ``final`` (the stream failed), else ``in_progress``."""
        unfinished: ItemStatus = "incomplete" if final else "in_progress"
        return [item.render("completed" if item.done else unfinished) for item in self._items]

    def message(self) -> Message:
        """The assistant message the items amount to (for the conversation history)."""
        texts: list[str] = []
        reasoning: list[str] = []
        refusals: list[str] = []
        calls: list[ToolCall] = []
        for item in self._items:
            if isinstance(item, _CallItem):
                arguments = "".join(item.arguments)
                function = FunctionCall(name=item.name, arguments=arguments)
                calls.append(ToolCall(id=item.call_id, function=function))
                continue
            for part in item.parts:
                into = {"output_text": texts, "refusal": refusals}.get(part.kind, reasoning)
                into.append("".join(part.pieces))
        return Message(
            role="assistant",
            content="".join(texts) if texts or not calls else None,
            tool_calls=calls or UNSET,
            refusal="".join(refusals) if refusals else UNSET,
            reasoning_content="".join(reasoning) if reasoning else UNSET,
        )

    # -- text-like items ------------------------------------------------------------------

    def _text(self, kind: str, piece: str) -> None:
        """Add ``piece`` of ``kind`` (reasoning, text or refusal), opening items and parts."""
        item_kind = "reasoning" if kind == "reasoning" else "message"
        item = self._open
        if item is None or item.kind != item_kind:
            self._close_open()
            item = self._open = _TextItem(item_kind, len(self._items), self._response_id)
            self._items.append(item)
            if self._emit:
                self.events.append(OutputItemAdded(item.index, item.render("in_progress")))
        part_kind = _PART_OF[kind]
        if not item.parts or item.parts[-1].kind != part_kind:
            if item.parts:
                self._close_part(item, len(item.parts) - 1)
            item.parts.append(_Part(part_kind))
            if self._emit:
                self.events.append(
                    ContentPartAdded(
                        item.id, item.index, len(item.parts) - 1, _Part(part_kind).render()
                    )
                )
        part = item.parts[-1]
        part.pieces.append(piece)
        if self._emit and piece:
            position = len(item.parts) - 1
            event: ItemEvent
            if part_kind == "output_text":
                event = OutputTextDelta(item.id, item.index, position, piece, [])
            elif part_kind == "refusal":
                event = RefusalDelta(item.id, item.index, position, piece)
            else:
                event = ReasoningTextDelta(item.id, item.index, position, piece)
            self.events.append(event)

    def _close_part(self, item: _TextItem, position: int) -> None:
        if not self._emit:
            return
        part = item.parts[position]
        text = "".join(part.pieces)
        event: ItemEvent
        if part.kind == "output_text":
            event = OutputTextDone(item.id, item.index, position, text, [])
        elif part.kind == "refusal":
            event = RefusalDone(item.id, item.index, position, text)
        else:
            event = ReasoningTextDone(item.id, item.index, position, text)
        self.events.append(event)
        self.events.append(ContentPartDone(item.id, item.index, position, part.render()))

    def _close_open(self) -> None:
        item, self._open = self._open, None
        if item is None:
            return
        if item.parts:
            self._close_part(item, len(item.parts) - 1)
        item.done = True
        if self._emit:
            self.events.append(OutputItemDone(item.index, item.render("completed")))

    # -- function calls -------------------------------------------------------------------

    def _fragment(self, fragment: ToolCallDelta) -> None:
        function = fragment.function if fragment.function is not UNSET else None
        call = self._calls.get(fragment.index)
        if call is None:
            self._close_open()
            name = function.name if function is not None and function.name else ""
            call_id = fragment.id if fragment.id else f"call_{fragment.index}"
            call = _CallItem(len(self._items), self._response_id, call_id, name)
            self._calls[fragment.index] = call
            self._items.append(call)
            if self._emit:
                self.events.append(OutputItemAdded(call.index, call.render("in_progress")))
        pieces = function.arguments if function is not None else UNSET
        if pieces:
            call.arguments.append(pieces)  # type: ignore[arg-type]
            if self._emit:
                self.events.append(ArgumentsDelta(call.id, call.index, pieces))  # type: ignore[arg-type]

    def _close_call(self, call: _CallItem) -> None:
        call.done = True
        if self._emit:
            arguments = "".join(call.arguments)
            self.events.append(ArgumentsDone(call.id, call.index, call.name, arguments))
            self.events.append(OutputItemDone(call.index, call.render("completed")))
