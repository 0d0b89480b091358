"""What the gateway reads of an audio file without decoding it: a WAV file's duration.

A transcription is billed per second of audio, which only the upstream knows for compressed
formats; for WAV (RIFF ``WAVE`` with a ``fmt `` and a ``data`` chunk) the header says it
exactly, so that a budget can reserve the call's cost before it is sent.
"""

from __future__ import annotations

import struct

_MAX_CHUNKS = 64


def wav_seconds(data: bytes) -> float | None:
    """The duration of the WAV file ``data`` in seconds (its ``data`` chunk's size over the
    ``fmt `` chunk's byte rate); None when ``data`` is not a WAV file, or its header is
    truncated or inconsistent. Reads only the chunk headers."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    offset = 12
    byte_rate: int = 0
    for _ in range(_MAX_CHUNKS):
        if offset + 8 > len(data):
            return None
        name = data[offset : offset + 4]
        size: int = struct.unpack_from("<I", data, offset + 4)[0]
        if name == b"fmt " and size >= 16 and offset + 16 <= len(data):
            byte_rate = struct.unpack_from("<I", data, offset + 16)[0]
        elif name == b"data":
            if byte_rate <= 0:
                return None
            size = min(size, len(data) - offset - 8)  # a streamed WAV may announce 0xFFFFFFFF
            return size / byte_rate
        offset += 8 + size + (size & 1)
    return None
