"""The reply stream contract: what the stream of a :class:`~proxy.core.reply.Reply` is, the fast
paths a stream may offer besides, and what a stream that wraps another keeps or gives up.

A reply stream is an async iterator of :class:`~proxy.core.reply.Chunk` that can be closed:
:class:`ReplyStream`. Whoever stops reading one before its end calls ``aclose()``, which frees
the upstream connection it reads (and runs its end hooks). Besides that, a stream may offer:

- :class:`BatchedStream` — ``next_batch(raw)`` and ``ended``: what arrived together (one network
  read) handed over together, so that the app encodes it and writes it in one go, and, with
  ``raw`` True, an OpenAI-compatible upstream's events as the bytes it sent
  (:class:`~proxy.core.reply.RawFrames`), which an encoder that :class:`RelaysFrames` sends on
  unchanged. A stream without it is read through :func:`batched`'s adapter, one chunk per
  batch: one write per chunk instead of one per network read, and every verbatim frame decoded
  into chunks and encoded again (a decode and an encode per event). A stream that offers it
  but asks its own inner stream for ``raw=False`` (or decodes the frames) keeps the batches and
  gives up the verbatim frames only.
- :class:`EndObservable` — ``when_over(hook, meters)``: the stream runs end hooks itself
  (:mod:`proxy.core.observed`), so a plugin that only needs to know when the stream is over
  (balance, limits, cost) adds no layer to the reads. On a stream without it, the first such
  plugin wraps the stream once in an :class:`~proxy.core.observed.ObservedStream`: one more
  call per batch for every read.

Giving up ``aclose`` itself is tolerated, never recommended: a plain async iterator a plugin
returns is carried, and closing it is skipped (:func:`is_closable`), so an upstream connection
it holds is freed only when the garbage collector finalises the iterator.

Whole answers have two fast paths of their own, on their data rather than a protocol: an
OpenAI-compatible upstream's body kept as it came (:attr:`~proxy.core.reply.Response.raw`) and
an answer's body already made for the client's dialect (:attr:`~proxy.core.reply.Reply.encoded`,
a cache hit's). A plugin that changes an answer replaces ``response`` (never edits it in place),
which leaves both behind as they say.

The gateway's own stream classes declare what they offer by subclassing these protocols
(``tests/proxy/core/test_streams.py`` checks each against them):

=======================================  ======  =======  ===============================  ====
class                                    aclose  batches  verbatim frames                  ends
=======================================  ======  =======  ===============================  ====
``proxy.upstream.stream.UpstreamStream``  yes     yes      yes                              yes
``proxy.core.observed.ObservedStream``    yes     yes      yes (forwarded)                  yes
``proxy.pii.stream.RewritingStream``      yes     yes      those that cannot hold a mask    no
``proxy.stored.response_state``'s         yes     yes      no (the Responses encoder has    no
``_RecordingStream``                                       no relay: decoded)
``proxy.cache.flight.FlightReader``       yes     yes      yes                              no
``proxy.request_logs.capture``'s          yes     yes      yes (handed on as they came)     no
``RecordingStream``
``proxy.cache.replay.ReplayStream``       yes     yes      yes (pre-encoded); ``ended`` at  no
                                                           once: one write for all of it
:func:`batched`'s adapter                 no      yes      no (one chunk per batch)         no
=======================================  ======  =======  ===============================  ====

Conformance is judged per stream, never per chunk, and a stream's class is judged once: the
checks (:func:`is_closable`, :func:`is_batched`, :func:`is_end_observable`,
:func:`relays_frames`) are ``isinstance`` against these runtime-checkable protocols, whose
verdict is kept per class when the class decides it (it defines every member, or its instances
cannot carry attributes of their own). An ``isinstance`` against a protocol costs microseconds;
the kept verdict, a dictionary lookup.

This module imports nothing of the project at run time (:mod:`proxy.core.reply` and
:mod:`proxy.core.canonical` only for types).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, cast, runtime_checkable

if TYPE_CHECKING:
    from proxy.core.canonical import Usage
    from proxy.core.reply import Chunk, RawFrames

EndHook = Callable[["Usage | None", int], Awaitable[None] | None]
"""``hook(usage, generated)``: the stream is over (see :mod:`proxy.core.observed`)."""


@runtime_checkable
class Closable(Protocol):
    """What can be closed early: ``aclose()`` ends it (or again: it is idempotent) and frees what
    it holds upstream; it never raises for a stream that already ended."""

    __slots__ = ()

    async def aclose(self) -> None:
        """Stop the stream and free its upstream connection."""
        ...


@runtime_checkable
class ReplyStream(Closable, Protocol):
    """An async iterator of chunks that can be closed (:class:`Closable`): what every reply
    stream should be. Iteration raises :class:`~proxy.core.errors.GatewayError` for a failure
    mid-stream."""

    __slots__ = ()

    def __aiter__(self) -> AsyncIterator[Chunk]: ...

    async def __anext__(self) -> Chunk: ...


@runtime_checkable
class BatchedStream(Protocol):
    """What a reply stream may offer besides async iteration: batches of what arrived together.

    :meth:`next_batch` returns every item received so far, waiting for one if none is held, and
    ``[]`` once the stream is over; errors are raised as iteration raises them. With ``raw``
    False every item is a :class:`~proxy.core.reply.Chunk`; with ``raw`` True,
    :class:`~proxy.core.reply.RawFrames` may come as they are (the caller can send them
    verbatim). :attr:`ended` is True once nothing can come beyond what was already received. A
    stream is read either by batches or by iteration, not both. The app writes each batch in
    one go; a plugin that wraps a stream should offer this interface too, forwarding to the
    stream it wraps (see the module docstring for what giving it up costs).
    """

    __slots__ = ()

    @property
    def ended(self) -> bool:
        """No item will come beyond those already received."""
        ...

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The items received so far (waiting for one); ``[]`` at the end."""
        ...


@runtime_checkable
class EndObservable(Protocol):
    """A stream that runs end hooks itself (see :mod:`proxy.core.observed`).

    Each hook registered with :meth:`when_over` runs exactly once — when the stream ends, fails
    or is closed, before that is reported to its reader — in registration order; ``meters``
    asks for the output estimate of a stream that ended without usage.
    """

    __slots__ = ()

    def when_over(self, hook: EndHook, meters: bool = False) -> None:
        """Run ``hook(usage, generated)`` once when the stream is over."""
        ...


@runtime_checkable
class RelaysFrames(Protocol):
    """A stream encoder (:class:`~proxy.dialects.base.StreamEncoder`) that sends verbatim
    upstream frames as they came: the other half of the verbatim fast path. Without it, the app
    reads its stream with ``raw`` False (every frame decoded, then encoded by the dialect)."""

    __slots__ = ()

    def relay(self, frames: RawFrames) -> bytes:
        """The bytes for a run of ordinary upstream chunks kept verbatim."""
        ...


_MAX_CLASSES = 256
"""Kept verdicts per protocol; past it they are forgotten (classes are few, but a program may
make them)."""


def _judge(protocol: Any, members: tuple[str, ...]) -> Callable[[object], bool]:
    """``isinstance(obj, protocol)``, with its verdict kept per class when the class decides it:
    it defines every one of ``members``, or its instances have no ``__dict__`` to add them."""
    verdicts: dict[type, bool] = {}

    def offers(obj: object) -> bool:
        verdict = verdicts.get(type(obj))
        if verdict is None:
            verdict = isinstance(obj, protocol)
            cls = type(obj)
            if all(hasattr(cls, name) for name in members) or not hasattr(obj, "__dict__"):
                if len(verdicts) >= _MAX_CLASSES:
                    verdicts.clear()
                verdicts[cls] = verdict
        return verdict

    return offers


is_closable = cast("Callable[[object], TypeGuard[Closable]]", _judge(Closable, ("aclose",)))
"""Whether a stream can be closed (:class:`Closable`); judged once per class. Every closing
of a reply stream asks it first: a plugin's plain iterator may have nothing to close."""

is_batched = cast(
    "Callable[[object], TypeGuard[BatchedStream]]",
    _judge(BatchedStream, ("ended", "next_batch")),
)
"""Whether a stream offers :class:`BatchedStream`; judged once per class."""

is_end_observable = cast(
    "Callable[[object], TypeGuard[EndObservable]]", _judge(EndObservable, ("when_over",))
)
"""Whether a stream runs end hooks itself (:class:`EndObservable`); judged once per class."""

relays_frames = cast(
    "Callable[[object], TypeGuard[RelaysFrames]]", _judge(RelaysFrames, ("relay",))
)
"""Whether a stream encoder sends verbatim frames (:class:`RelaysFrames`); judged once per
class."""


def batched(stream: AsyncIterator[Chunk]) -> BatchedStream:
    """``stream`` itself if it offers :class:`BatchedStream`, else an adapter that hands over
    its chunks one per batch (a plugin's own stream; see the module docstring for the cost)."""
    if is_batched(stream):
        return stream
    return _OneByOne(stream)


class _OneByOne(BatchedStream):
    """:class:`BatchedStream` over a plain chunk iterator: one chunk per batch, never verbatim
    frames, never ``ended`` ahead of the end. It is a view for reading, not a stream: whoever
    holds it closes the stream it reads."""

    __slots__ = ("_chunks",)
    ended = False

    def __init__(self, chunks: AsyncIterator[Chunk]) -> None:
        self._chunks = chunks

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """The next chunk, alone; ``[]`` at the end."""
        try:
            return [await anext(self._chunks)]
        except StopAsyncIteration:
            return []
