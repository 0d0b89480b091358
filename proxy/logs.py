"""Structured JSON logs: one logger per process, built explicitly (no global configuration).

Every line is a JSON object with ``timestamp``, ``level`` and ``event``; request-scoped lines
carry ``request_id``. Redaction is the first processor, so nothing that reaches the renderer can
hold a configured key or a credential-shaped string.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

import msgspec
import structlog

from proxy.redact import Redactor

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}

_PLAIN = (str, int, float, bool, type(None), dict, list, tuple)


def make_logger(
    redactor: Redactor, *, level: str = "info", stream: IO[str] | None = None
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

    def render(logger: object, method: str, event: dict[str, Any]) -> str:
        return encoder.encode(event).decode()

    lazy = structlog.wrap_logger(
        structlog.WriteLogger(stream or sys.stdout),  # write + flush per line: no print()
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
