"""Output checks on a streamed answer.

Checks that find matches in text (``finder``) run as the text streams, in windows across chunk
boundaries (:class:`WindowWatch`): each text of each choice — ``content``, ``reasoning_content``,
``refusal``, each tool call's ``arguments`` — is kept as it grows and scanned, each time a
window's worth of new text has arrived (and at the end), from ``window`` characters before the new
text, with the masking plugin's finders (:mod:`proxy.pii`) on its
:class:`~proxy.pii.text.TextView`. A stream item (a chunk, or verbatim upstream frames) is held
back until each text it carries was scanned with ``window`` characters after it (so each text is
held back by ``window`` to twice that many characters), so a word split across chunks is found
before any part of it leaves. A find of a
``block`` check raises :class:`~proxy.guardrails.verdicts.GuardrailBlocked` there, and what was
held is dropped: the app writes the dialect's in-band error event and nothing more. A find of a
``warn`` check is noted, and the stream goes on.

Unlike the masking plugin's :mod:`proxy.pii.stream`, which rewrites what it passes, a check only
looks: items go out as they came, verbatim upstream frames included (the OpenAI client's relay
fast path is kept), and nothing is copied. A read of verbatim frames is decoded once, as one JSON
array of the choices' texts alone, unless a check at the end needs the whole chunks.

Checks that need the whole answer run either before anything is sent (``stream: hold``: the
plugin reads the whole stream first and answers with a :class:`HeldStream` of its chunks, or with
the error before the first byte) or at its end (``stream: end``: :class:`GuardedStream` collects
the chunks and runs them when the upstream stream ends, raising in place of the last batch, so
the client has seen every batch released before). What each leaks is said in
``docs/guardrails.md``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import msgspec

from proxy.core.reply import Chunk, Delta, RawFrames
from proxy.core.streams import BatchedStream, ReplyStream, batched, is_closable
from proxy.pii.detectors import Finder
from proxy.pii.text import TextView

EndCheck = Callable[[list[Chunk]], Awaitable[None]]
"""Runs the whole-answer checks on a stream's chunks at its end; raises to block."""

Key = tuple[int, str | int]  # a choice's index, and a text field's name or a tool call's index
Item = Chunk | RawFrames
_NO_MARKS: dict[Key, int] = {}

_TEXT_FIELDS = ("content", "reasoning_content", "refusal")


class WindowWatch:
    """The texts of one stream, scanned with ``finders`` (``(check name, finder)`` pairs) as they
    grow; ``on_found`` is told the name of each check that finds something (it may raise)."""

    __slots__ = (
        "_finders",
        "_lengths",
        "_on_found",
        "_pieces",
        "_scanned",
        "_tails",
        "_window",
        "pending",
    )

    def __init__(
        self,
        finders: Sequence[tuple[str, Finder]],
        window: int,
        on_found: Callable[[str], None],
    ) -> None:
        self._finders = tuple(finders)
        self._window = window
        self._on_found = on_found
        self._tails: dict[Key, str] = {}  # each text's last characters, already scanned
        self._pieces: dict[Key, list[str]] = {}  # what each text gained since
        self._lengths: dict[Key, int] = {}  # characters of each text fed
        self._scanned: dict[Key, int] = {}  # characters of each text scanned
        self.pending = 0
        """Characters fed since the last scan."""

    def feed(self, chunks: Sequence[Chunk | _FrameText]) -> dict[Key, int]:
        """Take the texts of ``chunks`` (one stream item's); returns where each of them ends
        (the item's marks)."""
        marks: dict[Key, int] = {}
        all_pieces = self._pieces
        lengths = self._lengths
        fed = 0
        for chunk in chunks:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.tool_calls or delta.reasoning_content or delta.refusal:
                    texts = _texts(delta)
                else:  # the common case: text alone
                    content = delta.content
                    if type(content) is not str or not content:
                        continue
                    texts = [("content", content)]
                for field, text in texts:
                    key = (choice.index, field)
                    pieces = all_pieces.get(key)
                    if pieces is None:
                        pieces = all_pieces[key] = []
                    pieces.append(text)
                    marks[key] = lengths[key] = lengths.get(key, 0) + len(text)
                    fed += len(text)
        self.pending += fed
        return marks

    def scan(self) -> None:
        """Scan what the texts gained since the last scan, each from ``window`` characters
        before it; then keep only each text's last ``window`` characters."""
        window = self._window
        for key, pieces in self._pieces.items():
            text = self._tails.get(key, "") + "".join(pieces)
            view = TextView(text)
            for name, finder in self._finders:
                if finder(view):
                    self._on_found(name)
            self._tails[key] = text[-window:] if len(text) > window else text
        self._pieces.clear()
        self._scanned.update(self._lengths)
        self.pending = 0

    @property
    def due(self) -> bool:
        """Whether a scan is due: a window's worth of text is waiting (scanning less often
        than every piece, each text is held back ``window`` to twice that many characters)."""
        return self.pending >= self._window

    def released(self, marks: dict[Key, int]) -> bool:
        """Whether an item with ``marks`` may go out: each of its texts was scanned with at
        least ``window`` characters after it."""
        lengths = self._scanned
        window = self._window
        return all(lengths.get(key, 0) - end >= window for key, end in marks.items())


class _FunctionText(msgspec.Struct):
    arguments: str | None = None


class _ToolText(msgspec.Struct):
    index: int
    function: _FunctionText | None = None


class _DeltaText(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolText] | None = None


class _ChoiceText(msgspec.Struct):
    index: int
    delta: _DeltaText = msgspec.field(default_factory=_DeltaText)


class _FrameText(msgspec.Struct):
    """What :class:`WindowWatch` reads of a verbatim frame: the texts of its choices."""

    choices: list[_ChoiceText]


_TEXTS_OF_FRAMES = msgspec.json.Decoder(list[_FrameText])
"""Verbatim frames (``data: {…}\\n\\n`` each, ordinary chunk events) read as one JSON array."""


def _texts(delta: Delta | _DeltaText) -> list[tuple[str | int, str]]:
    """The non-empty texts a delta carries, by field (tool calls by index)."""
    texts: list[tuple[str | int, str]] = []
    for field in _TEXT_FIELDS:
        value = getattr(delta, field)
        if type(value) is str and value:
            texts.append((field, value))
    for fragment in delta.tool_calls or ():
        function = fragment.function
        arguments = getattr(function, "arguments", None)
        if type(arguments) is str and arguments:
            texts.append((fragment.index, arguments))
    return texts


class GuardedStream(ReplyStream, BatchedStream):
    """A stream watched by ``watch`` (None: no window checks), whose chunks are collected for
    ``at_end`` (None: nothing runs at the end), and which tells ``on_over`` once that it ended
    (True) or failed (False). Errors of the inner stream propagate; closing closes it. It keeps
    batches and verbatim frames; it gives up end hooks (a plugin outside it wraps it again)."""

    __slots__ = (
        "_at_end",
        "_batches",
        "_chunks",
        "_done",
        "_held",
        "_inner",
        "_on_over",
        "_over",
        "_ready",
        "_watch",
    )

    def __init__(
        self,
        inner: ReplyStream,
        watch: WindowWatch | None,
        at_end: EndCheck | None,
        on_over: Callable[[bool], None],
    ) -> None:
        self._inner = inner
        self._batches = batched(inner)
        self._watch = watch
        self._at_end = at_end
        self._on_over = on_over
        self._chunks: list[Chunk] = []
        self._held: deque[tuple[Item, dict[Key, int]]] = deque()
        self._ready: deque[Chunk] = deque()
        self._done = False
        self._over = False

    @property
    def ended(self) -> bool:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Item]:
        """See :class:`~proxy.core.streams.BatchedStream`; raises what a check raises."""
        try:
            out = await self._next(raw)
        except BaseException:
            self._over_once(False)
            raise
        if self._done:
            self._over_once(True)
        return out

    async def _next(self, raw: bool) -> list[Item]:
        watch = self._watch
        collect = self._at_end is not None
        held = self._held
        while not self._done:
            batch = await self._batches.next_batch(raw)
            ended = not batch or self._batches.ended
            for item in batch:
                marks = _NO_MARKS
                if type(item) is not RawFrames:
                    if collect:
                        self._chunks.append(item)  # type: ignore[arg-type]  # a Chunk
                    if watch is not None:
                        marks = watch.feed((item,))  # type: ignore[arg-type]  # a Chunk
                elif collect:
                    parse = item.parse
                    chunks = [chunk for p in item.payloads() if (chunk := parse(p)) is not None]
                    self._chunks.extend(chunks)
                    if watch is not None:
                        marks = watch.feed(chunks)
                elif watch is not None:  # only the texts are needed: a lighter decoding
                    marks = watch.feed(
                        _TEXTS_OF_FRAMES.decode(
                            b"[" + item.data[6:-2].replace(b"\n\ndata: ", b",") + b"]"
                        )
                    )
                held.append((item, marks))
            if watch is not None and (ended or watch.due):
                watch.scan()
            if ended:
                if self._at_end is not None:
                    await self._at_end(self._chunks)
                self._done = True
                out = [item for item, _ in held]
                held.clear()
                return out
            out = []
            while held and (watch is None or watch.released(held[0][1])):
                out.append(held.popleft()[0])
            if out:
                return out
        return []

    def _over_once(self, ended: bool) -> None:
        if not self._over:
            self._over = True
            self._on_over(ended)

    def __aiter__(self) -> GuardedStream:
        return self

    async def __anext__(self) -> Chunk:
        ready = self._ready
        while not ready:
            batch = await self.next_batch(False)
            if not batch:
                raise StopAsyncIteration
            ready.extend(batch)  # type: ignore[arg-type]  # raw False: chunks only
        return ready.popleft()

    async def aclose(self) -> None:
        """Stop the stream and free its upstream connection (a stream closed before its end
        tells ``on_over`` it failed)."""
        self._held.clear()
        self._over_once(False)
        inner = self._inner
        if is_closable(inner):  # a plugin's plain iterator has nothing to close
            await inner.aclose()


class HeldStream(ReplyStream, BatchedStream):
    """A stream read whole before anything was sent: ``chunks``, in one batch."""

    __slots__ = ("_chunks",)

    def __init__(self, chunks: list[Chunk]) -> None:
        self._chunks: list[Chunk] | None = chunks

    @property
    def ended(self) -> bool:
        """Always True: every chunk is here."""
        return True

    async def next_batch(self, raw: bool) -> list[Item]:
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
