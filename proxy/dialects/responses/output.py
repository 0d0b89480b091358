"""Output items from canonical replies: whole (:func:`whole_output`) or assembled chunk by chunk
(:class:`OutputBuilder`), with the stream events that announce each step.

A whole reply becomes, in order, a ``reasoning`` item (if the model reasoned), a ``message``
item (its text and refusal; an empty one when the reply has nothing else) and one
``function_call`` item per tool call. A stream becomes items in the order their deltas arrive,
cut as :class:`~proxy.dialects.blocks.StreamBlocks` cuts content blocks: a reasoning or message
item stays open while deltas of its kind continue and is closed when another kind starts;
function calls stay open until the stream ends (fragments of several calls may interleave) and
are closed then, in output order. Only choice 0 is read.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, Struct

from proxy.core.canonical import FinishReason, FunctionCall, Message, ToolCall, Usage
from proxy.core.reply import Chunk
from proxy.dialects.blocks import Block, Change, StreamBlocks
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


class McpListToolsInProgress(Struct, tag="response.mcp_list_tools.in_progress", tag_field="type"):
    item_id: str
    output_index: int
    sequence_number: int = 0


class McpListToolsCompleted(Struct, tag="response.mcp_list_tools.completed", tag_field="type"):
    item_id: str
    output_index: int
    sequence_number: int = 0


class McpListToolsFailed(Struct, tag="response.mcp_list_tools.failed", tag_field="type"):
    item_id: str
    output_index: int
    sequence_number: int = 0


class McpCallInProgress(Struct, tag="response.mcp_call.in_progress", tag_field="type"):
    item_id: str
    output_index: int
    sequence_number: int = 0


class McpCallCompleted(Struct, tag="response.mcp_call.completed", tag_field="type"):
    item_id: str
    output_index: int
    sequence_number: int = 0


class McpCallFailed(Struct, tag="response.mcp_call.failed", tag_field="type"):
    item_id: str
    output_index: int
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
    | McpListToolsInProgress
    | McpListToolsCompleted
    | McpListToolsFailed
    | McpCallInProgress
    | McpCallCompleted
    | McpCallFailed
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
    """One content part of a streamed message or reasoning item: its kind and pieces."""

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


class OutputBuilder:
    """The output items of one streamed reply, fed canonical chunks in order.

    Items follow :class:`~proxy.dialects.blocks.StreamBlocks`, as Anthropic's and Fabro's
    content blocks do: a ``reasoning`` or ``message`` item per prose block (a message's refusal
    is a part of it), a ``function_call`` item per tool call; the output index is the block's.
    With ``emit`` set, every step also appends its stream events to :attr:`events` (the caller
    drains them); without it only the items are kept (to render the final response). Two
    builders fed the same chunks render the same items. ``usage``, ``finish_reason`` and
    ``model`` hold the last values the chunks reported.
    """

    __slots__ = (
        "_blocks",
        "_done",
        "_emit",
        "_hot",
        "_ids",
        "_items",
        "_parts",
        "_response_id",
        "events",
        "finish_reason",
        "model",
        "usage",
    )

    def __init__(self, response_id: str, *, emit: bool) -> None:
        self._response_id = response_id
        self._emit = emit
        self._blocks = StreamBlocks("call_")
        self._items: list[Block] = []  # every block so far, in output order
        self._parts: dict[int, list[_Part]] = {}  # content parts of prose blocks, by index
        self._done: set[int] = set()
        self._ids: list[str] = []  # item ids, by block index
        self._hot: tuple[str, str, Block, _Part, int] | None = None  # where prose deltas go
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
                self._prose("reasoning", "reasoning_text", delta.reasoning_content)
            if delta.content:
                self._prose("text", "output_text", delta.content)
            if delta.refusal:
                self._prose("text", "refusal", delta.refusal)
            for fragment in delta.tool_calls or ():
                block, changes, pieces = self._blocks.tool_fragment(fragment)
                self._apply(changes)
                if pieces and self._emit:
                    self.events.append(ArgumentsDelta(self._id(block), block.index, pieces))
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def close(self) -> None:
        """The stream ended normally: close every open item, in output order. A reply that
        produced no item at all gets an empty message, as a whole reply does."""
        if not self._items:
            self._prose("text", "output_text", "")
        self._apply(self._blocks.close())

    def items(self, *, final: bool = True) -> list[OutputItem]:
        """The items so far: finished ones ``completed``; unfinished ones ``incomplete`` when
        ``final`` (the stream failed), else ``in_progress``."""
        unfinished: ItemStatus = "incomplete" if final else "in_progress"
        return [
            self._render(block, "completed" if block.index in self._done else unfinished)
            for block in self._items
        ]

    def message(self) -> Message:
        """The assistant message the items amount to (for the conversation history)."""
        texts: list[str] = []
        reasoning: list[str] = []
        refusals: list[str] = []
        calls: list[ToolCall] = []
        for block in self._items:
            if block.kind == "tool_call":
                function = FunctionCall(name=block.name, arguments="".join(block.arguments))
                calls.append(ToolCall(id=block.call_id, function=function))
                continue
            for part in self._parts[block.index]:
                into = {"output_text": texts, "refusal": refusals}.get(part.kind, reasoning)
                into.append("".join(part.pieces))
        return Message(
            role="assistant",
            content="".join(texts) if texts or not calls else None,
            tool_calls=calls or UNSET,
            refusal="".join(refusals) if refusals else UNSET,
            reasoning_content="".join(reasoning) if reasoning else UNSET,
        )

    def _id(self, block: Block) -> str:
        return self._ids[block.index]

    def _render(self, block: Block, status: ItemStatus) -> OutputItem:
        if block.kind == "tool_call":
            return FunctionCallItem(
                id=self._id(block),
                call_id=block.call_id,
                name=block.name,
                arguments="".join(block.arguments),
                status=status,
            )
        parts = [part.render() for part in self._parts[block.index]]
        if block.kind == "reasoning":
            return ReasoningItem(id=self._id(block), content=parts, status=status)  # type: ignore[arg-type]  # a reasoning block's parts are reasoning_text ones
        return OutputMessage(id=self._id(block), status=status, content=parts)  # type: ignore[arg-type]  # a message's parts are output_text or refusal ones

    def _announced(self, block: Block) -> OutputItem:
        """The item as ``response.output_item.added`` announces it: in progress, and a function
        call with empty arguments even when its whole arguments arrived with its first fragment
        (the ``function_call_arguments.delta`` events carry them, once)."""
        if block.kind == "tool_call":
            return FunctionCallItem(
                id=self._id(block),
                call_id=block.call_id,
                name=block.name,
                arguments="",
                status="in_progress",
            )
        return self._render(block, "in_progress")

    def _prose(self, kind: Literal["text", "reasoning"], part_kind: str, piece: str) -> None:
        """Add ``piece`` to the open prose item of ``kind``, in a part of ``part_kind``."""
        hot = self._hot
        if hot is not None and hot[0] == kind and hot[1] == part_kind:
            block, part, position = hot[2], hot[3], hot[4]
        else:
            block, changes = self._blocks.prose(kind)
            self._apply(changes)
            parts = self._parts[block.index]
            if not parts or parts[-1].kind != part_kind:
                if parts:
                    self._close_part(block, len(parts) - 1)
                parts.append(_Part(part_kind))
                if self._emit:
                    empty = _Part(part_kind).render()
                    self.events.append(
                        ContentPartAdded(self._id(block), block.index, len(parts) - 1, empty)
                    )
            part, position = parts[-1], len(parts) - 1
            self._hot = (kind, part_kind, block, part, position)
        part.pieces.append(piece)
        if self._emit and piece:
            item, index = self._ids[block.index], block.index
            event: ItemEvent
            if part_kind == "output_text":
                event = OutputTextDelta(item, index, position, piece, [])
            elif part_kind == "refusal":
                event = RefusalDelta(item, index, position, piece)
            else:
                event = ReasoningTextDelta(item, index, position, piece)
            self.events.append(event)

    def _apply(self, changes: list[Change]) -> None:
        """Items opened and closed as their blocks were."""
        if changes:
            self._hot = None
        for opened, block in changes:
            if opened:
                self._items.append(block)
                prefix = {"text": "msg", "reasoning": "rs"}.get(block.kind, "fc")
                self._ids.append(item_id(self._response_id, prefix, block.index))
                if block.kind != "tool_call":
                    self._parts[block.index] = []
                if self._emit:
                    self.events.append(OutputItemAdded(block.index, self._announced(block)))
                continue
            if block.kind == "tool_call":
                if self._emit:
                    arguments = "".join(block.arguments)
                    self.events.append(
                        ArgumentsDone(self._id(block), block.index, block.name, arguments)
                    )
            elif self._parts[block.index]:
                self._close_part(block, len(self._parts[block.index]) - 1)
            self._done.add(block.index)
            if self._emit:
                self.events.append(OutputItemDone(block.index, self._render(block, "completed")))

    def _close_part(self, block: Block, position: int) -> None:
        if not self._emit:
            return
        part = self._parts[block.index][position]
        item, text = self._id(block), "".join(part.pieces)
        event: ItemEvent
        if part.kind == "output_text":
            event = OutputTextDone(item, block.index, position, text, [])
        elif part.kind == "refusal":
            event = RefusalDone(item, block.index, position, text)
        else:
            event = ReasoningTextDone(item, block.index, position, text)
        self.events.append(event)
        self.events.append(ContentPartDone(item, block.index, position, part.render()))
