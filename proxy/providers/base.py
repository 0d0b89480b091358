"""The provider interface: what every upstream family implements, and what they share.

A provider is pure translation and does no I/O of its own. An HTTP provider
(:class:`HttpProvider`) turns a canonical call into an :class:`HttpRequest`, and the upstream's
bytes back into canonical values; the shared transport does the sending. A local provider
(:class:`LocalProvider`, e.g. ``mock``) answers in-process. Either way the upstream layer applies
the same clocks (:class:`Timeouts`) and the same stream priming.

Beyond its kind's methods a provider may offer optional capabilities, one small protocol each:
counting tokens (:class:`CountsTokens` over HTTP, :class:`CountsTokensLocally` in-process),
embeddings (:class:`Embeds`, :class:`EmbedsLocally`), audio, images, moderations and rerank
(:class:`ServesMedia`, :class:`ServesMediaLocally`; streamed, :class:`StreamsMedia`), stream
framing and parsing (:class:`DecodesStreams`, :class:`ParsesStreams`), verbatim frames
(:class:`VouchesFrames`), the request fields it drops (:class:`DropsFields`), the models it
lists (:class:`ListsModels`) and a batch API of its own (:class:`BatchesNatively`).
What a provider offers is decided once, when its snapshot is built (:func:`capabilities_of`,
a :class:`Capabilities` record of bound methods), never looked up per request.

Providers import only the canonical types, the errors and this module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Annotated, Literal, Protocol, TypeVar, runtime_checkable
from urllib.parse import quote

import msgspec
from msgspec import Meta, Struct

from proxy.core.canonical import Call, MediaOperation, Usage
from proxy.core.errors import BadRequest, UpstreamError
from proxy.core.reply import Chunk, Embeddings, MediaAnswer, MediaStream, RawFrames, Response

Seconds = Annotated[float, Meta(gt=0)]
_Block = TypeVar("_Block")


class Timeouts(Struct, frozen=True, forbid_unknown_fields=True):
    """The five clocks of one upstream call, in seconds. Expiry of any is a 504.

    - ``connect``: establishing a TCP/TLS connection.
    - ``pool_acquire``: waiting for a free pooled connection when ``max_connections`` are busy.
    - ``first_byte``: from sending the request to the response headers and, for a stream, its first
      event. For a non-streamed call this is the whole generation time, hence the long default.
    - ``idle``: between two stream events, and while reading a whole body.
    - ``total``: the whole call, body or stream included.
    """

    connect: Seconds = 5.0
    pool_acquire: Seconds = 10.0
    first_byte: Seconds = 120.0
    idle: Seconds = 60.0
    total: Seconds = 600.0


class ProviderConfig(Struct, frozen=True, forbid_unknown_fields=True, tag_field="type"):
    """Settings every provider has. Each provider type subclasses this with a ``tag``.

    ``default_model`` is the upstream model used when a client names no model (a dialect that
    allows that, such as Fabro): the first ready provider, in config order, that has one serves.
    ``max_response_bytes`` bounds a whole (non-streamed) answer and ``max_event_bytes`` one
    stream event, both counted after decompression; past either the call fails with 502
    ``upstream_response_too_large`` (in-band once a stream has started).
    ``propagate_trace: false`` keeps the W3C ``traceparent``/``tracestate`` headers off this
    provider's requests when tracing is on (for an upstream that rejects unknown headers).
    """

    default_model: str | None = None
    timeouts: Timeouts = Timeouts()
    max_connections: Annotated[int, Meta(ge=1, le=65536)] = 1024
    max_response_bytes: Annotated[int, Meta(ge=1024)] = 32 * 1024 * 1024
    max_event_bytes: Annotated[int, Meta(ge=1024)] = 8 * 1024 * 1024
    propagate_trace: bool = True


class HttpRequest(Struct):
    """An upstream request, ready to send: ``body`` is the encoded JSON, or, for an upload (a
    media call's multipart form, its boundary and ``content-length`` in ``headers``), the
    body's pieces in order, sent one after another so that its files' bytes are never copied
    into one body; it is sent with ``method``."""

    url: str
    headers: dict[str, str]
    body: bytes | tuple[bytes, ...]
    method: str = "POST"


@runtime_checkable
class HttpProvider(Protocol):
    """An upstream reached over HTTP. Every method is pure and must not block.

    ``ready`` is False when the provider lacks what it needs (e.g. an empty API key); the router
    never sends to a provider that is not ready. ``secrets`` are the credential values to redact
    from anything the gateway shows or logs.

    Optional capabilities of an HTTP provider: :class:`ParsesStreams`, :class:`DecodesStreams`,
    :class:`VouchesFrames`, :class:`CountsTokens`, :class:`Embeds` (without it an embeddings
    call to it is a 400), :class:`ServesMedia`, :class:`DropsFields`, :class:`ListsModels`.
    """

    name: str
    ready: bool
    secrets: tuple[str, ...]

    @property
    def config(self) -> ProviderConfig:
        """The provider's config section (read-only here: each provider narrows it to its own
        config Struct)."""
        ...

    def build_request(self, call: Call, model: str) -> HttpRequest:
        """The upstream request for ``call`` sent to upstream ``model``.

        Raises :class:`proxy.core.errors.BadRequest` if the call cannot be expressed for this
        provider.
        """
        ...

    def parse_response(self, body: bytes, model: str) -> Response:
        """The canonical response from a 2xx body. Raises :class:`UpstreamError` if malformed."""
        ...

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """The canonical chunk from one stream event, or None for events that carry none.

        Raises :class:`StreamEnd` at the provider's end-of-stream marker and
        :class:`UpstreamError` for an in-band error event.
        """
        ...

    def parse_error(self, status: int, headers: Mapping[str, str], body: bytes) -> UpstreamError:
        """The gateway error for a non-2xx upstream answer (its message already sanitised)."""
        ...


@runtime_checkable
class LocalProvider(Protocol):
    """An upstream answered in-process (the ``mock`` provider).

    Optional capabilities of a local provider: :class:`CountsTokensLocally`,
    :class:`EmbedsLocally` (without it an embeddings call to it is a 400),
    :class:`ServesMediaLocally`, :class:`ListsModels`.
    """

    name: str
    ready: bool
    secrets: tuple[str, ...]

    @property
    def config(self) -> ProviderConfig:
        """The provider's config section (read-only here: each provider narrows it to its own
        config Struct)."""
        ...

    async def complete(self, call: Call, model: str) -> Response | AsyncIterator[Chunk]:
        """A whole response, or (for ``call.stream``) an async iterator of chunks.

        Raises :class:`UpstreamError` (or a subclass) to simulate an upstream failure, before or
        during the stream.
        """
        ...


Provider = HttpProvider | LocalProvider


class StreamEnd(Exception):
    """Raised by :meth:`HttpProvider.parse_event` at the upstream's end-of-stream marker."""


class StreamParser(Protocol):
    """The translation state of one upstream stream, from ``HttpProvider.stream_parser()``.

    A fresh parser is made for every stream and sees its events in order, so it may keep state
    between them (which content block a tool-call argument fragment belongs to, the usage
    announced at the start, whether the upstream said it had finished).
    """

    def parse_event(self, event: str, data: bytes) -> Chunk | None:
        """As :meth:`HttpProvider.parse_event`, for the next event of this stream."""
        ...

    def end(self) -> Chunk | None:
        """The upstream body ended without :class:`StreamEnd`: a last chunk to yield, or None.

        Raises :class:`UpstreamError` (typically :class:`~proxy.core.errors.UpstreamUnavailable`) if
        the events so far show the stream was cut short.
        """
        ...


StreamEvent = tuple[str, bytes]
"""One framed stream event: its name (``""`` when unnamed) and its data — a pair, which the
transport unpacks (decoders yield NamedTuples of ``event`` and ``data``, such as
:class:`~proxy.core.sse.SSEEvent`)."""


class StreamDecoder(Protocol):
    """The framing of one upstream stream body, from ``HttpProvider.stream_decoder()``.

    Fed the body in whatever pieces the network delivers; yields the same events for any split.
    Raises :class:`UpstreamError` for bytes that cannot be framed. ``pending`` is the number of
    bytes held for an event not yet complete (the transport bounds it by ``max_event_bytes``).
    """

    @property
    def pending(self) -> int: ...

    def feed(self, data: bytes) -> Sequence[StreamEvent]:
        """The events that ``data`` completes (possibly none)."""
        ...

    def close(self) -> Sequence[StreamEvent]:
        """At the end of the body: the events still held, or an error if it ended mid-event."""
        ...


# ---------------------------------------------------------------------------------------------
# Optional capabilities: one protocol each, decided once per provider (capabilities_of)
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class ParsesStreams(Protocol):
    """An HTTP provider whose stream events cannot be translated one at a time (they refer to
    earlier events, or the stream has no end marker): the transport makes one parser per
    stream and uses it instead of :meth:`HttpProvider.parse_event` (see :class:`StreamParser`)."""

    def stream_parser(self) -> StreamParser:
        """A fresh parser for one stream."""
        ...


@runtime_checkable
class DecodesStreams(Protocol):
    """An HTTP provider whose streams are not server-sent events: the transport frames each
    stream's body with a fresh decoder instead of the SSE one (see :class:`StreamDecoder`)."""

    def stream_decoder(self) -> StreamDecoder:
        """A fresh decoder for one stream body."""
        ...


@runtime_checkable
class VouchesFrames(Protocol):
    """An HTTP provider whose events are OpenAI chat chunks, which it can tell apart cheaply:
    the verbatim fast path (:class:`~proxy.core.reply.RawFrames`). Offered only to a provider
    without :class:`ParsesStreams` whose streams are SSE."""

    def relay_frames(self, data: bytes) -> tuple[RawFrames | None, bytes]:
        """Offered each network read that starts on an SSE frame boundary: the run of ordinary
        chunks the read starts with, undecoded, so that OpenAI clients get them verbatim, and
        the rest of the read, which goes through ``parse_event`` as usual."""
        ...


@runtime_checkable
class CountsTokens(Protocol):
    """An HTTP provider whose API counts tokens: the gateway's ``count_tokens`` is then exact for
    it. Errors of the counting request go through :meth:`HttpProvider.parse_error`."""

    def count_tokens_request(self, call: Call, model: str) -> HttpRequest:
        """The upstream request that counts ``call``'s input tokens for ``model``."""
        ...

    def parse_token_count(self, body: bytes) -> int:
        """The count from a 2xx body. Raises :class:`UpstreamError` if malformed."""
        ...


@runtime_checkable
class CountsTokensLocally(Protocol):
    """A provider that knows, in-process, the input tokens it would report for a call."""

    def count_tokens(self, call: Call, model: str) -> int:
        """The input tokens of ``call`` for ``model``."""
        ...


@runtime_checkable
class Embeds(Protocol):
    """An HTTP provider that serves embeddings."""

    def build_embeddings(self, call: Call, model: str) -> list[HttpRequest]:
        """One request, or several sent together when its API takes one input per request."""
        ...

    def parse_embeddings(self, bodies: list[bytes], call: Call, model: str) -> Embeddings:
        """The vectors from the 2xx bodies, in request order (errors go through
        :meth:`HttpProvider.parse_error`)."""
        ...


@runtime_checkable
class EmbedsLocally(Protocol):
    """A provider that answers embeddings calls in-process."""

    async def embed(self, call: Call, model: str) -> Embeddings:
        """The vectors of an embeddings call."""
        ...


@runtime_checkable
class ServesMedia(Protocol):
    """An HTTP provider that serves some media operations (audio, images, moderations,
    rerank: :data:`~proxy.core.canonical.MediaOperation`), named in ``media_operations``; a
    media call of another operation to it is a 400 naming the provider and the operation."""

    media_operations: frozenset[MediaOperation]

    def build_media(self, call: Call, model: str) -> HttpRequest:
        """The upstream request for the media call ``call`` (``call.media`` set) to ``model``:
        a JSON body, or a multipart one (its boundary in the ``content-type`` header)."""
        ...

    def parse_media(
        self, headers: Mapping[str, str], body: bytes, call: Call, model: str
    ) -> MediaAnswer:
        """The client's answer from a 2xx answer (errors go through
        :meth:`HttpProvider.parse_error`): the body passed on as it came, and what it billed.
        Raises :class:`UpstreamError` for a body it must read and cannot."""
        ...


@runtime_checkable
class StreamsMedia(Protocol):
    """A media provider whose upstream streams its answers (speech's audio or events,
    transcriptions' and images' events), relayed to the client as they come. A streamed call
    (``call.stream``) to a media provider without it is answered whole: speech's audio (the
    same bytes, only later); any other streamed operation is refused with a 400 before it is
    sent."""

    def media_meter(self, headers: Mapping[str, str], call: Call, model: str) -> MediaMeter:
        """What reads the usage of a streamed 2xx answer (``call.stream``) with ``headers``,
        as its bytes are relayed to the client."""
        ...


class MediaMeter(Protocol):
    """Reads what a streamed media answer billed while its bytes pass (they are relayed as
    they came, never changed): :meth:`feed` each piece in order, then :meth:`usage` once at
    the end. It holds at most one event (or, for a JSON or text answer, the body) at a time:
    past ``max_event_bytes`` (``max_response_bytes``) :meth:`feed` raises
    :class:`~proxy.core.errors.UpstreamResponseTooLarge`. What it cannot read is not an error
    (the client has its bytes already): the usage falls back to what the request says."""

    def feed(self, data: bytes) -> None:
        """Read the next piece of the answer."""
        ...

    def bound(self) -> Usage | None:
        """The most the answer bills, as the request says (None: not known): what a stream
        that ends before its usage (the client went away) is charged."""
        ...

    def usage(self) -> Usage | None:
        """What the whole answer billed (None: neither it nor the request says)."""
        ...


@runtime_checkable
class ServesMediaLocally(Protocol):
    """A local provider that answers some media operations (``media_operations``) in-process;
    a streamed call (``call.stream``) may be answered as a :class:`MediaStream`."""

    media_operations: frozenset[MediaOperation]

    async def media(self, call: Call, model: str) -> MediaAnswer | MediaStream:
        """The answer of the media call ``call``."""
        ...


class BatchAPIError(Exception):
    """A provider's batch API answered an error (``status``) or could not be reached (None).
    ``lasting``: asking again cannot help (a 4xx but 429, or an answer that cannot be read)."""

    def __init__(self, what: str, status: int | None, *, lasting: bool | None = None) -> None:
        super().__init__(f"{what}: upstream status {status}" if status else what)
        self.status = status
        self.lasting = (
            lasting if lasting is not None else status is not None and 400 <= status < 500
        ) and status != 429


SendBatchRequest = Callable[[HttpRequest, str], Awaitable[bytes]]
"""Sends one request of a batch API flow (``what`` names the step in errors) and returns its
2xx body; raises :class:`BatchAPIError` for any other answer or a failure to reach it."""

ReadBatchLines = Callable[[HttpRequest, str], AsyncIterator[bytes]]
"""Sends one request of a batch API flow and yields its 2xx body's lines (without their ends) as
they arrive, so that a result file is never held whole; raises :class:`BatchAPIError` as
:data:`SendBatchRequest` does, and for a line past the provider's ``max_response_bytes``."""


class NativeBatchState(Struct, frozen=True):
    """An upstream batch as last polled. ``outcome`` is None while it runs, then
    ``completed``, ``failed`` (``errors``: its ``(code, message)`` pairs), ``cancelled`` or
    ``expired``; ``results`` is what the provider needs to read the results of an ended one
    (file ids, a results URL), opaque to everyone else."""

    outcome: Literal["completed", "failed", "cancelled", "expired"] | None
    errors: tuple[tuple[str, str], ...] = ()
    results: tuple[str, ...] = ()


class NativeResult(Struct, frozen=True):
    """One request's result in an ended upstream batch: its ``custom_id`` (as submitted), the
    HTTP ``status`` it had (200 when it succeeded), and ``body``: the provider's own answer
    body — the response, or the error — as its online API would have sent it (None for a
    request that never ran: ``outcome`` then says ``cancelled`` or ``expired``)."""

    custom_id: str
    status: int
    body: bytes | None
    outcome: Literal["succeeded", "errored", "cancelled", "expired"]


@runtime_checkable
class BatchesNatively(Protocol):
    """An HTTP provider with a batch API of its own (OpenAI's Files and Batch APIs, Azure's,
    Anthropic's Message Batches), at the vendor's batch discount.

    ``batch_endpoints`` are the online endpoints whose requests its batches take, named as
    OpenAI's batch API names them (``/v1/chat/completions``, ``/v1/embeddings``,
    ``/v1/responses``; ``/v1/messages`` for Anthropic's); a request line is the body that
    endpoint takes. A batch API flow is several dependent calls (upload, create, poll, read),
    so the provider is handed the sending (``send``) rather than returning requests one at a
    time; it still does no I/O of its own. Every method raises :class:`BatchAPIError` for an
    answer it cannot use.
    """

    @property
    def batch_endpoints(self) -> frozenset[str]:
        """The batch endpoints it takes (see the class docstring)."""
        ...

    async def submit_batch(
        self,
        send: SendBatchRequest,
        endpoint: str,
        model: str,
        lines: Sequence[tuple[str, dict[str, object]]],
    ) -> str:
        """Create an upstream batch of ``lines`` (``(custom_id, request body)``, for
        ``endpoint``, each body's ``model`` set here to ``model``'s upstream name); its id."""
        ...

    async def poll_batch(self, send: SendBatchRequest, batch_id: str) -> NativeBatchState:
        """The upstream batch ``batch_id`` as it stands."""
        ...

    async def cancel_batch(self, send: SendBatchRequest, batch_id: str) -> None:
        """Ask the provider to cancel the upstream batch ``batch_id``."""
        ...

    def batch_results(
        self, read: ReadBatchLines, state: NativeBatchState
    ) -> AsyncIterator[NativeResult]:
        """The results of an ended upstream batch, each once, in no particular order, read
        line by line as they arrive."""
        ...


class HoldsBatchAPI:
    """Gives a provider the :class:`BatchesNatively` methods of the batch API it holds as
    ``batch_api`` (the batch API is its own object; the provider offers it as a capability)."""

    batch_api: BatchesNatively

    @property
    def batch_endpoints(self) -> frozenset[str]:
        """See :class:`BatchesNatively`."""
        return self.batch_api.batch_endpoints

    async def submit_batch(
        self,
        send: SendBatchRequest,
        endpoint: str,
        model: str,
        lines: Sequence[tuple[str, dict[str, object]]],
    ) -> str:
        """See :meth:`BatchesNatively.submit_batch`."""
        return await self.batch_api.submit_batch(send, endpoint, model, lines)

    async def poll_batch(self, send: SendBatchRequest, batch_id: str) -> NativeBatchState:
        """See :meth:`BatchesNatively.poll_batch`."""
        return await self.batch_api.poll_batch(send, batch_id)

    async def cancel_batch(self, send: SendBatchRequest, batch_id: str) -> None:
        """See :meth:`BatchesNatively.cancel_batch`."""
        await self.batch_api.cancel_batch(send, batch_id)

    def batch_results(
        self, read: ReadBatchLines, state: NativeBatchState
    ) -> AsyncIterator[NativeResult]:
        """See :meth:`BatchesNatively.batch_results`."""
        return self.batch_api.batch_results(read, state)


@runtime_checkable
class DropsFields(Protocol):
    """An HTTP provider that removes request fields its vendor rejects (named in a debug log)."""

    def dropped_fields(self, call: Call, model: str) -> list[str]:
        """The fields of ``call`` it removes for ``model`` (empty when none)."""
        ...


@runtime_checkable
class ListsModels(Protocol):
    """A provider whose upstream model names ``/v1/models`` lists as ``<provider>/<model>``
    while it is ready."""

    listed_models: tuple[str, ...]


@runtime_checkable
class NamesPreset(Protocol):
    """A provider config that names a vendor preset (an OpenAI-compatible provider's
    ``preset``): its prices' catalog family."""

    preset: str | None


class Capabilities(Struct, frozen=True):
    """What one provider offers, decided once (:func:`capabilities_of`): the provider itself
    under its kind (``http`` or ``local``, the other None) and each optional capability's
    bound method (or, for one of two methods, the provider typed as it), None when it has
    none. Whoever needs a capability reads this record, never the provider's attributes."""

    http: HttpProvider | None = None
    local: LocalProvider | None = None
    stream_parser: Callable[[], StreamParser] | None = None
    stream_decoder: Callable[[], StreamDecoder] | None = None
    relay_frames: Callable[[bytes], tuple[RawFrames | None, bytes]] | None = None
    token_counter: CountsTokens | None = None
    count_tokens: Callable[[Call, str], int] | None = None
    embedder: Embeds | None = None
    embed: Callable[[Call, str], Awaitable[Embeddings]] | None = None
    dropped_fields: Callable[[Call, str], list[str]] | None = None
    listed_models: tuple[str, ...] = ()
    media_server: ServesMedia | None = None
    media_meter: Callable[[Mapping[str, str], Call, str], MediaMeter] | None = None
    media: Callable[[Call, str], Awaitable[MediaAnswer | MediaStream]] | None = None
    media_operations: frozenset[MediaOperation] = frozenset()
    batcher: BatchesNatively | None = None

    @property
    def embeds(self) -> bool:
        """Whether it serves embeddings (over HTTP or in-process)."""
        return self.embedder is not None or self.embed is not None


def capabilities_of(provider: Provider) -> Capabilities:
    """The :class:`Capabilities` of ``provider``, from the protocols it satisfies (each checked
    once, here: ``isinstance``). A local provider is one that satisfies :class:`LocalProvider`;
    any other is reached over HTTP."""
    http: HttpProvider | None = None
    local: LocalProvider | None = None
    if isinstance(provider, LocalProvider):
        local = provider
    else:
        http = provider
    return Capabilities(
        http=http,
        local=local,
        stream_parser=provider.stream_parser if isinstance(provider, ParsesStreams) else None,
        stream_decoder=provider.stream_decoder if isinstance(provider, DecodesStreams) else None,
        relay_frames=provider.relay_frames if isinstance(provider, VouchesFrames) else None,
        token_counter=provider if isinstance(provider, CountsTokens) else None,
        count_tokens=provider.count_tokens if isinstance(provider, CountsTokensLocally) else None,
        embedder=provider if isinstance(provider, Embeds) else None,
        embed=provider.embed if isinstance(provider, EmbedsLocally) else None,
        dropped_fields=provider.dropped_fields if isinstance(provider, DropsFields) else None,
        listed_models=provider.listed_models if isinstance(provider, ListsModels) else (),
        media_server=provider if isinstance(provider, ServesMedia) else None,
        media_meter=provider.media_meter if isinstance(provider, StreamsMedia) else None,
        media=provider.media if isinstance(provider, ServesMediaLocally) else None,
        media_operations=_media_operations(provider),
        batcher=provider if isinstance(provider, BatchesNatively) else None,
    )


def _media_operations(provider: Provider) -> frozenset[MediaOperation]:
    """The media operations ``provider`` serves (none unless it has a media capability)."""
    if isinstance(provider, ServesMedia):
        return provider.media_operations
    if isinstance(provider, ServesMediaLocally):
        return provider.media_operations
    return frozenset()


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds; HTTP dates ignored)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(float(value) * scale, 0.0)
            except ValueError:
                continue
    return None


def malformed(provider: str, what: str, exc: Exception) -> UpstreamError:
    """The error for an upstream body or event that does not decode (the gateway answers 502)."""
    return UpstreamError(
        f"upstream sent a malformed {what}: {exc}", upstream_status=200, provider=provider
    )


def with_plugin_headers(own: dict[str, str], added: Mapping[str, str]) -> dict[str, str]:
    """A provider's own headers plus those plugins set for the upstream (``Call.upstream_headers``).

    A plugin header never replaces one of the provider's own — credentials, content type, a
    signature — whatever its case; ``own`` itself is returned when plugins added nothing.
    """
    if not added:
        return own
    names = {name.lower() for name in own}
    return {**{k: v for k, v in added.items() if k.lower() not in names}, **own}


def path_segment(value: str, *, safe: str = "", param: str = "model") -> str:
    """``value`` percent-encoded as one URL path segment (``safe`` characters kept literal).

    For client-chosen names (``provider/<model>``) that a provider puts in its URL path: ``/``,
    ``?`` and ``#`` are escaped, and an empty, ``.`` or ``..`` segment is a
    :class:`~proxy.core.errors.BadRequest` naming ``param``, because HTTP clients resolve dot
    segments (even escaped ones) and the request, credentials included, would reach another
    path of the upstream host.
    """
    if value in ("", ".", ".."):
        raise BadRequest(f"{value!r} is not a valid upstream {param} name", param=param)
    return quote(value, safe=safe)


def merge_json_objects(*objects: bytes) -> bytes:
    """Concatenate JSON object texts with disjoint keys into one object text.

    Each argument must be an encoded JSON object (``{...}``); empty objects are skipped. This lets
    a provider encode typed Structs and raw pass-through fields without a dict round trip.
    """
    members = [obj[1:-1] for obj in objects if len(obj) > 2]
    return b"{" + b",".join(members) + b"}"


def encode_raw_fields(fields: Mapping[str, msgspec.Raw]) -> bytes:
    """Encode pass-through fields (already JSON) as one object text."""
    return msgspec.json.encode(fields) if fields else b"{}"


def merge_into_turn(
    content: list[_Block], blocks: Iterable[_Block], is_tool_result: Callable[[_Block], bool]
) -> None:
    """Append ``blocks`` to a turn's ``content``, tool results after the turn's leading ones.

    For upstreams that carry tool results in user turns and want them before anything else of
    the turn (Anthropic, Bedrock): consecutive canonical messages merged into one turn keep
    their order, except that every tool result moves ahead of the turn's other blocks.
    """
    for block in blocks:
        if not is_tool_result(block):
            content.append(block)
            continue
        lead = 0
        while lead < len(content) and is_tool_result(content[lead]):
            lead += 1
        content.insert(lead, block)
