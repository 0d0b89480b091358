"""Stream end hooks: how a plugin learns, once, that a reply stream is over and what it carried.

The balancer frees its in-flight count when a stream is over, the limits plugin its parallel
slot and token reservation, the cost plugin charges what the stream carried. None of them needs
to see the stream's items; they need one call at the end. :func:`observe` arranges that call
for a plugin:

- on a stream that takes end hooks itself (an :class:`~proxy.core.streams.EndObservable`: the
  upstream's :class:`~proxy.upstream.stream.UpstreamStream`, or an :class:`ObservedStream`), it
  registers the hook and returns the same stream — so any number of plugins observing the
  upstream's stream add no layer the app's reads must pass through;
- on any other stream (one a plugin made), it wraps it once in an :class:`ObservedStream`,
  which the next observing plugin reuses.

Either way the hooks run exactly once — when the stream ends, fails, or is closed early — in the
order they were registered (innermost plugin first), before the end or the failure is reported
to whoever reads the stream. Each gets the last usage the stream carried (None if none) and the
output tokens it estimates the stream generated (counted only when some hook ``meters`` and no
usage came; see :class:`EndHooks`). A hook may be a plain function or a coroutine function.

:class:`EndHooks` is the bookkeeping a stream that takes end hooks keeps: the hooks, and what
they will be told.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from operator import attrgetter

from proxy.core.canonical import Usage
from proxy.core.metered import chunk_characters
from proxy.core.reply import Chunk, RawFrames
from proxy.core.streams import (
    BatchedStream,
    EndObservable,
    ReplyStream,
    batched,
    is_closable,
    is_end_observable,
)
from proxy.core.streams import EndHook as EndHook  # re-exported: its old home
from proxy.core.token_estimate import estimate_tokens

HELD_ITEMS = 64
"""How many passed items an :class:`EndHooks` holds before it reads them (see there)."""

SAMPLE_STRIDE = 8
"""Of the held items an :class:`EndHooks` lets go before the stream's end, every this many's
text is counted (see there)."""

_USAGE_OF = attrgetter("usage")


def last_usage(items: Sequence[Chunk | RawFrames]) -> Usage | None:
    """The usage of the last item of ``items`` that carries one, else None. The scan runs in C
    (a usage is always true; verbatim frames answer None), so that a window of held items
    costs a few nanoseconds an item to search rather than a Python loop's turn."""
    return next(filter(None, map(_USAGE_OF, reversed(items))), None)


def item_characters(item: Chunk | RawFrames) -> int:
    """What ``item`` generated, as characters: a chunk's text, reasoning and tool-call
    arguments; a verbatim frame counts four (one token; see :class:`EndHooks`)."""
    if type(item) is Chunk:
        return chunk_characters(item.choices)
    return 4 * item.count  # type: ignore[union-attr]


class EndHooks:
    """The end hooks of one stream, and what they are told: what a stream that takes end hooks
    (an :class:`~proxy.core.streams.EndObservable`) keeps and calls once at its end.

    The stream hands :meth:`over` the last batch it passed, and — only when some hook
    :attr:`meters` — each batch it passes (:meth:`passed`, :meth:`passed_one`). The usage is
    the last one the stream carried (:func:`last_usage`: normally its last chunk's). Metering
    defers reading: passed items are only held (references, at most :data:`HELD_ITEMS`), so a
    stream that reports its usage before that many items is never read item by item. A longer
    stream lets each full window of held items go once it has taken the window's last usage
    and counted the text of every :data:`SAMPLE_STRIDE`-th item in it, scaled to the window
    (so its text costs an eighth of a full count; the window's items are alike, the sample an
    estimate of them); the items still held at the end are counted whole. Output is estimated
    only when no usage came: one token per four characters of decoded chunks (text, reasoning,
    tool-call arguments), one per verbatim frame.
    """

    __slots__ = ("_characters", "_done", "_hooks", "_usage", "held", "meters")

    def __init__(self, hook: EndHook, meters: bool = False) -> None:
        """``hook``: the first end hook (see :meth:`add`)."""
        self._hooks = [hook]
        self.meters = meters
        """Whether a hook needs the output estimate (then every passed batch is held)."""
        self.held: list[Chunk | RawFrames] = []
        """The passed items held while a hook :attr:`meters`: a stream may append to it
        itself instead of calling :meth:`passed`, then calls :meth:`read_held` once it holds
        :data:`HELD_ITEMS` or more."""
        self._usage: Usage | None = None
        self._characters = 0  # characters and frames read so far, as tokens x 4
        self._done = False

    def add(self, hook: EndHook, meters: bool) -> None:
        """Run ``hook`` when the stream is over; ``meters``: it needs the output estimate."""
        self._hooks.append(hook)
        self.meters = self.meters or meters

    def passed(self, batch: list[Chunk | RawFrames]) -> None:
        """``batch`` was handed on (called only when :attr:`meters`)."""
        held = self.held
        held += batch
        if len(held) >= HELD_ITEMS:
            self.read_held()

    def passed_one(self, chunk: Chunk) -> None:
        """``chunk`` was handed on (called only when :attr:`meters`)."""
        held = self.held
        held.append(chunk)
        if len(held) >= HELD_ITEMS:
            self.read_held()

    def over(self, last: list[Chunk | RawFrames]) -> Awaitable[None] | None:
        """Run the hooks, once (later calls do nothing); ``last`` is the last batch (or chunk,
        as a list) the stream passed, read only when no hook :attr:`meters` (the held items
        then include it, and a stream need not keep it). Plain hooks run now; if any hook
        returns an awaitable, the rest run in the awaitable returned, which the stream awaits
        (so a stream whose hooks are all plain pays no coroutine for its end). Every hook runs
        even if one raises; then the first exception propagates."""
        if self._done:
            return None
        self._done = True
        meters = self.meters
        usage = last_usage(self.held if meters else last)
        generated = 0
        if meters:
            if usage is None:
                self.read_held(1)
                usage = self._usage
                if usage is None:
                    generated = estimate_tokens(self._characters)
            self.held.clear()
        hooks = self._hooks
        for index, hook in enumerate(hooks):
            try:
                pending = hook(usage, generated)
            except BaseException as exc:
                return _finish(hooks[index + 1 :], usage, generated, None, exc)
            if pending is not None:
                return _finish(hooks[index + 1 :], usage, generated, pending, None)
        return None

    def read_held(self, stride: int = SAMPLE_STRIDE) -> None:
        """Take the last usage of the held items and count their output, the text of every
        ``stride``-th one scaled to them all (1: every one); let them go."""
        held = self.held
        usage = last_usage(held)
        if usage is not None:
            self._usage = usage
        if held:
            sample = held[::stride]
            characters = sum(map(item_characters, sample))
            self._characters += characters * len(held) // len(sample)
        held.clear()


async def _finish(
    hooks: list[EndHook],
    usage: Usage | None,
    generated: int,
    pending: Awaitable[None] | None,
    failure: BaseException | None,
) -> None:
    """The rest of :meth:`EndHooks.over` once a hook returned ``pending`` (or raised
    ``failure``): await it, run the other ``hooks``, then raise the first failure."""
    if pending is not None:
        try:
            await pending
        except BaseException as exc:
            failure = exc
    for hook in hooks:
        try:
            pending = hook(usage, generated)
            if pending is not None:
                await pending
        except BaseException as exc:
            failure = failure or exc
    if failure is not None:
        raise failure


def observe(stream: ReplyStream, hook: EndHook, *, meters: bool = False) -> ReplyStream:
    """``stream``, with ``hook`` run once when it is over (see the module docstring): the same
    stream when it takes end hooks (:class:`~proxy.core.streams.EndObservable`; judged once per
    stream class), else an :class:`ObservedStream` around it."""
    observable: object = stream  # (a TypeGuard would narrow ``stream`` to EndObservable alone)
    if is_end_observable(observable):
        observable.when_over(hook, meters)
        return stream
    return ObservedStream(stream, hook, meters)


class ObservedStream(ReplyStream, BatchedStream, EndObservable):
    """A plugin's stream with end hooks: forwards everything (batches, verbatim frames,
    ``ended``, ``aclose``) to the stream it wraps, so batching and relaying survive it (an inner
    stream without batches is read one chunk per batch: :func:`~proxy.core.streams.batched`),
    and runs its hooks (see :class:`EndHooks`) when that stream ends, fails or is closed. It
    keeps every fast path of :mod:`proxy.core.streams` its inner stream offers."""

    __slots__ = ("_batches", "_end", "_inner", "_last")

    def __init__(self, inner: ReplyStream, hook: EndHook, meters: bool = False) -> None:
        """``hook``: the first end hook (see :meth:`when_over`)."""
        self._inner = inner
        self._batches = batched(inner)
        self._end = EndHooks(hook, meters)
        self._last: list[Chunk | RawFrames] = []

    def when_over(self, hook: EndHook, meters: bool = False) -> None:
        """Run ``hook(usage, generated)`` once when the stream is over."""
        self._end.add(hook, meters)

    @property
    def ended(self) -> bool:
        """Whether the inner stream has received its end (see
        :class:`~proxy.core.streams.BatchedStream`)."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The inner stream's next batch (see :class:`~proxy.core.streams.BatchedStream`; one
        chunk per batch when it has no batches of its own); ``[]`` once the hooks have run."""
        end = self._end
        try:
            batch = await self._batches.next_batch(raw)
        except BaseException:
            await _ended(end, self._last)
            raise
        if not batch:
            await _ended(end, self._last)
            return batch
        self._last = batch
        if end.meters:
            end.passed(batch)
        return batch

    def __aiter__(self) -> ObservedStream:
        return self

    async def __anext__(self) -> Chunk:
        end = self._end
        try:
            chunk = await anext(self._inner)
        except BaseException:
            await _ended(end, self._last)
            raise
        self._last = [chunk]
        if end.meters:
            end.passed_one(chunk)
        return chunk

    async def aclose(self) -> None:
        """End the stream early (or again): runs the hooks, frees the upstream connection."""
        await _ended(self._end, self._last)
        inner = self._inner
        if is_closable(inner):  # a plugin's plain iterator has nothing to close
            await inner.aclose()


async def _ended(end: EndHooks, last: list[Chunk | RawFrames]) -> None:
    pending = end.over(last)
    if pending is not None:
        await pending
