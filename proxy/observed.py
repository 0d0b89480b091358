"""A reply stream wrapper for plugins that only need to know when a stream is over.

:class:`ObservedStream` forwards everything (batches, verbatim frames, ``ended``, ``aclose``) to
the stream it wraps, so batching and relaying survive it, and awaits ``on_end(usage)`` exactly
once: when the stream ends, fails or is closed early. The balancer frees its in-flight count
there, the limits plugin its parallel slot and its token reservation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from proxy.canonical import Chunk, RawFrames, Usage, batched


class ObservedStream:
    """A reply stream that tells its owner once when it is over, and the usage it reported."""

    __slots__ = ("_batches", "_counts_tokens", "_done", "_inner", "_on_end", "_usage")

    def __init__(
        self,
        inner: AsyncIterator[Chunk],
        on_end: Callable[[Usage | None], Awaitable[None]],
        counts_tokens: bool = True,
    ) -> None:
        """``on_end(usage)`` is awaited exactly once: at the end, on a failure, or on close;
        ``usage`` is the last the stream reported when ``counts_tokens``, else None."""
        self._inner = inner
        self._batches = batched(inner)
        self._on_end = on_end
        self._counts_tokens = counts_tokens
        self._usage: Usage | None = None
        self._done = False

    @property
    def ended(self) -> bool:
        """Whether the inner stream has received its end (see ``BatchedStream``)."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The inner stream's next batch (see ``BatchedStream``; one chunk per batch when it
        has no batches of its own). Raw frames never carry usage, so they pass unread."""
        try:
            batch = await self._batches.next_batch(raw)
        except BaseException:
            await self._end()
            raise
        if not batch:
            await self._end()
        elif self._counts_tokens:
            for item in batch:
                if type(item) is Chunk and item.usage is not None:
                    self._usage = item.usage
        return batch

    def __aiter__(self) -> ObservedStream:
        return self

    async def __anext__(self) -> Chunk:
        try:
            chunk = await anext(self._inner)
        except BaseException:
            await self._end()
            raise
        if chunk.usage is not None and self._counts_tokens:
            self._usage = chunk.usage
        return chunk

    async def aclose(self) -> None:
        """End the stream early (or again): frees the upstream connection."""
        await self._end()
        aclose = getattr(self._inner, "aclose", None)
        if aclose is not None:
            await aclose()

    async def _end(self) -> None:
        if not self._done:
            self._done = True
            await self._on_end(self._usage)
