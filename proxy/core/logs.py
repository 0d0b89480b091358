"""Structured JSON logs: one logger per process, built explicitly (no global configuration).

Every line is a JSON object with ``timestamp``, ``level`` and ``event``; request-scoped lines
carry ``request_id``. Redaction is the first processor, so nothing that reaches the renderer can
hold a configured key or a credential-shaped string.

Two writers share an output: the structlog logger (:func:`make_logger`) for everything, and
:class:`AccessLog` for the one line per request, which has a fixed set of plain fields and so
skips structlog's pipeline while redacting the same way. Both write through a
:class:`LineWriter`: the logger's lines are written at once, the access lines of one event-loop
turn are gathered into one write at the end of that turn. A clean stop writes what is held
(:meth:`LineWriter.drain`, from :meth:`proxy.runtime.snapshot.Runtime.close`); a crash that kills
the process loses at most the access lines of the turn it died in.

What the libraries log through :mod:`logging` — aiohttp (``aiohttp.server``, ``aiohttp.web``,
``aiohttp.access``, ``aiohttp.client``), asyncio, Python's warnings — goes through the same
logger and so the same redaction (:func:`route_stdlib_logging`, which the app installs while it
runs); nothing is printed raw to stderr by logging's last-resort handler.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any, Protocol

import msgspec
import structlog

from proxy.core.redact import Redactor

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

_PLAIN = (str, int, float, bool, type(None), dict, list, tuple)
_BRIDGED_LEVEL = logging.WARNING
"""The least severe :mod:`logging` record the gateway's logger is given (libraries' info and
debug records are chatter, and would cost a formatted line each)."""


class TextSink(Protocol):
    """Where log lines go: a text stream, or a :class:`LineWriter` over one."""

    def write(self, text: str, /) -> Any: ...

    def flush(self) -> Any: ...


class LineWriter:
    """Log lines for ``stream``, in the order they were made.

    :meth:`write` then :meth:`flush` (what structlog's ``WriteLogger`` calls) write at once,
    after whatever :meth:`hold` kept. :meth:`hold` keeps a line until the running event loop's
    current turn ends, so that requests finishing in the same turn (common when hundreds are
    in flight) share one system call; without a running loop it writes at once.
    :meth:`drain` writes what is held now. Not thread-safe: use it from one event loop.
    """

    __slots__ = ("__weakref__", "_held", "_scheduled", "_stream")  # structlog keys a lock on it

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._held: list[str] = []
        self._scheduled = False

    def write(self, text: str) -> None:
        """Add ``text`` to what :meth:`flush` writes."""
        self._held.append(text)

    def flush(self) -> None:
        """Write everything held, now."""
        self.drain()

    def hold(self, text: str) -> None:
        """Write ``text`` at the end of this loop turn (now, without a running loop)."""
        self._held.append(text)
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.drain()
            return
        self._scheduled = True
        loop.call_soon(self.drain)

    def drain(self) -> None:
        """Write and flush everything held (nothing happens when nothing is)."""
        self._scheduled = False
        held = self._held
        if held:
            text = held[0] if len(held) == 1 else "".join(held)
            held.clear()
            self._stream.write(text)
            self._stream.flush()


def make_logger(
    redactor: Redactor, *, level: str = "info", stream: TextSink | None = None
) -> structlog.typing.FilteringBoundLogger:
    """A JSON logger writing to ``stream`` (stdout by default), redacting with ``redactor``.

    The redactor is consulted at each call, so a logger can follow config reloads by being
    rebuilt; log calls below ``level`` cost one method call.
    """

    def unknown(value: Any) -> str:
        # An object nested in a container reaches the encoder unredacted: redact its text here.
        return redactor.text(repr(value))

    encoder = msgspec.json.Encoder(enc_hook=unknown)

    def redact(logger: object, method: str, event: Any) -> Any:
        # Tracebacks and arbitrary objects become text first, so that they are redacted like
        # every other value.
        if "exc_info" in event:
            event = structlog.processors.format_exc_info(logger, method, event)
        for key, value in event.items():
            if not isinstance(value, _PLAIN):
                event[key] = repr(value)
        return redactor(logger, method, event)

    def render(logger: object, method: str, event: structlog.typing.EventDict) -> str:
        return encoder.encode(event).decode()

    lazy = structlog.wrap_logger(
        structlog.WriteLogger(stream or sys.stdout),  # type: ignore[arg-type]  # write + flush
        processors=[
            redact,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
    )
    logger: structlog.typing.FilteringBoundLogger = lazy.bind()  # built now, not per call
    return logger


class AccessLog:
    """The access line of each request: ``event: "request"`` at level info, with the fields
    the app gives (plain JSON values), redacted as every log line is, held by ``sink`` until
    the end of the event loop's turn (:meth:`LineWriter.hold`).

    Nothing is written when ``level`` is above info, as the logger would filter the line.
    """

    __slots__ = ("_enabled", "_encoder", "_redactor", "_second", "_sink", "_stamp")

    def __init__(self, redactor: Redactor, sink: LineWriter, *, level: str = "info") -> None:
        self._redactor = redactor
        self._sink = sink
        self._enabled = _LEVELS[level] <= logging.INFO
        self._encoder = msgspec.json.Encoder(enc_hook=lambda value: redactor.text(repr(value)))
        self._second = -1
        self._stamp = ""

    @property
    def enabled(self) -> bool:
        """Whether lines are written at all (the level allows info)."""
        return self._enabled

    def write(self, fields: dict[str, Any]) -> None:
        """Write one access line made of ``fields`` (their text values redacted)."""
        if not self._enabled:
            return
        text = self._redactor.text
        for key, value in fields.items():
            if type(value) is str:
                fields[key] = text(value)
        fields["event"] = "request"
        fields["level"] = "info"
        fields["timestamp"] = self._timestamp()
        self._sink.hold(self._encoder.encode(fields).decode() + "\n")

    def _timestamp(self) -> str:
        """Now, as structlog's ISO UTC stamp (``2026-01-02T03:04:05.678901Z``)."""
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int((now - second) * 1_000_000):06d}Z"


class StdlibBridge(logging.Handler):
    """A :mod:`logging` handler writing every record of level warning or above through the
    gateway's structlog logger (``current()``, read at each record so that it follows reloads):
    one JSON line with ``event`` (the record's message), ``logger`` (its name) and, when the
    record carries one, the traceback, formatted and then redacted like every other value.

    A record that cannot be written (its message does not format, the output is closed) is
    dropped: logging's fallback would print it, unredacted, to stderr.
    """

    def __init__(self, current: Callable[[], structlog.typing.FilteringBoundLogger]) -> None:
        super().__init__(_BRIDGED_LEVEL)
        self._current = current

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record`` through the current logger (see the class docstring)."""
        try:
            fields: dict[str, Any] = {"logger": record.name}
            if record.exc_info:
                fields["exc_info"] = record.exc_info
            level = min(record.levelno // 10 * 10, logging.CRITICAL)  # a custom level: its band
            self._current().log(level, record.getMessage(), **fields)
        except Exception:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        """Drop ``record`` (see the class docstring)."""


def route_stdlib_logging(
    current: Callable[[], structlog.typing.FilteringBoundLogger],
) -> Callable[[], None]:
    """Send what every :mod:`logging` logger records (they all propagate to the root logger)
    and Python's warnings (:func:`logging.captureWarnings`) through ``current()``, the
    gateway's logger, as a :class:`StdlibBridge` on the root logger. Returns the function that
    undoes it (removes the bridge, stops capturing warnings)."""
    bridge = StdlibBridge(current)
    root = logging.getLogger()
    root.addHandler(bridge)
    logging.captureWarnings(True)

    def undo() -> None:
        root.removeHandler(bridge)
        logging.captureWarnings(False)

    return undo
