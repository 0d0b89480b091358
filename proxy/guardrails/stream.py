"""Output checks on a streamed answer.

Checks that find matches in text (``finder``) run as the text streams, on the masking plugin's
machinery (:mod:`proxy.pii.stream`): every text of every choice goes through a
:class:`WindowGuard`, which holds back the last ``window`` characters and looks again at them with
each new piece, so a word split across chunks (or across tool-argument fragments) is found before
any part of it is released. A find of a ``block`` check raises
:class:`~proxy.guardrails.verdicts.GuardrailBlocked` there, before the chunk that would carry it
is made: the app writes the dialect's in-band error event and nothing more. A find of a ``warn``
check is noted, and the text goes on unchanged.

Checks that need the whole answer run either before anything is sent (``stream: hold``: the
plugin reads the whole stream first and answers with a :class:`HeldStream` of its chunks, or with
the error before the first byte) or at its end (``stream: end``: :class:`GuardedStream` collects
the chunks as they pass and runs them when the upstream stream ends, raising in place of the last
batch, so the client has seen every earlier batch). What each leaks is said in
``docs/guardrails.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from proxy.core.reply import Chunk, RawFrames
from proxy.core.streams import BatchedStream, ReplyStream
from proxy.pii.restore import OutputRedactor, Rewriter
from proxy.pii.scanner import Found, Scanner
from proxy.pii.stream import ChunkRewriter, RewritingStream

EndCheck = Callable[[list[Chunk]], Awaitable[None]]
"""Runs the whole-answer checks on a stream's chunks at its end; raises to block."""


class WindowGuard(OutputRedactor):
    """A stage of :class:`~proxy.pii.restore.Pipeline` that tells ``on_found`` the name of each
    check it finds (by the scanner's entity names) and passes the text on unchanged; it holds
    back ``window`` characters, as :class:`~proxy.pii.restore.OutputRedactor` does."""

    __slots__ = ()

    def _redacted(self, text: str, limit: int, found: list[Found] | None = None) -> str:
        if found is None:
            found = self._scanner.scan(text)
        on_found = self._on_found
        for _, end, check in found:
            if end > limit:
                break
            on_found(check)
        return text


def window_rewriter(scanner: Scanner, on_found: Callable[[str], None], window: int) -> Rewriter:
    """A :class:`~proxy.pii.restore.Rewriter` whose every text goes through a fresh
    :class:`WindowGuard` over ``scanner``."""
    labels: Mapping[str, str] = {}

    def stage() -> OutputRedactor:
        return WindowGuard(scanner, labels, on_found, window)

    return Rewriter(None, stage)


class GuardedStream(RewritingStream):
    """A stream whose texts pass the window checks of ``rewriter`` (None: no window checks),
    whose chunks are collected for ``at_end`` (None: nothing runs at the end), and which tells
    ``on_over`` once that it ended (True) or failed (False)."""

    __slots__ = ("_at_end", "_chunks", "_on_over", "_over")

    def __init__(
        self,
        inner: ReplyStream,
        rewriter: ChunkRewriter,
        at_end: EndCheck | None,
        on_over: Callable[[bool], None],
    ) -> None:
        super().__init__(inner, rewriter)
        self._at_end = at_end
        self._chunks: list[Chunk] = []
        self._on_over = on_over
        self._over = False

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.core.streams.BatchedStream`; raises what a check raises."""
        try:
            batch = await super().next_batch(raw)
            if self._at_end is not None:
                self._collect(batch)
                if self._done and not self._over:
                    await self._at_end(self._chunks)
        except BaseException:
            self._over_once(False)
            raise
        if self._done:
            self._over_once(True)
        return batch

    def _collect(self, batch: list[Chunk | RawFrames]) -> None:
        chunks = self._chunks
        for item in batch:
            if type(item) is RawFrames:
                for payload in item.payloads():
                    chunk = item.parse(payload)
                    if chunk is not None:
                        chunks.append(chunk)
            else:
                chunks.append(item)  # type: ignore[arg-type]  # the other kind of item

    def _over_once(self, ended: bool) -> None:
        if not self._over:
            self._over = True
            self._on_over(ended)


class HeldStream(ReplyStream, BatchedStream):
    """A stream read whole before anything was sent: ``chunks``, in one batch."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: list[Chunk]) -> None:
        self._chunks: list[Chunk] | None = chunks

    @property
    def ended(self) -> bool:
        """Always True: every chunk is here."""
        return True

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """Every chunk, then ``[]``."""
        chunks, self._chunks = self._chunks, None
        return list(chunks or ())

    def __aiter__(self) -> HeldStream:
        return self

    async def __anext__(self) -> Chunk:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        """Drop what is left."""
        self._chunks = None
