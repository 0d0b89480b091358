"""Server-sent events: an incremental decoder and the frame encoder.

The decoder follows the WHATWG event-stream rules that matter for LLM APIs: lines end with LF,
CRLF or CR; ``data:`` lines of one event are joined with LF; ``event:`` names the event; lines
starting with ``:`` are comments; a blank line dispatches the event. It is fed bytes in whatever
pieces the network delivers, and yields the same events for any split of the same bytes.
"""

from __future__ import annotations

from typing import NamedTuple


class SSEEvent(NamedTuple):
    """One dispatched event: its name (``""`` when unnamed) and its data (LF-joined lines)."""

    event: str
    data: bytes


class SSEDecoder:
    """Turns a byte stream into :class:`SSEEvent` values. Keeps partial lines between feeds."""

    __slots__ = ("_data", "_data_bytes", "_event", "_pending")

    def __init__(self) -> None:
        self._pending = b""
        self._event = ""
        self._data: list[bytes] = []
        self._data_bytes = 0

    @property
    def pending(self) -> int:
        """Bytes held for the event not yet dispatched: its data lines and a partial line."""
        return self._data_bytes + len(self._pending)

    @property
    def idle(self) -> bool:
        """Nothing is held from earlier feeds: the next byte starts a new event."""
        return not (self._pending or self._data or self._event)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume ``chunk`` and return the events it completes (possibly none)."""
        if chunk.endswith(b"\n\n") and self.idle:
            simple = _simple_frames(chunk)
            if simple is not None:
                return simple
        buffer = self._pending + chunk if self._pending else chunk
        if b"\r" in buffer:
            # A CR at the very end may be the first half of a CRLF split across two feeds.
            held = b"\r" if buffer.endswith(b"\r") else b""
            if held:
                buffer = buffer[:-1]
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            held = b""
        lines = buffer.split(b"\n")
        self._pending = lines.pop() + held
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(SSEEvent(self._event, b"\n".join(self._data)))
                self._event = ""
                self._data = []
                self._data_bytes = 0
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
                self._data_bytes += len(value)
            elif line.startswith(b"event:"):
                self._event = line[6:].strip().decode("utf-8", "replace")
            # Comments (":…"), "id:", "retry:" and unknown fields carry nothing we use.
        return events

    def close(self) -> list[SSEEvent]:
        """Flush at end of input: an event not followed by a blank line is still dispatched."""
        events = self.feed(b"\n\n") if (self._pending or self._data) else []
        self._pending = b""
        return events


_event = tuple.__new__  # builds an SSEEvent without NamedTuple's Python-level __new__


def _simple_frames(chunk: bytes) -> list[SSEEvent] | None:
    """The fast path for whole ``data: …\n\n`` frames (what LLM APIs send): their events, or
    None if any frame is not that simple (the general parser then handles the chunk)."""
    if b"\r" in chunk:
        return None
    events: list[SSEEvent] = []
    for frame in chunk[:-2].split(b"\n\n"):
        if not frame.startswith(b"data: ") or b"\n" in frame:
            return None
        events.append(_event(SSEEvent, ("", frame[6:])))
    return events


def encode_data_frame(data: bytes) -> bytes:
    """An unnamed SSE frame carrying ``data`` (which must not contain newlines)."""
    return b"data: " + data + b"\n\n"


def encode_named_frame(event: str, data: bytes) -> bytes:
    """A named SSE frame (``event: NAME``) carrying ``data`` (which must not contain newlines)."""
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"
