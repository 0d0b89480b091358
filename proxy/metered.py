"""A reply stream wrapper for the cost plugin: what a stream carried and generated.

:class:`MeteredStream` is :class:`~proxy.observed.ObservedStream` plus an estimate of the output
the stream generated, so that a stream that ends without usage — abandoned by its client, cut
by its upstream, or from a provider that reports none — is still charged for its text.
:func:`message_tokens` is the same estimate for a whole reply's message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from proxy.canonical import Chunk, Message, RawFrames, Usage, batched
from proxy.token_estimate import estimate_tokens


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
    estimates from the text it passed: one per four characters of decoded chunks, one per
    verbatim frame. Batches and verbatim frames pass through unchanged (see
    ``BatchedStream``); the end is reported outward only after ``on_end`` ran.
    """

    __slots__ = (
        "_batches",
        "_characters",
        "_done",
        "_frames",
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
        self._characters = 0
        self._frames = 0
        self._done = False

    @property
    def ended(self) -> bool:
        """Whether the inner stream has received its end (see ``BatchedStream``)."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The inner stream's next batch, observed on the way (see ``BatchedStream``)."""
        try:
            batch = await self._next_batch(raw)
        except BaseException:
            await self._end()
            raise
        if not batch:
            await self._end()
            return batch
        for item in batch:
            if type(item) is Chunk:
                self._observe(item)
            else:  # verbatim frames: one chunk, about one token, per frame
                self._frames += item.count  # type: ignore[union-attr]
        return batch

    def __aiter__(self) -> MeteredStream:
        return self

    async def __anext__(self) -> Chunk:
        try:
            chunk = await anext(self._inner)
        except BaseException:
            await self._end()
            raise
        self._observe(chunk)
        return chunk

    async def aclose(self) -> None:
        """End the stream early (or again): charges what was generated, frees the upstream."""
        await self._end()
        aclose: Any = getattr(self._inner, "aclose", None)
        if aclose is not None:
            await aclose()

    def _observe(self, chunk: Chunk) -> None:
        if chunk.usage is not None:
            self._usage = chunk.usage
        characters = 0
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                characters += len(delta.content)  # type: ignore[arg-type]
            if delta.reasoning_content:
                characters += len(delta.reasoning_content)  # type: ignore[arg-type]
            if delta.tool_calls:
                for fragment in delta.tool_calls:
                    function = fragment.function
                    if function and function.arguments:
                        characters += len(function.arguments)
        self._characters += characters

    async def _end(self) -> None:
        if not self._done:
            self._done = True
            await self._on_end(self._usage, estimate_tokens(self._characters) + self._frames)
