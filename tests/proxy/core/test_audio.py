"""proxy/core/audio.py: a WAV file's duration from its header, None for anything else."""

from __future__ import annotations

import io
import struct
import wave

import pytest

from proxy.core.audio import wav_seconds


def _wav(frames: int, rate: int, channels: int = 1, width: int = 2) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(b"\0" * frames * channels * width)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "seconds"),
    [
        (_wav(16000, 16000), 1.0),
        (_wav(12000, 8000, channels=2), 1.5),
        (_wav(0, 8000), 0.0),
    ],
    ids=["mono", "stereo", "empty"],
)
def test_a_wav_files_seconds(data: bytes, seconds: float) -> None:
    assert wav_seconds(data) == seconds


def test_a_chunk_before_the_data_is_skipped() -> None:
    plain = _wav(8000, 8000)
    extra = b"LIST" + struct.pack("<I", 3) + b"abc\0"  # odd size: padded to even
    data = plain[:36] + extra + plain[36:]
    assert wav_seconds(data) == 1.0


def test_a_data_size_past_the_end_is_what_is_there() -> None:
    data = bytearray(_wav(8000, 8000))
    data[40:44] = struct.pack("<I", 0xFFFFFFFF)  # as a streamed WAV announces
    assert wav_seconds(bytes(data)) == 1.0


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"ID3\x04 an mp3",
        b"RIFF\0\0\0\0AVI ",
        _wav(100, 8000)[:20],
        b"RIFF\0\0\0\0WAVEdata\0\0\0\0",
    ],
    ids=["empty", "mp3", "avi", "truncated", "data-before-fmt"],
)
def test_anything_else_is_none(data: bytes) -> None:
    assert wav_seconds(data) is None
