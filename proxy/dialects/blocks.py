"""The content blocks of one streamed answer, for dialects whose streams frame content in blocks.

Anthropic (``content_block_start`` / ``_delta`` / ``_stop``) and Fabro (``text_start`` …
``tool_call_end``) both cut a canonical stream, a flat run of deltas for choice 0, into blocks
that are opened and closed by events. :class:`StreamBlocks` is the one state machine both use:

- Prose (text or reasoning) is one block at a time: a delta of the other kind closes the open
  prose block and opens one of its own; so does a tool call starting.
- A tool call's block opens at its first fragment and stays open until the answer ends
  (:meth:`StreamBlocks.close`). Upstreams may interleave: a call's arguments can resume after
  another call, or text, has started. Every fragment still lands in its own call's block,
  between that block's start and its stop, and the stop comes once the arguments are whole.

Each method returns the :class:`Change` list an encoder turns into its framing, in order.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from msgspec import UNSET

from proxy.core.reply import ToolCallDelta

Kind = Literal["text", "reasoning", "tool_call"]


class Block:
    """One content block: its ``kind``, ``index`` among all blocks of the answer, ``ordinal``
    among blocks of its kind, and for a tool call its index, id, name and arguments so far."""

    __slots__ = ("arguments", "call_id", "index", "kind", "name", "ordinal", "tool")

    def __init__(self, kind: Kind, index: int, ordinal: int) -> None:
        self.kind = kind
        self.index = index
        self.ordinal = ordinal
        self.tool = -1
        self.call_id = ""
        self.name = ""
        self.arguments: list[str] = []


class Change(NamedTuple):
    """A block opened (``opened`` True) or closed."""

    opened: bool
    block: Block


class StreamBlocks:
    """See the module docstring. ``missing_id_prefix`` names tool calls that came without an id
    (``<prefix><tool index>``)."""

    __slots__ = ("_counts", "_missing_id_prefix", "_open", "_prose", "_tools")

    def __init__(self, missing_id_prefix: str) -> None:
        self._missing_id_prefix = missing_id_prefix
        self._prose: Block | None = None
        self._open: list[Block] = []  # in opening order
        self._tools: dict[int, Block] = {}  # by tool-call index, in order of first fragment
        self._counts = {"text": 0, "reasoning": 0, "tool_call": 0}

    @property
    def tool_calls(self) -> list[Block]:
        """Every tool call seen, in the order they started."""
        return list(self._tools.values())

    def prose(self, kind: Literal["text", "reasoning"]) -> tuple[Block, list[Change]]:
        """The open prose block of ``kind``, opening it (and closing other prose) if needed."""
        current = self._prose
        if current is not None and current.kind == kind:
            return current, []
        changes = self._close_prose()
        block = self._prose = self._new(kind)
        changes.append(Change(True, block))
        return block, changes

    def tool_fragment(self, fragment: ToolCallDelta) -> tuple[Block, list[Change], str]:
        """The block of the tool call ``fragment`` belongs to (opened at its first fragment,
        closing open prose), the changes, and the argument text the fragment adds (``""``)."""
        function = fragment.function if fragment.function is not UNSET else None
        block = self._tools.get(fragment.index)
        changes: list[Change] = []
        if block is None:
            changes = self._close_prose()
            block = self._tools[fragment.index] = self._new("tool_call")
            block.tool = fragment.index
            block.call_id = fragment.id or f"{self._missing_id_prefix}{fragment.index}"
            block.name = (function.name if function is not None else "") or ""
            changes.append(Change(True, block))
        pieces = function.arguments if function is not None else UNSET
        if not pieces:
            return block, changes, ""
        block.arguments.append(pieces)
        return block, changes, pieces

    def close(self) -> list[Change]:
        """Close every open block, in the order they opened (the answer is over)."""
        changes = [Change(False, block) for block in self._open]
        self._open.clear()
        self._prose = None
        return changes

    def _new(self, kind: Kind) -> Block:
        block = Block(kind, sum(self._counts.values()), self._counts[kind])
        self._counts[kind] += 1
        self._open.append(block)
        return block

    def _close_prose(self) -> list[Change]:
        prose, self._prose = self._prose, None
        if prose is None:
            return []
        self._open.remove(prose)
        return [Change(False, prose)]
