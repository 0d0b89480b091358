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
    """A reply stream that tells its owner once when it is over, and the usage it reported.

    Usage comes at a stream's end (every provider sends it in the last chunk), so the stream
    keeps a reference to the last batch it passed and reads the usage from it when the stream
    is over, instead of looking at every chunk as it passes."""

    __slots__ = ("_batches", "_counts_tokens", "_done", "_inner", "_last", "_on_end", "_usage")

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
        self._last: list[Chunk | RawFrames] = []
        self._usage: Usage | None = None  # read one chunk at a time (__anext__)
        self._done = False

    @property
    def ended(self) -> bool:
        """Whether the inner stream has received its end (see ``BatchedStream``)."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The inner stream's next batch (see ``BatchedStream``; one chunk per batch when it
        has no batches of its own)."""
        try:
            batch = await self._batches.next_batch(raw)
        except BaseException:
            await self._end()
            raise
        if batch:
            self._last = batch
        else:
            await self._end()
        return batch

    def __aiter__(self) -> ObservedStream:
        return self

    async def __anext__(self) -> Chunk:
        try:
            chunk = await anext(self._inner)
        except BaseException:
            await self._end()
            raise
        if chunk.usage is not None:
            self._usage = chunk.usage
        return chunk

    async def aclose(self) -> None:
        """End the stream early (or again): frees the upstream connection."""
        await self._end()
        aclose = getattr(self._inner, "aclose", None)
        if aclose is not None:
            await aclose()

    def _reported(self) -> Usage | None:
        """The usage of the last batch passed (its last chunk with usage), else what
        ``__anext__`` saw; None when ``counts_tokens`` is off."""
        if not self._counts_tokens:
            return None
        for item in reversed(self._last):
            if type(item) is Chunk and item.usage is not None:
                return item.usage
        return self._usage

    async def _end(self) -> None:
        if not self._done:
            self._done = True
            await self._on_end(self._reported())
