"""The stored form of one complete answer, and the checks that keep a bad one from being served.

An entry is a whole canonical :class:`~proxy.core.reply.Response` — a stream that completed is
folded into one first (:mod:`proxy.cache.assemble`) — with what the cache needs besides: when it
was made and when it expires (wall-clock seconds, so that instances sharing a store agree on an
entry's age), the deployment that produced it, and what it cost (for the savings a hit reports).
Any dialect, streamed or not, can be answered from it. An entry may also keep the answer's replay
pre-encoded as OpenAI chat frames (:func:`~proxy.cache.replay.replay_frames`, added by
:func:`with_frames`), so that a streamed hit of an OpenAI client writes them as they are instead
of building and encoding chunks. Likewise an entry may say that its answer's ``raw`` body is
the verbatim OpenAI chat body of its canonical fields (``verbatim``, set by
:func:`with_verbatim`), so that a whole hit of an OpenAI client sends it without checking the
answer's fingerprint or encoding it.

Entries are msgpack behind a short magic prefix that names the format; :func:`decode_entry`
raises :class:`CorruptEntry` for anything else (a truncated value, another format, a foreign
value under the key), and the caller deletes it.
"""

from __future__ import annotations

import msgspec

from proxy.cache.key import FORMAT
from proxy.cache.replay import replay_frames, usage_json
from proxy.core.reply import Response

MAGIC = b"CWC" + bytes([FORMAT])


class Entry(msgspec.Struct, array_like=True):
    """One cached answer; ``created``/``expires`` are wall-clock seconds (``time.time``);
    ``cost_nanos`` is what the answer cost when it was made (nano-dollars; None if unknown);
    ``frames`` the replay's frames, when kept (None otherwise: a stream is then replayed from
    ``response``), with ``usage_json`` its usage chunk's OpenAI JSON
    (:func:`~proxy.cache.replay.usage_json`); ``verbatim`` whether ``response.raw`` is known
    to say exactly what the canonical fields say (:meth:`~proxy.core.reply.Response.unchanged`
    held when it was set)."""

    created: float
    expires: float
    provider: str
    model: str
    response: Response
    cost_nanos: int | None = None
    frames: bytes | None = None
    verbatim: bool = False
    usage_json: bytes | None = None

    def age(self, now: float) -> float:
        """Seconds since the answer was made (never negative: clocks of instances may differ)."""
        return max(now - self.created, 0.0)


class CorruptEntry(Exception):
    """A stored value that is not a readable entry."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Entry)


def encode_entry(entry: Entry) -> bytes:
    """The bytes to store for ``entry``."""
    return MAGIC + _ENCODER.encode(entry)


def with_frames(entry: Entry, limit: int) -> bytes | None:
    """Give ``entry`` its replay's frames (:func:`~proxy.cache.replay.replay_frames`, and the
    usage chunk's :func:`~proxy.cache.replay.usage_json`) and return its encoding with them,
    when they can be made and the whole fits in ``limit`` bytes; else None, and ``entry`` is
    left as it was."""
    frames = replay_frames(entry.response)
    if frames is None:
        return None
    usage = usage_json(entry.response)
    data = encode_entry(msgspec.structs.replace(entry, frames=frames, usage_json=usage))
    if len(data) > limit:
        return None
    entry.frames = frames
    entry.usage_json = usage
    return data


def with_verbatim(entry: Entry) -> bytes | None:
    """Mark ``entry`` verbatim and return its encoding so, when its answer kept a ``raw`` body
    that says what its canonical fields say; else None, and ``entry`` is left as it was."""
    if not entry.response.unchanged():
        return None
    entry.verbatim = True
    return encode_entry(entry)


def decode_entry(data: bytes) -> Entry:
    """The entry stored as ``data``. Raises :class:`CorruptEntry` if it is not one."""
    if not data.startswith(MAGIC):
        raise CorruptEntry("not a cache entry of this format")
    try:
        return _DECODER.decode(memoryview(data)[len(MAGIC) :])
    except msgspec.DecodeError as exc:
        raise CorruptEntry(str(exc)) from None
