"""A provider's reply stream as the chain sees it: its clocks, its batches, its end hooks.

:class:`UpstreamClocks` holds one upstream call's first-byte, idle and total deadlines;
:class:`UpstreamStream` reads the provider's chunks under them, hands them on in batches (raw
frames decoded only for a reader that asks for chunks), sanitises and counts its errors, and
runs the end hooks plugins register (:mod:`proxy.core.observed`) once, when it is over.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from proxy.core.canonical import Timings
from proxy.core.errors import GatewayError, UpstreamTimeout
from proxy.core.observed import HELD_ITEMS, EndHooks
from proxy.core.reply import Chunk, RawFrames
from proxy.core.streams import (
    BatchedStream,
    EndHook,
    EndObservable,
    ReplyStream,
    is_closable,
)
from proxy.providers.base import Timeouts

ErrorHook = Callable[[str, GatewayError], None]
"""``on_error(provider, error)``: an upstream error, sanitised, to count."""


class UpstreamClocks:
    """The first-byte, idle and total deadlines of one upstream call (event-loop time).

    ``with clocks:`` guards one wait on the upstream: when the current deadline passes, the
    waiting task is cancelled and the block raises :class:`TimeoutError` (as
    :func:`asyncio.timeout` does). One timer serves the whole call — it is re-armed only when it
    fires before a deadline that has since moved — instead of one timer per wait, which matters
    for streams with many waits. :meth:`close` stops the timer when the call is over.
    """

    __slots__ = (
        "_armed_at",
        "_cancelling",
        "_expired",
        "_task",
        "_timer",
        "clock",
        "deadline",
        "idle",
        "loop",
        "running",
        "total_deadline",
    )

    def __init__(self, timeouts: Timeouts, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """``loop``: whose time and timers the clocks use (the running loop unless given, as
        a test's virtual time is). Waits are always those of the running loop's tasks."""
        self.running = asyncio.get_running_loop()
        self.loop = self.running if loop is None else loop
        now = self.loop.time()
        self.idle = timeouts.idle
        self.total_deadline = now + timeouts.total
        if timeouts.first_byte < timeouts.total:
            self.deadline, self.clock = now + timeouts.first_byte, "first_byte"
        else:
            self.deadline, self.clock = self.total_deadline, "total"
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self._expired = False

    def next_is_idle(self) -> None:
        """After a byte has arrived: the next wait is bounded by the idle clock."""
        deadline = self.loop.time() + self.idle
        if deadline < self.total_deadline:
            self.deadline, self.clock = deadline, "idle"
        else:
            self.deadline, self.clock = self.total_deadline, "total"

    def expired(self, provider: str) -> UpstreamTimeout:
        """The error for the clock that just ran out."""
        return UpstreamTimeout(
            f"provider {provider!r} exceeded the {self.clock.replace('_', ' ')} timeout",
            code=f"{self.clock}_timeout",
            provider=provider,
        )

    def __enter__(self) -> None:
        # With the loop given, current_task() skips get_running_loop(), which on CPython 3.11
        # asks the kernel for the process id on every call.
        task = asyncio.current_task(self.running)
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        if self._timer is None or self.deadline < self._armed_at:
            self._arm()

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        task, self._task = self._task, None
        if self._expired:
            self._expired = False
            assert task is not None
            if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from None

    def close(self) -> None:
        """The call is over: no more waits to guard."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = self.deadline
        self._timer = self.loop.call_at(self.deadline, self._fire)

    def _fire(self) -> None:
        self._timer = None
        task = self._task
        if task is None:  # not waiting now: the next wait arms a timer again
            return
        if self.loop.time() < self.deadline:
            self._arm()
            return
        self._expired = True
        task.cancel()


class UpstreamStream(ReplyStream, BatchedStream, EndObservable):
    """A provider's chunk stream under the first-byte, idle and total clocks: the stream every
    upstream reply starts as, offering every fast path of :mod:`proxy.core.streams`.

    The provider side may yield single chunks or lists of items (the HTTP transport yields one
    list per network read, ending with ``None`` once the end marker was read; its items are
    chunks or :class:`~proxy.core.reply.RawFrames`). Besides async iteration (chunks only), it
    offers the :class:`~proxy.core.streams.BatchedStream` interface, so the app writes what
    arrived together in one go, verbatim frames included. Raw frames are decoded only when a
    reader asks for chunks. The clocks run per wait on the provider, not per chunk. Time spent
    waiting is added to ``timings.upstream_wait``. Errors raised by the provider stream, or by
    decoding its frames, are sanitised and counted through ``on_error`` before they propagate.
    It takes end hooks (:meth:`when_over`, see :mod:`proxy.core.observed`): they run once, when the
    stream ends, fails or is closed, before that is reported to its reader.
    """

    __slots__ = (
        "_clocks",
        "_end",
        "_ended",
        "_failure",
        "_held",
        "_inner",
        "_last",
        "_model",
        "_on_error",
        "_provider",
        "_ready",
        "_timings",
    )

    def __init__(
        self,
        inner: AsyncIterator[Chunk] | AsyncIterator[list[Chunk | RawFrames | None]],
        clocks: UpstreamClocks,
        timings: Timings,
        provider: str,
        on_error: ErrorHook,
        model: str = "",
    ) -> None:
        """``model`` names chunks whose provider's wire format does not (e.g. Bedrock's)."""
        self._inner: AsyncIterator[Chunk | list[Chunk | RawFrames | None]] = inner
        self._model = model
        self._clocks = clocks
        self._timings = timings
        self._provider = provider
        self._on_error = on_error
        self._ready: deque[Chunk | RawFrames] = deque()
        self._ended = False
        self._failure: GatewayError | None = None
        self._end: EndHooks | None = None
        # The last batch passed, kept for end hooks that do not meter (those that do read the
        # held items, which include it).
        self._last: list[Chunk | RawFrames] = []
        self._held: list[Chunk | RawFrames] | None = None  # EndHooks.held, if a hook meters

    def when_over(self, hook: EndHook, meters: bool = False) -> None:
        """Run ``hook(usage, generated)`` once when the stream is over (see
        :class:`~proxy.core.observed.EndHooks`)."""
        end = self._end
        if end is None:
            end = self._end = EndHooks(hook, meters)
        else:
            end.add(hook, meters)
        self._held = end.held if end.meters else None

    @property
    def ended(self) -> bool:
        """The end marker has arrived: no chunk will come beyond those already received."""
        return self._ended

    async def next_batch(self, raw: bool = False) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        ready = self._ready
        if not ready:
            if self._ended and self._failure is None:  # the end, received with the last batch
                pending = self._over()  # inline: the one end every stream has
                if pending is not None:
                    await pending
                return []
            try:
                if self._failure is not None:
                    raise self._failure
                await self._fill(report=True)
            except StopAsyncIteration:
                await self._end_hooks()
                return []
            except BaseException:
                await self._end_hooks()
                raise
        batch: list[Chunk | RawFrames] = list(ready)
        ready.clear()
        if not raw:
            try:
                batch = self._decoded(batch)  # type: ignore[assignment]
            except BaseException:
                await self._end_hooks()
                raise
        held = self._held
        if held is None:
            self._last = batch
        else:  # EndHooks.passed(), without its call (held items include the last batch)
            held += batch
            if len(held) >= HELD_ITEMS:
                self._end.read_held()  # type: ignore[union-attr]
        return batch

    async def prime(self) -> None:
        """Wait for the first chunk (under the first-byte clock) and hold it.

        A failure here is the caller's to report: it happened before the reply existed.
        """
        await self._fill(report=False)

    def first(self) -> Chunk | None:
        """The first chunk of a primed stream, before anyone has read it (a verbatim frame
        decoded; None when there is none, or it cannot be decoded). Reads nothing, changes
        nothing: for a caller that describes the stream (its tracing span)."""
        if not self._ready:
            return None
        item = self._ready[0]
        if isinstance(item, Chunk):
            return item
        try:
            return item.parse(item.payloads()[0])
        except Exception:  # the reader meets the same frame and reports it
            return None

    def __aiter__(self) -> UpstreamStream:
        return self

    async def __anext__(self) -> Chunk:
        ready = self._ready
        try:
            while True:
                if not ready:
                    if self._failure is not None:
                        raise self._failure
                    if self._ended:
                        raise StopAsyncIteration
                    await self._fill(report=True)
                item = ready.popleft()
                if type(item) is not RawFrames:
                    break
                ready.extendleft(reversed(self._decoded([item])))
        except BaseException:
            await self._end_hooks()
            raise
        chunk: Chunk = item  # type: ignore[assignment]
        held = self._held
        if held is None:
            self._last = [chunk]
        else:  # EndHooks.passed_one(), without its call
            held.append(chunk)
            if len(held) >= HELD_ITEMS:
                self._end.read_held()  # type: ignore[union-attr]
        return chunk

    def _decoded(self, items: list[Chunk | RawFrames]) -> list[Chunk]:
        """``items`` with raw frames decoded. A frame that cannot be decoded ends the stream:
        the chunks before it are returned, and the error is raised by the next read."""
        chunks: list[Chunk] = []
        for item in items:
            if type(item) is not RawFrames:
                chunks.append(item)  # type: ignore[arg-type]
                continue
            parse = item.parse
            try:
                for payload in item.payloads():
                    chunk = parse(payload)
                    if chunk is not None:
                        chunks.append(chunk)
            except GatewayError as error:
                self._on_error(self._provider, error)
                self._failure = error
                self._ready.clear()
                if not chunks:
                    raise
                break
        return chunks

    async def _fill(self, *, report: bool) -> None:
        """Wait until at least one item is ready; StopAsyncIteration at the end."""
        clocks = self._clocks
        started = time.perf_counter()
        try:
            with clocks:
                while not self._ready:
                    item = await anext(self._inner)
                    if isinstance(item, list):
                        if item and item[-1] is None:
                            item.pop()
                            self._ended = True
                        if item:
                            first = item[0]
                            if type(first) is Chunk and not first.model:
                                # The wire format does not name the model (raw frames always do).
                                for chunk in item:
                                    chunk.model = self._model  # type: ignore[union-attr]
                        self._ready.extend(item)  # type: ignore[arg-type]
                        if self._ended and not self._ready:
                            raise StopAsyncIteration
                    else:
                        self._ready.append(item)
        except TimeoutError:
            error = clocks.expired(self._provider)
            if report:
                self._on_error(self._provider, error)
            raise error from None
        except GatewayError as error:
            if report:
                self._on_error(self._provider, error)
            raise
        finally:
            self._timings.upstream_wait += time.perf_counter() - started
        clocks.next_is_idle()

    async def aclose(self) -> None:
        """Stop the stream (its end hooks run, if they have not) and free its upstream
        connection."""
        self._clocks.close()
        try:
            pending = self._over()  # inline: every stream is closed
            if pending is not None:
                await pending
        finally:
            inner = self._inner
            if is_closable(inner):  # the transport's generator; a provider's, if it has one
                await inner.aclose()

    def _over(self) -> Awaitable[None] | None:
        """Run the end hooks, if any are left: the stream lets them go as they run, so a
        later end (a close after the end) costs nothing. Returns what is left of them to
        await (see :meth:`~proxy.core.observed.EndHooks.over`): None when every hook was plain,
        so that a stream's end makes no coroutine unless a hook needs one."""
        end = self._end
        if end is None:
            return None
        self._end = None
        self._held = None
        return end.over(self._last)

    async def _end_hooks(self) -> None:
        """:meth:`_over`, awaited: for the ends off the hot path (a failure, a provider stream
        that stopped without its end marker, the end met through ``__anext__``), where a
        coroutine costs nothing that matters."""
        pending = self._over()
        if pending is not None:
            await pending
