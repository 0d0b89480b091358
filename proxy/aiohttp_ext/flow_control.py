"""Resume reading only what flow control paused: a mixin for aiohttp's connection protocols.

aiohttp's body streams call their protocol's ``resume_reading()`` whenever a read leaves their
buffer below the low mark, and at every body's end, whether or not reading was paused; each call
re-feeds the parser an empty buffer and re-arms the transport. On the server that is every
request body read (for a small body, never paused, about a third of the CPU of reading it: 126
Python opcodes per request); on the client, every buffered HTTP chunk of an upstream's answer,
so about once per streamed event.

Only ``pause_reading`` pauses the parser or sets ``_reading_paused``, so when it is not set there
is nothing to resume: :class:`ResumeWhenPaused` passes the call on only then. A transport held
for a full message queue or tail (``_buffer_paused``), and what the parser holds with it, is
released by aiohttp's own request loop once the queue drains, as before (this call never resumed
such a transport); the client's read timeout restarts after a real pause, as before.
``tests/proxy/aiohttp_ext/test_server.py`` and
``tests/proxy/aiohttp_ext/test_upstream_connection.py`` make both sides pause and resume for real.
"""

from __future__ import annotations


class ResumeWhenPaused:
    """Put first among an aiohttp protocol's bases (``BaseProtocol``'s subclasses)."""

    __slots__ = ()
    _reading_paused: bool

    def resume_reading(self, resume_parser: bool = True) -> None:
        """Resume what flow control paused; nothing when reading was not paused."""
        if self._reading_paused:
            super().resume_reading(resume_parser)  # type: ignore[misc]  # the protocol's own
