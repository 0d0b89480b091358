"""The dialect interface: how one client wire format maps to and from the canonical types.

A dialect only translates. It decodes request bytes into a :class:`~proxy.core.canonical.Call`
(gateway options it carries in the body go to ``Call.options``), encodes a whole reply, encodes a
stream chunk by chunk in its own SSE framing, and encodes errors in its own error JSON. It never
retries, caches, counts or does I/O, and it imports only the canonical types and the errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Protocol, runtime_checkable

import msgspec

from proxy.core.canonical import Call, MultipartForm
from proxy.core.errors import BadRequest, GatewayError
from proxy.core.reply import Chunk, Reply

MAX_JSON_DEPTH = 128
"""The deepest nesting of arrays and objects a request body may have (real ones stay near 10)."""

_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
# Translation tables for check_json_depth: keep only brackets and quotes; then map
# openers to +1 and closers to -1 (as signed bytes).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_MISSING = re.compile(r"missing required field `([^`]+)`")


class StreamEncoder(Protocol):
    """Encodes one reply stream; holds whatever per-stream state the framing needs.

    ``keepalive`` is the idle interval in seconds after which the app sends :meth:`ping`
    (None: the dialect has no keep-alive frames). An encoder whose frames are OpenAI chat chunks
    may also define ``relay(frames: RawFrames) -> bytes``, the bytes for a run of ordinary
    upstream chunks kept verbatim (:class:`~proxy.core.reply.RawFrames`); without it the app
    hands it decoded chunks only.
    """

    @property
    def keepalive(self) -> float | None:
        """Read-only to the app, so an encoder may declare it ``float`` or ``None`` alone."""
        ...

    def ping(self) -> bytes:
        """A keep-alive frame, sent when no chunk came for ``keepalive`` seconds."""
        ...

    def chunk(self, chunk: Chunk) -> bytes:
        """The bytes for one canonical chunk (``b""`` when it maps to nothing)."""
        ...

    def end(self) -> bytes:
        """The bytes that close a stream that completed normally."""
        ...

    def error(self, error: GatewayError) -> bytes:
        """The in-band error frame for a failure after the stream started (no end marker);
        ``b""`` when the wire format has none (streamed audio), and then the app cuts the
        answer (:mod:`proxy.http.sse_answer`)."""
        ...


class Dialect(Protocol):
    """A client wire format. ``paths`` are the routes it serves (POST)."""

    name: str

    @property
    def paths(self) -> tuple[str, ...]:
        """Read-only to the app, so a dialect may declare a tuple of a fixed length."""
        ...

    def decode(
        self, body: bytes, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """The canonical call for a request body; ``start`` is its ``perf_counter`` arrival time.

        Raises :class:`~proxy.core.errors.BadRequest` naming the offending field.
        """
        ...

    def encode_response(self, call: Call, reply: Reply) -> bytes:
        """The JSON body for a whole (non-streamed) reply."""
        ...

    def stream_encoder(self, call: Call, reply: Reply) -> StreamEncoder:
        """A fresh encoder for one streamed reply."""
        ...

    def encode_error(self, error: GatewayError, request_id: str) -> bytes:
        """The JSON body for ``error`` (its status and headers are the error's own)."""
        ...

    def response_headers(self, call: Call, reply: Reply) -> dict[str, str]:
        """Dialect-specific headers for a successful reply (e.g. Bifrost's ``x-bf-retries``)."""
        ...

    def error_status(self, error: GatewayError) -> int:
        """The HTTP status this dialect answers ``error`` with (usually ``error.status``)."""
        ...

    def error_headers(self, error: GatewayError, request_id: str) -> dict[str, str]:
        """Dialect-specific headers for an error answer (beyond Retry-After, x-request-id)."""
        ...


@runtime_checkable
class DecodesForms(Protocol):
    """A dialect whose requests are ``multipart/form-data`` (uploads): the app reads the form
    within ``media.max_upload_bytes`` and hands it here instead of to
    :meth:`Dialect.decode`."""

    def decode_form(
        self, form: MultipartForm, headers: Mapping[str, str], request_id: str, start: float
    ) -> Call:
        """The canonical call for a form. Raises :class:`~proxy.core.errors.BadRequest`
        naming the offending field."""
        ...


def bad_request(exc: msgspec.DecodeError) -> BadRequest:
    """A 400 for a msgspec decode/validation failure, naming the field it happened at.

    ``Expected `int`, got `str` - at `$.max_tokens``` becomes message
    ``Invalid request: Expected `int`, got `str` at 'max_tokens'`` with ``param="max_tokens"``.
    """
    text = str(exc)
    match = _PATH.search(text)
    if match is None:
        missing = _MISSING.search(text)
        if missing is not None:
            return BadRequest(f"Invalid request: {text}", param=missing.group(1))
        if isinstance(exc, msgspec.ValidationError):
            return BadRequest(f"Invalid request: {text}")
        return BadRequest(f"Invalid JSON body: {text}", code="invalid_json")
    param = match.group(1)
    detail = text[: match.start()]
    missing = _MISSING.search(detail)
    if missing is not None:
        param = f"{param}.{missing.group(1)}" if param else missing.group(1)
    if not param:
        return BadRequest(f"Invalid request: {detail}")
    return BadRequest(f"Invalid request: {detail} at {param!r}", param=param)


def invalid(detail: str, param: str) -> BadRequest:
    """A 400 whose message names the field ``param``, in the words of :func:`bad_request`:
    ``Invalid request: <detail> at '<param>'``."""
    return BadRequest(f"Invalid request: {detail} at {param!r}", param=param)


REASONING_EFFORT = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}
"""A client's thinking effort word (Anthropic's ``output_config.effort``, Fabro's
``reasoning_effort``) as the canonical ``reasoning_effort``: above ``high``, ``high``."""


def check_json_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise a 400 ``invalid_json`` if ``body`` nests arrays and objects deeper than ``limit``.

    Runs before a dialect decodes ``body``, so that no decoder (msgspec's is recursive, and so
    is code that later walks free-form values such as tool schemas) meets unbounded nesting:
    without it about 1,000 levels raise a RecursionError. Brackets inside JSON strings do not
    count. The work is a few C-level passes over the bytes (about 5 us per KiB for bodies with
    more than ``limit`` brackets; a count for the others); text that is not JSON is left for
    the decoder to reject.
    """
    structure = body.translate(None, _NOT_STRUCTURE)  # brackets and quotes
    if structure.count(b"[") + structure.count(b"{") <= limit:
        return
    if b"\\" in body:  # escaped backslashes, then escaped quotes, are not structure
        unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
        structure = unescaped.translate(None, _NOT_STRUCTURE)
    # Two adjacent quotes hold no bracket between them: dropping them keeps every bracket's
    # side of the string boundaries (the parity of the quotes before it). What quotes remain
    # enclose brackets, which are removed with the strings' text.
    structure = structure.replace(b'""', b"")
    if b'"' in structure:
        structure = b"".join(structure.split(b'"')[::2])
    signs = structure.translate(_SIGNS)
    if b"\x01" * (limit + 1) in signs:
        raise _too_deep(limit)
    # Dropping the innermost pairs shrinks flat structures to almost nothing; each pass that
    # drops any lowers the deepest level by exactly one (it is an innermost pair's opener).
    passes = 0
    while passes < 3:
        shorter = signs.replace(b"\x01\xff", b"")
        if len(shorter) == len(signs):
            break
        signs, passes = shorter, passes + 1
    if (
        len(signs) + passes > limit
        and max(accumulate(memoryview(signs).cast("b"))) + passes > limit
    ):
        raise _too_deep(limit)


def _too_deep(limit: int) -> BadRequest:
    return BadRequest(
        f"Invalid JSON body: arrays and objects nest deeper than {limit} levels",
        code="invalid_json",
    )
