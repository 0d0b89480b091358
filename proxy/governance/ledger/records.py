"""A spend record: what the ledger keeps of one request, and how a finished request becomes one.

The fields are the admin API's (``GET /admin/spend/logs``), with money kept as exact integer
nano-dollars (``cost_nanos``, ``saved_nanos``; the API shows them as ``cost_usd`` /
``saved_usd``) and ``time`` as a UNIX timestamp (seconds, UTC) of the request's end. ``id`` is
the ledger's own key, unique per request whatever the client sent as ``x-request-id``
(``request_id`` is that id, as the client saw it): replaying a journal never duplicates a
record, and two requests reusing one ``x-request-id`` are both kept.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from proxy.core.canonical import Call, MediaUnits, Usage
from proxy.core.plugin import FinishedRequest

_MAX_TEXT = 256  # stored strings (model names, users) are bounded, as in the access log
_MAX_IMAGE_TEXT = 32  # an image's size or quality, as the client named it
_NO_USAGE = Usage()
_BIT_52 = 1 << 52
_JSON = msgspec.json.Encoder()
_TAILS = tuple(hex(0x1000 | n)[3:] for n in range(0x1000))  # "000" … "fff"


class SpendRecord(msgspec.Struct, gc=False):
    """One request in the ledger (see the module docstring). None: not known or not applicable.

    ``user`` is the end user the request named (OpenAI ``user``, Anthropic ``metadata.user_id``,
    orq ``identity.id``), else the user the key belongs to. ``model`` is the model the client
    asked for (an alias or ``provider/model``), ``provider`` / ``upstream_model`` the deployment
    that answered. ``status`` is the HTTP status the client got (499: it went away first);
    ``cache`` the cache's verdict (``hit`` costs 0 and records what it saved); ``batch_id``
    the batch the request was a line of. ``guardrails`` the ``guardrails`` plugin's verdicts as
    JSON text, a list of ``{check, phase, verdict}`` (None: no check ran).
    An MCP tool call (``dialect`` ``mcp``) names its ``mcp_server`` and ``mcp_tool`` (``model``
    is ``server/tool``), and ``mcp_bytes`` is the size of the result it returned.
    A media call (audio, images, rerank) records the units it was billed
    (:class:`~proxy.core.canonical.MediaUnits`): ``audio_seconds`` transcribed or translated,
    ``characters`` spoken, ``images`` made (of ``image_size`` / ``image_quality`` when known),
    rerank ``search_units``; each is None when the call billed none of it.
    """

    id: str
    request_id: str
    time: float
    key_id: str | None
    key_alias: str | None
    team: str | None
    user: str | None
    dialect: str
    model: str | None
    provider: str | None
    upstream_model: str | None
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_nanos: int | None
    cost_source: str | None
    saved_nanos: int | None
    status: int
    error_code: str | None
    duration_ms: float
    ttft_ms: float | None
    attempts: int
    fallback: str | None
    cache: str | None
    batch_id: str | None = None
    guardrails: str | None = None
    mcp_server: str | None = None
    mcp_tool: str | None = None
    mcp_bytes: int | None = None
    audio_seconds: float | None = None
    characters: int | None = None
    images: int | None = None
    image_size: str | None = None
    image_quality: str | None = None
    search_units: int | None = None


class RecordIds:
    """Fresh ledger ids: a random prefix per source, then a counter (32 hex digits, unique).

    Calling it returns the next id; so does :attr:`next`, a generator's ``__next__`` (one C
    call and one string concatenation per id, where formatting a counter costs four times
    that), for the request path."""

    __slots__ = ("next",)

    def __init__(self) -> None:
        self.next: Callable[[], str] = _ids(uuid.uuid4().hex[:16]).__next__

    def __call__(self) -> str:
        """The next id."""
        return self.next()


def _ids(prefix: str) -> Iterator[str]:
    """``prefix``, then 13 hex digits per block of 4,096 ids and three per id in the block."""
    for block in itertools.count(1):
        head = prefix + hex(block | _BIT_52)[3:]  # (past the 53rd bit: no format spec)
        for tail in _TAILS:
            yield head + tail


def end_user(call: Call) -> str | None:
    """The end user ``call`` names, else the user its key belongs to (bounded in length)."""
    user: str | None
    given = call.params.user
    if isinstance(given, str) and given:
        user = given
    else:
        metadata = call.options.metadata
        user = _identity(metadata) if metadata else None
    if not user:
        user = call.principal.user
    if not user:
        return None
    return user[:_MAX_TEXT]  # the string itself when it is short enough


def _identity(metadata: dict[str, Any] | None) -> str | None:
    identity = (metadata or {}).get("identity")
    if isinstance(identity, dict):
        found = identity.get("id")
        if isinstance(found, str):
            return found
    return None


def spend_record(request: FinishedRequest, record_id: str) -> SpendRecord:
    """The ledger's record of ``request`` (on the request path: built positionally, in the
    order of :class:`SpendRecord`'s fields)."""
    call = request.call
    principal = request.principal
    usage = request.usage
    guardrails = None
    if call is None:
        model = user = ttft = None
        cost = source = saved = fallback = cache = batch = None
    else:
        accounting = call.accounting
        if accounting.guardrails:
            guardrails = _JSON.encode(accounting.guardrails).decode()
        if accounting.usage is not None:
            usage = accounting.usage
        cost, source = accounting.cost_nanos, accounting.cost_source
        saved, fallback, cache = accounting.saved_nanos, accounting.fallback, accounting.cache
        batch = accounting.batch_id
        model = call.model[:_MAX_TEXT]  # the string itself when it is short enough
        # end_user(call), without its call when nothing names a user (the common case)
        named = call.params.user or call.options.metadata or call.principal.user
        user = end_user(call) if named else None
        first = call.timings.first_token
        ttft = None if first is None else _ms(first)
    upstream_model = request.upstream_model
    if upstream_model is not None:
        upstream_model = upstream_model[:_MAX_TEXT]
    if usage is None:
        usage = _NO_USAGE
    record = SpendRecord(
        record_id,
        request.request_id,
        request.ended_at,
        principal.key_id,
        principal.key_alias,
        principal.team,
        user,
        request.dialect,
        model,
        request.provider,
        upstream_model,
        usage.input,
        usage.cache_read,
        usage.cache_write,
        usage.output,
        usage.reasoning,
        cost,
        source,
        saved,
        request.status,
        request.error_code,
        (request.duration * 1_000_000 + 0.5) // 1 / 1000,  # _ms(duration), without a call
        ttft,
        request.attempts,
        fallback,
        cache,
        batch,
        guardrails,
    )
    if usage.media is not None:
        with_media_units(record, usage.media)
    return record


def with_media_units(record: SpendRecord, units: MediaUnits) -> None:
    """Set ``record``'s media unit fields from ``units`` (a unit billed none of stays None)."""
    record.audio_seconds = units.audio_seconds or None
    record.characters = units.characters or None
    record.images = units.images or None
    if units.images:
        record.image_size = units.image_size[:_MAX_IMAGE_TEXT] or None
        record.image_quality = units.image_quality[:_MAX_IMAGE_TEXT] or None
    record.search_units = units.search_units or None


def billed_media(record: SpendRecord) -> dict[str, float | int | str] | None:
    """The media units ``record`` was billed, by name (only those it billed), or None for a
    request that billed none (a chat, an embeddings call, a moderation)."""
    units = {
        "audio_seconds": record.audio_seconds,
        "characters": record.characters,
        "images": record.images,
        "image_size": record.image_size,
        "image_quality": record.image_quality,
        "search_units": record.search_units,
    }
    return {name: value for name, value in units.items() if value is not None} or None


def _ms(seconds: float) -> float:
    """``seconds`` (not negative) in milliseconds, to the microsecond (``round(·, 3)`` costs four
    times as much)."""
    return (seconds * 1_000_000 + 0.5) // 1 / 1000  # (floor division: no int() call)
