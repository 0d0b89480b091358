"""Canonical replies: what a provider's answer becomes and a dialect encodes — a whole
:class:`Response`, a stream of :class:`Chunk` (an OpenAI-compatible upstream's frames kept
verbatim: :class:`RawFrames`), :class:`Embeddings`, all carried by one :class:`Reply`. The
request side is :mod:`proxy.core.canonical`; what a reply stream is, and the fast paths it may
offer (batches, verbatim frames, end hooks), :mod:`proxy.core.streams`, whose
:class:`~proxy.core.streams.BatchedStream` and :func:`~proxy.core.streams.batched` this module
also exports, where they used to be.

This module imports nothing of the project but :mod:`proxy.core.canonical` and
:mod:`proxy.core.streams`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, Struct, UnsetType

from proxy.core.canonical import (
    FinishReason,
    Message,
    Role,
    Usage,
)
from proxy.core.streams import BatchedStream as BatchedStream  # re-exported: its old home
from proxy.core.streams import ReplyStream
from proxy.core.streams import batched as batched  # re-exported: its old home

# ---------------------------------------------------------------------------------------------
# The reply
# ---------------------------------------------------------------------------------------------

_FINGERPRINTS = msgspec.json.Encoder()


class Choice(Struct):
    """One alternative of a whole response (``finish_reason``, ``logprobs`` always encoded).

    ``stop_sequence`` is the stop sequence that ended it, when the upstream said which one
    matched (Anthropic does; OpenAI does not); dialects without such a field leave it out.
    """

    index: int
    message: Message
    finish_reason: FinishReason | None = None
    logprobs: dict[str, Any] | None = None
    stop_sequence: str | UnsetType = UNSET


class Response(Struct, omit_defaults=True):
    """A whole (non-streamed) completion.

    ``raw`` is the upstream's own JSON body when it is a complete OpenAI ``chat.completion``
    (an OpenAI-compatible provider keeps it with :meth:`keep_raw`), so that OpenAI clients also
    get what the canonical types do not model: a vendor's extra fields, ``message.audio``,
    usage details. While the canonical fields are as they were parsed (:meth:`unchanged`) the
    body is sent as it is; once a plugin changed them they win, and only the members they do
    not model are taken from ``raw``. A plugin that must let nothing unmodelled through (it
    rewrites the answer entirely) sets ``raw`` to None.
    """

    id: str
    model: str
    choices: list[Choice]
    created: int = 0
    usage: Usage | None = None
    system_fingerprint: str | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET
    raw: bytes | None = None
    raw_fingerprint: int | None = None  # fingerprint() when raw was kept

    def fingerprint(self) -> int:
        """A hash of the canonical fields' encoding: equal to an earlier fingerprint only if
        nothing changed them since (but for a 64-bit collision). It is per process: one read
        back in another process does not match, which only costs the verbatim answer."""
        return hash(
            _FINGERPRINTS.encode(msgspec.structs.replace(self, raw=None, raw_fingerprint=None))
        )

    def keep_raw(self, body: bytes) -> None:
        """Keep ``body``, the upstream JSON these canonical fields were just parsed from."""
        self.raw = body
        self.raw_fingerprint = self.fingerprint()

    def unchanged(self) -> bool:
        """Whether ``raw`` is kept and says exactly what the canonical fields say."""
        return self.raw is not None and self.raw_fingerprint == self.fingerprint()


class ToolCallDelta(Struct, omit_defaults=True):
    """A fragment of a streamed tool call; ``id`` and the function name come in its first one."""

    index: int
    id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    function: FunctionCallDelta | UnsetType = UNSET


class FunctionCallDelta(Struct, omit_defaults=True):
    """A fragment of a streamed function call: the name once, then ``arguments`` text pieces."""

    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET


class Delta(Struct, omit_defaults=True):
    """What one chunk adds to one choice."""

    role: Role | UnsetType = UNSET
    content: str | UnsetType | None = UNSET
    reasoning_content: str | UnsetType | None = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType = UNSET
    refusal: str | UnsetType | None = UNSET
    annotations: list[dict[str, Any]] | UnsetType | None = UNSET  # as Message's


class ChunkChoice(Struct):
    """One choice's part of a chunk (``finish_reason``/``logprobs`` always encoded).

    ``delta`` defaults to empty: some upstreams (Azure's content-filter annotations) send a
    choice without one.
    """

    index: int
    delta: Delta = msgspec.field(default_factory=Delta)
    finish_reason: FinishReason | None = None
    logprobs: dict[str, Any] | None = None
    stop_sequence: str | UnsetType = UNSET  # as Choice's, with the finish reason


class Chunk(Struct, omit_defaults=True):
    """One event of a streamed completion; the last one usually carries ``usage``.

    ``raw`` is the upstream's own JSON for this event when it already is an OpenAI
    ``chat.completion.chunk`` (an OpenAI-compatible provider sets it), so that the OpenAI chat
    dialect can send it on unchanged instead of encoding it again, with whatever fields the
    canonical types do not model (the usage chunk's details included). It describes the chunk
    as received: code that changes a chunk must set ``raw`` to None (a new Chunk has none).
    ``input_usage`` is the usage an upstream announced before its first delta (Anthropic's
    ``message_start``): the input buckets, and whatever output it counted by then. It only
    informs dialects that say it early too; ``usage`` on a later chunk still carries the totals.
    ``media`` is a piece of a streamed media answer (:class:`MediaStream`: audio bytes, or an
    event stream's bytes) as the upstream sent it, for the media dialects to relay unchanged; such
    a chunk has no choices, and the last one of its stream carries the usage.
    """

    id: str
    model: str
    choices: list[ChunkChoice]
    created: int = 0
    usage: Usage | None = None
    system_fingerprint: str | UnsetType | None = UNSET
    raw: bytes | None = None
    input_usage: Usage | None = None
    media: bytes | None = None


class RawFrames:
    """Stream events of an OpenAI-compatible upstream, kept as the bytes it sent until needed.

    ``data`` is one or more complete SSE frames, each ``data: {...}\\n\\n``, that the provider
    vouched for as *ordinary* ``chat.completion.chunk`` events: valid JSON naming an id, a
    creation time and a model, with no usage and no error: events the provider would decode
    into chunks carrying :attr:`Chunk.raw`. The OpenAI chat dialect forwards ``data`` as it is;
    whoever needs canonical chunks decodes each frame's JSON (:meth:`payloads`) with ``parse``,
    which raises :class:`~proxy.core.errors.UpstreamError` for a frame it cannot read. ``count`` is
    the number of frames (given by a provider that already knows it, else counted).
    Verbatim frames spare the hot path a decode and an encode per event; they are only ever
    produced by a provider that can tell them apart cheaply (see ``HttpProvider``).
    """

    __slots__ = ("count", "data", "parse")

    usage: None = None
    """Verbatim frames never carry usage (see above): a reader may ask any stream item for its
    usage, as :class:`Chunk` answers it."""

    def __init__(
        self, data: bytes, parse: Callable[[bytes], Chunk | None], count: int | None = None
    ) -> None:
        self.data = data
        self.parse = parse
        self.count = data.count(b"\n\n") if count is None else count

    def payloads(self) -> list[bytes]:
        """The JSON of each frame, in order."""
        return [frame[6:] for frame in self.data[:-2].split(b"\n\n")]


class Embeddings(Struct):
    """The vectors of an embeddings call, one per input in input order; ``model`` is the
    upstream model that made them; ``usage.input`` the tokens billed (None: not reported)."""

    vectors: list[list[float]]
    model: str
    usage: Usage | None = None


class MediaAnswer(Struct):
    """The answer of a media call, as the client gets it: ``body`` (JSON, text or audio bytes,
    passed on undecoded) of ``content_type``; ``usage`` what it billed (None: not known)."""

    body: bytes
    content_type: str
    usage: Usage | None = None


class MediaStream(NamedTuple):
    """A media answer streamed as it arrives: ``pieces`` (chunks whose :attr:`Chunk.media` is
    the upstream's bytes as they came, the last one with the usage it billed; single chunks, or
    lists of them per network read ending with ``None`` once the body is complete) of
    ``content_type`` (audio, or ``text/event-stream``)."""

    content_type: str
    pieces: AsyncIterator[Chunk] | AsyncIterator[list[Chunk | RawFrames | None]]


class Encoded(Struct, frozen=True):
    """A whole answer's body made ahead for one dialect (a cache hit's stored answer): exactly
    what ``dialect``'s encoder makes of ``response``."""

    dialect: str
    response: Response
    body: bytes


class Reply(Struct):
    """What the chain returns: a whole :class:`Response`, a stream of :class:`Chunk`, or, for
    an embeddings call (:attr:`Call.embedding`), :class:`Embeddings`; for a media call
    (:attr:`Call.media`), :class:`MediaAnswer`, or, streamed, a stream whose chunks carry the
    answer's bytes (:attr:`Chunk.media`) with its ``content-type`` in ``headers``.

    Exactly one of ``response``, ``stream``, ``embeddings`` and ``media`` is set: a plugin that
    wraps streams or rewrites responses leaves a reply with neither alone. A stream returned by the
    upstream is *primed*: its first chunk has already arrived, so any failure before the first
    byte reaches the client surfaces as an exception from ``await next(call)`` (where retry and
    fallback act), and a failure while iterating is a mid-stream failure. Whoever stops
    iterating early must ``aclose()`` the stream to free the upstream connection. The stream
    is a :class:`~proxy.core.streams.ReplyStream`, and may offer the fast paths of
    :mod:`proxy.core.streams` (batches, verbatim frames, end hooks); a plugin that wraps it
    keeps them by offering them too, or gives them up (what that costs is said there).
    ``provider`` / ``model`` name the deployment that served; ``headers`` are extra response
    headers for the client; ``attempts`` counts the upstream calls made for this reply
    (retries and fallbacks included). ``encoded``, when set, is the client's body already made
    for ``response``: it is sent as it is while ``response`` is still ``encoded.response`` and
    the client speaks ``encoded.dialect``. A plugin that changes an answer therefore replaces
    ``response`` (never edits it in place), which leaves ``encoded`` behind.
    """

    provider: str
    model: str
    response: Response | None = None
    stream: ReplyStream | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    attempts: int = 1
    embeddings: Embeddings | None = None
    encoded: Encoded | None = None
    media: MediaAnswer | None = None

    def whole_usage(self) -> Usage | None:
        """The usage a whole reply (a response or embeddings) reported; None for a stream,
        whose usage comes with its last chunk."""
        if self.response is not None:
            return self.response.usage
        if self.embeddings is not None:
            return self.embeddings.usage
        if self.media is not None:
            return self.media.usage
        return None
