"""The log writers: the access line's format and redaction, and when held lines are written."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import warnings
from datetime import UTC, datetime
from typing import Any

from proxy.core.logs import AccessLog, LineWriter, make_logger, route_stdlib_logging
from proxy.core.redact import Redactor

_SECRET = "provider-secret-value-1234"


class _Stream(io.StringIO):
    """A text stream that counts its writes and announces each one."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.written = asyncio.Event()

    def write(self, text: str) -> int:
        self.writes += 1
        self.written.set()
        return super().write(text)


def _lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_access_lines_of_one_loop_turn_leave_in_one_write():
    stream = _Stream()
    access = AccessLog(Redactor([_SECRET]), LineWriter(stream))
    for index in range(3):
        access.write({"request_id": f"r{index}", "status": 200})
    assert stream.writes == 0, "held until the loop's turn ends"
    await asyncio.wait_for(stream.written.wait(), timeout=5)
    assert stream.writes == 1
    assert [line["request_id"] for line in _lines(stream)] == ["r0", "r1", "r2"]


async def test_access_line_has_the_loggers_fields_and_is_redacted():
    stream = io.StringIO()
    writer = LineWriter(stream)
    access = AccessLog(Redactor([_SECRET]), writer)
    access.write({"request_id": "r", "error": f"upstream said {_SECRET}", "duration_ms": 1.5})
    writer.drain()
    (line,) = _lines(stream)
    assert line["event"] == "request"
    assert line["level"] == "info"
    stamped = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))
    assert abs((datetime.now(UTC) - stamped).total_seconds()) < 60  # UTC, as structlog's
    assert line["duration_ms"] == 1.5
    assert _SECRET not in stream.getvalue()
    assert "[REDACTED]" in line["error"]


async def test_a_logger_line_is_written_at_once_after_the_held_access_lines():
    stream = _Stream()
    writer = LineWriter(stream)
    redactor = Redactor()
    AccessLog(redactor, writer).write({"request_id": "first"})
    make_logger(redactor, stream=writer).warning("something_happened")
    assert [line["event"] for line in _lines(stream)] == ["request", "something_happened"]
    assert stream.writes == 1


async def test_drain_writes_what_is_held_on_a_clean_stop():
    stream = io.StringIO()
    writer = LineWriter(stream)
    AccessLog(Redactor(), writer).write({"request_id": "last"})
    assert stream.getvalue() == ""
    writer.drain()
    assert [line["request_id"] for line in _lines(stream)] == ["last"]
    writer.drain()  # nothing left: nothing written twice
    assert len(_lines(stream)) == 1


def test_without_a_running_loop_a_line_is_written_at_once():
    stream = io.StringIO()
    AccessLog(Redactor(), LineWriter(stream)).write({"request_id": "cli"})
    assert [line["request_id"] for line in _lines(stream)] == ["cli"]


def test_above_info_no_access_line_is_written():
    stream = io.StringIO()
    access = AccessLog(Redactor(), LineWriter(stream), level="warning")
    access.write({"request_id": "quiet"})
    assert not access.enabled
    assert stream.getvalue() == ""


def _raise_with(text: str) -> BaseException:
    try:
        raise ValueError(text)
    except ValueError as exc:
        return exc


def test_stdlib_records_become_redacted_json_lines_with_their_logger_and_traceback():
    stream = io.StringIO()
    undo = route_stdlib_logging(lambda: make_logger(Redactor([_SECRET]), stream=stream))
    try:
        error = _raise_with(f"payload quoted {_SECRET}")
        logging.getLogger("aiohttp.server").error("Unhandled exception", exc_info=error)
        logging.getLogger("asyncio").warning("task said %s", _SECRET)
        logging.getLogger("aiohttp.access").info("chatter below warning is not bridged")
    finally:
        undo()
    server, loop = _lines(stream)
    assert (server["logger"], server["event"], server["level"]) == (
        "aiohttp.server",
        "Unhandled exception",
        "error",
    )
    assert "ValueError: payload quoted [REDACTED]" in server["exception"]
    assert (loop["logger"], loop["event"]) == ("asyncio", "task said [REDACTED]")
    assert _SECRET not in stream.getvalue()


def test_warnings_are_bridged_while_routed_and_undo_removes_the_bridge():
    stream = io.StringIO()
    undo = route_stdlib_logging(lambda: make_logger(Redactor([_SECRET]), stream=stream))
    try:
        warnings.warn(f"careless {_SECRET}", UserWarning, stacklevel=1)
    finally:
        undo()
    (line,) = _lines(stream)
    assert line["logger"] == "py.warnings"
    assert "careless [REDACTED]" in line["event"]
    logging.getLogger("aiohttp.server").error("after undo")
    assert len(_lines(stream)) == 1


def test_a_record_that_cannot_be_written_is_dropped_not_printed(capsys):
    def broken() -> Any:
        raise RuntimeError("the output is closed")

    undo = route_stdlib_logging(broken)
    try:
        logging.getLogger("aiohttp.server").error("lost, %s", "quietly")
    finally:
        undo()
    assert capsys.readouterr().err == ""
