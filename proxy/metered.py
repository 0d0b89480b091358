"""A reply stream wrapper for the cost plugin: what a stream carried and generated.

:class:`MeteredStream` is :class:`~proxy.observed.ObservedStream` plus an estimate of the output
the stream generated, so that a stream that ends without usage — abandoned by its client, cut
by its upstream, or from a provider that reports none — is still charged for its text.
:func:`message_tokens` is the same estimate for a whole reply's message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from proxy.canonical import Chunk, Message, RawFrames, Usage, batched
from proxy.token_estimate import estimate_tokens

HELD_ITEMS = 64
"""How many passed items a :class:`MeteredStream` holds before it reads them (see there)."""


def message_tokens(message: Message) -> int:
    """The output tokens of a whole reply's ``message``: its text, reasoning and tool-call
    arguments, one token per four characters."""
    characters = len(message.text()) + len(message.reasoning_content or "")
    for tool_call in message.tool_calls or ():
        characters += len(tool_call.function.arguments)
    return estimate_tokens(characters)


class MeteredStream:
    """A reply stream that reports, once, the usage it carried and what it generated.

    ``on_end(usage, generated)`` is awaited exactly once — at the end, on a failure, or on
    close — with the last usage the stream carried (None if none) and the output tokens it
    estimates from what it passed: one per four characters of decoded chunks (text, reasoning,
    tool-call arguments), one per verbatim frame. Batches and verbatim frames pass through
    unchanged (see ``BatchedStream``); the end is reported outward only after ``on_end`` ran.

    Reading is deferred: the items a batch passed are only held (references, at most
    :data:`HELD_ITEMS`; then they are read and let go), and at the end they are read from the
    last backwards until one carries usage — the usage chunk is normally the last, so a stream
    that reports its usage and fits in the hold is never read chunk by chunk. Text is counted
    only when no usage came.
    """

    __slots__ = (
        "_batches",
        "_characters",
        "_done",
        "_held",
        "_inner",
        "_next_batch",
        "_on_end",
        "_usage",
    )

    def __init__(
        self,
        inner: AsyncIterator[Chunk],
        on_end: Callable[[Usage | None, int], Awaitable[None]],
    ) -> None:
        self._inner = inner
        self._batches = batched(inner)
        self._next_batch = self._batches.next_batch
        self._on_end = on_end
        self._usage: Usage | None = None
        self._characters = 0  # characters and frames read so far, as tokens x 4
        self._held: list[Chunk | RawFrames] = []
        self._done = False

    @property
    def ended(self) -> bool:
        """Whether the inner stream has received its end (see ``BatchedStream``)."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The inner stream's next batch, held on the way (see ``BatchedStream``)."""
        try:
            batch = await self._next_batch(raw)
        except BaseException:
            await self._end()
            raise
        if batch:
            held = self._held
            held += batch
            if len(held) >= HELD_ITEMS:
                self._read(held)
            return batch
        await self._end()
        return batch

    def __aiter__(self) -> MeteredStream:
        return self

    async def __anext__(self) -> Chunk:
        try:
            chunk = await anext(self._inner)
        except BaseException:
            await self._end()
            raise
        held = self._held
        held.append(chunk)
        if len(held) >= HELD_ITEMS:
            self._read(held)
        return chunk

    async def aclose(self) -> None:
        """End the stream early (or again): charges what was generated, frees the upstream."""
        await self._end()
        aclose: Any = getattr(self._inner, "aclose", None)
        if aclose is not None:
            await aclose()

    def _read(self, held: list[Chunk | RawFrames]) -> None:
        """Take the usage and count the output of ``held``, then let the items go."""
        for item in held:
            if type(item) is Chunk:
                if item.usage is not None:
                    self._usage = item.usage
                self._characters += _characters(item.choices)  # type: ignore[union-attr]
            else:  # verbatim frames: one chunk, about one token, per frame
                self._characters += 4 * item.count  # type: ignore[union-attr]
        held.clear()

    async def _end(self) -> None:
        if self._done:
            return
        self._done = True
        held = self._held
        for item in reversed(held):
            if type(item) is Chunk and item.usage is not None:  # type: ignore[union-attr]
                self._usage = item.usage  # type: ignore[union-attr]
                break
        if self._usage is None:
            self._read(held)
        held.clear()
        await self._on_end(self._usage, estimate_tokens(self._characters))


def _characters(choices: Iterable[Any]) -> int:
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
