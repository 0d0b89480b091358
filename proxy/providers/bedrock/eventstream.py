"""The AWS event-stream binary framing (``application/vnd.amazon.eventstream``), decoded.

Each message is: a 12-byte prelude (total length, headers length, both big-endian uint32, and
the CRC32 of those 8 bytes), the headers, the payload, and the CRC32 of everything before it.
A header is a 1-byte name length, the name (UTF-8), a 1-byte type and a typed value. The
decoder is fed bytes in whatever pieces the network delivers and yields the same messages for
any split of the same bytes. It is generic: what the headers mean (``:message-type``,
``:event-type``, ``:exception-type``) is the caller's business.

Corrupt input (a CRC mismatch, impossible lengths, an unknown header type) raises
:class:`EventStreamError`; the decoder is then unusable, as the stream is.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from typing import NamedTuple

PRELUDE_LENGTH = 12
MIN_MESSAGE_LENGTH = PRELUDE_LENGTH + 4
MAX_MESSAGE_LENGTH = 16 * 1024 * 1024
MAX_HEADERS_LENGTH = 128 * 1024

HeaderValue = bool | int | bytes | str | uuid.UUID

_PRELUDE = struct.Struct(">III")
_UINT32 = struct.Struct(">I")
_UINT16 = struct.Struct(">H")
_INTEGERS: dict[int, struct.Struct] = {
    2: struct.Struct(">b"),
    3: struct.Struct(">h"),
    4: struct.Struct(">i"),
    5: struct.Struct(">q"),
    8: struct.Struct(">q"),  # timestamp: milliseconds since the epoch, kept as an int
}


class EventStreamError(ValueError):
    """The bytes are not a valid event stream."""


class EventStreamMessage(NamedTuple):
    """One decoded message: its headers (by name) and its raw payload."""

    headers: dict[str, HeaderValue]
    payload: bytes


class EventStreamDecoder:
    """Incremental decoder; keeps the bytes of an unfinished message between feeds."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending(self) -> int:
        """Bytes received that do not yet complete a message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[EventStreamMessage]:
        """Consume ``data`` and return the messages it completes (possibly none)."""
        buffer = self._buffer
        buffer += data
        messages: list[EventStreamMessage] = []
        offset = 0
        while len(buffer) - offset >= PRELUDE_LENGTH:
            total, headers_length, prelude_crc = _PRELUDE.unpack_from(buffer, offset)
            if zlib.crc32(buffer[offset : offset + 8]) != prelude_crc:
                raise EventStreamError("event-stream prelude checksum mismatch")
            if not MIN_MESSAGE_LENGTH <= total <= MAX_MESSAGE_LENGTH:
                raise EventStreamError(f"event-stream message length {total} is out of range")
            if headers_length > min(MAX_HEADERS_LENGTH, total - MIN_MESSAGE_LENGTH):
                raise EventStreamError(f"event-stream headers length {headers_length} is invalid")
            if len(buffer) - offset < total:
                break
            end = offset + total
            (message_crc,) = _UINT32.unpack_from(buffer, end - 4)
            if zlib.crc32(buffer[offset : end - 4]) != message_crc:
                raise EventStreamError("event-stream message checksum mismatch")
            headers_start = offset + PRELUDE_LENGTH
            payload_start = headers_start + headers_length
            headers = _decode_headers(bytes(buffer[headers_start:payload_start]))
            messages.append(EventStreamMessage(headers, bytes(buffer[payload_start : end - 4])))
            offset = end
        if offset:
            del buffer[:offset]
        return messages


def _decode_headers(data: bytes) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    view = memoryview(data)
    position = 0
    try:
        while position < len(data):
            name_length = data[position]
            position += 1
            name = bytes(view[position : position + name_length]).decode("utf-8")
            position += name_length
            kind = data[position]
            position += 1
            value: HeaderValue
            if kind in (0, 1):
                value = kind == 0
            elif kind in _INTEGERS:
                packer = _INTEGERS[kind]
                (value,) = packer.unpack_from(data, position)
                position += packer.size
            elif kind in (6, 7):
                (length,) = _UINT16.unpack_from(data, position)
                position += 2
                raw = bytes(view[position : position + length])
                if len(raw) != length:
                    raise EventStreamError("event-stream header value is truncated")
                position += length
                value = raw.decode("utf-8") if kind == 7 else raw
            elif kind == 9:
                raw = bytes(view[position : position + 16])
                if len(raw) != 16:
                    raise EventStreamError("event-stream header value is truncated")
                position += 16
                value = uuid.UUID(bytes=raw)
            else:
                raise EventStreamError(f"event-stream header type {kind} is unknown")
            headers[name] = value
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise EventStreamError(f"event-stream headers are malformed ({exc})") from None
    if position != len(data):
        raise EventStreamError("event-stream headers overrun their length")
    return headers
