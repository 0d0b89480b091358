"""Rewrite a reply stream chunk by chunk, holding back only what a placeholder split needs.

:class:`ChunkRewriter` runs every text of every choice — ``content``, ``reasoning_content``,
``refusal``, and each tool call's ``arguments`` (as JSON) — through its own
:class:`~proxy.pii.restore.Pipeline`, so a placeholder split across chunks (or across two
argument fragments) comes out whole in the chunk that completes it. Text held back is released
when the same text continues, when the choice switches to another text (a flush chunk goes out
first, so the order of texts is kept), when the choice finishes (into the finishing chunk) and
when the stream ends. A chunk that changes is a copy: the original may be shared (a cache's
replay), and its verbatim bytes no longer describe it.

:class:`RewritingStream` wraps a reply stream with a rewriter and offers the
:class:`~proxy.core.streams.BatchedStream` interface. Verbatim frames (``RawFrames``) are passed
on as they came when nothing is held and their bytes hold no ``<`` and no ``\\u003`` (so no
placeholder can start in them) and the output is not scanned; otherwise they are decoded. It
takes no end hooks itself (:class:`~proxy.core.streams.EndObservable`): a plugin outside it
that observes the stream wraps it once more.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import msgspec

from proxy.core.reply import (
    Chunk,
    ChunkChoice,
    Delta,
    FunctionCallDelta,
    RawFrames,
    ToolCallDelta,
)
from proxy.core.streams import BatchedStream, ReplyStream, batched, is_closable
from proxy.pii.restore import Pipeline, Rewriter

_TEXT_FIELDS = ("reasoning_content", "content", "refusal")
FieldKey = str | int  # a text field's name, or a tool call's index


class ChunkRewriter:
    """Rewrites one stream's chunks (see the module docstring)."""

    __slots__ = ("_holding", "_last", "_pipelines", "_rewriter", "_scans")

    def __init__(self, rewriter: Rewriter) -> None:
        self._rewriter = rewriter
        self._scans = rewriter.scans
        self._pipelines: dict[tuple[int, FieldKey], Pipeline] = {}
        self._holding: set[tuple[int, FieldKey]] = set()
        self._last: Chunk | None = None

    @property
    def holding(self) -> bool:
        """Whether any text is held back."""
        return bool(self._holding)

    @property
    def scans(self) -> bool:
        """Whether every text must be looked at (output scanning)."""
        return self._scans

    def chunk(self, chunk: Chunk) -> list[Chunk]:
        """What to send for ``chunk``: itself or a rewritten copy, after any flush chunks."""
        self._last = chunk
        if not self._holding and not self._scans and not _may_hold_placeholder(chunk):
            return [chunk]
        before: list[Chunk] = []
        choices: list[ChunkChoice] | None = None
        for position, choice in enumerate(chunk.choices):
            texts = _texts(choice.delta)
            if not texts and choice.finish_reason is None:
                continue
            switched = self._switched(choice.index, texts)
            if switched:
                before.append(_chunk_of(chunk, choice.index, switched))
            rewritten = self._rewrite(choice, texts)
            if rewritten is not choice:
                if choices is None:
                    choices = list(chunk.choices)
                choices[position] = rewritten
        if choices is not None:
            chunk = msgspec.structs.replace(chunk, choices=choices, raw=None)
        elif self._scans and chunk.raw is not None:
            # Scanned output goes out as the canonical fields say, never as the upstream's
            # bytes: members the canonical types do not model would pass unscanned.
            chunk = msgspec.structs.replace(chunk, raw=None)
        before.append(chunk)
        return before

    def finish(self) -> list[Chunk]:
        """Chunks with whatever is still held back, when the stream has ended."""
        last = self._last
        by_choice: dict[int, dict[FieldKey, str]] = {}
        for index, key in sorted(self._holding, key=repr):
            by_choice.setdefault(index, {})[key] = self._pipelines[index, key].flush()
        self._holding.clear()
        if last is None:
            return []
        return [_chunk_of(last, index, texts) for index, texts in sorted(by_choice.items())]

    def _feed(self, index: int, key: FieldKey, text: str) -> str:
        pipeline = self._pipelines.get((index, key))
        if pipeline is None:
            pipeline = self._rewriter.pipeline(json=isinstance(key, int))
            self._pipelines[index, key] = pipeline
        out = pipeline.feed(text)
        if pipeline.holding:
            self._holding.add((index, key))
        else:
            self._holding.discard((index, key))
        return out

    def _flush(self, index: int, key: FieldKey) -> str:
        self._holding.discard((index, key))
        return self._pipelines[index, key].flush()

    def _switched(self, index: int, texts: dict[FieldKey, str]) -> dict[FieldKey, str]:
        """Held text of ``index``'s other fields, now that ``texts`` moved on to new ones."""
        if not texts or not self._holding:
            return {}
        keys = [key for held, key in self._holding if held == index and key not in texts]
        return {key: self._flush(index, key) for key in keys}

    def _rewrite(self, choice: ChunkChoice, texts: dict[FieldKey, str]) -> ChunkChoice:
        index = choice.index
        new = {key: self._feed(index, key, text) for key, text in texts.items()}
        if choice.finish_reason is not None:  # the choice is over: nothing may stay held
            for key in [key for held, key in self._holding if held == index]:
                new[key] = new.get(key, "") + self._flush(index, key)
        if all(new[key] is texts.get(key) for key in new):
            return choice
        return msgspec.structs.replace(choice, delta=_with_texts(choice.delta, new))


def _may_hold_placeholder(chunk: Chunk) -> bool:
    """Whether any text of ``chunk`` contains ``<`` (or, in tool arguments, a backslash)."""
    for choice in chunk.choices:
        delta = choice.delta
        for value in (delta.content, delta.reasoning_content, delta.refusal):
            if type(value) is str and "<" in value:
                return True
        for fragment in delta.tool_calls or ():
            function = fragment.function
            if type(function) is FunctionCallDelta:
                arguments = function.arguments
                if type(arguments) is str and ("<" in arguments or "\\" in arguments):
                    return True
    return False


def _chunk_of(like: Chunk, index: int, texts: dict[FieldKey, str]) -> Chunk:
    """A chunk like ``like`` (id, model, time) carrying ``texts`` for choice ``index``."""
    return Chunk(
        id=like.id,
        model=like.model,
        created=like.created,
        choices=[ChunkChoice(index=index, delta=_with_texts(Delta(), texts))],
    )


def _texts(delta: Delta) -> dict[FieldKey, str]:
    """The non-empty texts a delta carries, by field (tool calls by index)."""
    texts: dict[FieldKey, str] = {}
    for field in _TEXT_FIELDS:
        value = getattr(delta, field)
        if type(value) is str and value:
            texts[field] = value
    for fragment in delta.tool_calls or ():
        function = fragment.function
        arguments = function.arguments if type(function) is FunctionCallDelta else None
        if type(arguments) is str and arguments:
            texts[fragment.index] = arguments
    return texts


def _with_texts(delta: Delta, texts: dict[FieldKey, str]) -> Delta:
    """A copy of ``delta`` carrying ``texts`` instead of its own."""
    changes: dict[str, Any] = {key: value for key, value in texts.items() if isinstance(key, str)}
    arguments = {key: value for key, value in texts.items() if isinstance(key, int)}
    if arguments:
        fragments: list[ToolCallDelta] = []
        for fragment in delta.tool_calls or ():
            if fragment.index in arguments:
                function = fragment.function
                name = function.name if type(function) is FunctionCallDelta else msgspec.UNSET
                fragment = msgspec.structs.replace(
                    fragment,
                    function=FunctionCallDelta(name=name, arguments=arguments.pop(fragment.index)),
                )
            fragments.append(fragment)
        fragments.extend(
            ToolCallDelta(index=index, function=FunctionCallDelta(arguments=text))
            for index, text in sorted(arguments.items())
        )
        changes["tool_calls"] = fragments
    return msgspec.structs.replace(delta, **changes)


class RewritingStream(ReplyStream, BatchedStream):
    """A reply stream rewritten by a :class:`ChunkRewriter` (see the module docstring).

    Errors of the inner stream propagate unchanged; closing closes the inner stream. Of the
    fast paths of :mod:`proxy.core.streams` it keeps the batches, and the verbatim frames that
    cannot hold a placeholder; it gives up end hooks.
    """

    __slots__ = ("_batches", "_done", "_inner", "_ready", "_rewriter")

    def __init__(self, inner: ReplyStream, rewriter: ChunkRewriter) -> None:
        self._inner = inner
        self._batches = batched(inner)
        self._rewriter = rewriter
        self._ready: deque[Chunk] = deque()
        self._done = False

    @property
    def ended(self) -> bool:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        return self._batches.ended

    async def next_batch(self, raw: bool) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.core.streams.BatchedStream`."""
        while True:
            if self._done:
                return []
            batch = await self._batches.next_batch(True)
            out: list[Chunk | RawFrames] = []
            rewriter = self._rewriter
            for item in batch:
                if type(item) is RawFrames:
                    if raw and _passes(item, rewriter):
                        out.append(item)
                        continue
                    parse = item.parse
                    for payload in item.payloads():
                        chunk = parse(payload)
                        if chunk is not None:
                            out.extend(rewriter.chunk(chunk))
                else:
                    out.extend(rewriter.chunk(item))  # type: ignore[arg-type]
            if not batch or self._batches.ended:
                self._done = True
                out.extend(rewriter.finish())
            if out:
                return out

    def __aiter__(self) -> RewritingStream:
        return self

    async def __anext__(self) -> Chunk:
        ready = self._ready
        while not ready:
            batch = await self.next_batch(False)
            if not batch:
                raise StopAsyncIteration
            ready.extend(batch)  # type: ignore[arg-type]
        return ready.popleft()

    async def aclose(self) -> None:
        """Stop the stream and free its upstream connection."""
        inner = self._inner
        if is_closable(inner):  # a plugin's plain iterator has nothing to close
            await inner.aclose()


def _passes(frames: RawFrames, rewriter: ChunkRewriter) -> bool:
    """Whether ``frames`` can go out verbatim: nothing in them can start a placeholder."""
    if rewriter.scans or rewriter.holding:
        return False
    data = frames.data
    return b"<" not in data and b"\\u003" not in data
