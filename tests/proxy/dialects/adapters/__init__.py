"""Per-dialect adapters for the dialect conformance suite (``test_conformance.py`` beside).

The suite is parametrised over :func:`proxy.dialects.all_dialects`; for each dialect it needs an
adapter that knows how a client of that dialect builds a request and reads an answer. **Every
registered dialect must have one, or the suite fails.** An adapter is one module in this package
(named after the dialect's module) that defines ``ADAPTER``, an object with:

``dialect: str``
    The dialect's registry name (``Dialect.name``).
``supports_tools: bool``
    Whether the wire format carries tool calls (legacy completions do not); tool-call cases and
    tool-call comparisons run only when it does.
``request(model, text, *, stream, tools=None) -> (path, body)``
    A minimal valid request (``body`` is a JSON-able dict): one user turn ``text`` for ``model``
    (``provider/model``), streaming set *explicitly* either way (whatever the dialect's default),
    usage asked for when streaming if the dialect makes that optional, and ``tools`` — OpenAI
    function tools ``[{"type": "function", "function": {name, description, parameters}}]`` —
    converted to the dialect's own tool format when given.
``read_response(body: dict) -> Outcome``
    Validate a whole JSON response against the dialect's schema (raise on any mismatch) and
    return what it says.
``read_stream(raw: bytes) -> Outcome``
    Validate a whole SSE body: every event against the dialect's schema, and the framing (the
    end marker after a normal end; none after an in-band error, which must be the last event).
    Return the text joined, the tool calls assembled, the usage, and the in-band error's message.
``read_error(status: int, body: dict) -> str``
    Validate an error body against the dialect's error schema (and any status it repeats) and
    return its human-readable message.
``error_cases() -> list[ErrorCase]``
    The dialect's own bad requests (missing required fields, wrong types, out-of-range
    controls …), each with the status expected and the field its message must name.

Token counts in an :class:`Outcome` are totals whatever the dialect's buckets: ``input_tokens``
includes cached and cache-write tokens, ``output_tokens`` includes reasoning tokens.
:mod:`tests.proxy.dialects.adapters.gateway` starts a gateway on 127.0.0.1 for HTTP tests.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.sse import SSEDecoder, SSEEvent


@dataclass(frozen=True)
class ToolCallOut:
    """A tool call as a client sees it: the function name and its parsed JSON arguments."""

    name: str
    arguments: Any


@dataclass(frozen=True)
class Outcome:
    """What a response or a stream said; ``None`` counts mean the dialect reported no usage."""

    text: str
    tool_calls: tuple[ToolCallOut, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class ErrorCase:
    """A bad request: its ``body`` (a dict, or raw bytes), the ``status`` expected, the
    ``field`` its message must name (case-insensitive), and, where the dialect prescribes the
    exact wording, ``message``."""

    id: str
    body: dict[str, Any] | bytes
    field: str
    status: int = 400
    message: str | None = None


class DialectAdapter(Protocol):
    """See the module docstring."""

    dialect: str
    supports_tools: bool

    def request(
        self, model: str, text: str, *, stream: bool, tools: list[dict[str, Any]] | None = None
    ) -> tuple[str, dict[str, Any]]: ...

    def read_response(self, body: dict[str, Any]) -> Outcome: ...

    def read_stream(self, raw: bytes) -> Outcome: ...

    def read_error(self, status: int, body: dict[str, Any]) -> str: ...

    def error_cases(self) -> list[ErrorCase]: ...


def load_adapters() -> dict[str, DialectAdapter]:
    """Every adapter in this package, by dialect name (modules without ``ADAPTER`` skipped)."""
    found: dict[str, DialectAdapter] = {}
    for info in pkgutil.iter_modules(__path__):
        adapter = getattr(importlib.import_module(f"{__name__}.{info.name}"), "ADAPTER", None)
        if adapter is not None:
            assert adapter.dialect not in found, f"two adapters for {adapter.dialect!r}"
            found[adapter.dialect] = adapter
    return found


def sse_events(raw: bytes) -> list[SSEEvent]:
    """The events of a whole SSE body."""
    decoder = SSEDecoder()
    return decoder.feed(raw) + decoder.close()


def data_payloads(raw: bytes) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The JSON payloads of a ``data:``-only stream that ends with ``data: [DONE]``, and the
    in-band error payload (one with an ``error`` member) if the stream ended with one instead.

    Asserts the framing: unnamed events only; ``[DONE]`` exactly once and last after a normal
    end; an error frame last, with no ``[DONE]``.
    """
    events = sse_events(raw)
    assert events, "empty stream"
    assert all(event.event == "" for event in events), "unexpected named events"
    payloads: list[dict[str, Any]] = []
    for position, event in enumerate(events):
        last = position == len(events) - 1
        if event.data == b"[DONE]":
            assert last, "[DONE] before the end of the stream"
            return payloads, None
        payload = json.loads(event.data)
        if "error" in payload:
            assert last, "events after an in-band error"
            return payloads, payload
        payloads.append(payload)
    raise AssertionError("stream ended without [DONE] or an error frame")


class OpenAIDeltaAssembler:
    """Rebuilds text and tool calls from OpenAI-style ``delta`` objects (``content``,
    ``tool_calls[{index, id, function {name, arguments}}]``)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, delta: dict[str, Any]) -> None:
        """Take one delta."""
        if delta.get("content"):
            self.text.append(delta["content"])
        for fragment in delta.get("tool_calls") or ():
            call = self._calls.setdefault(fragment["index"], {"name": "", "arguments": ""})
            function = fragment.get("function") or {}
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""

    def tool_calls(self) -> tuple[ToolCallOut, ...]:
        """The assembled calls, in index order, with their arguments parsed."""
        return tuple(
            ToolCallOut(call["name"], json.loads(call["arguments"] or "{}"))
            for _, call in sorted(self._calls.items())
        )


def openai_tool_calls(calls: list[dict[str, Any]] | None) -> tuple[ToolCallOut, ...]:
    """Whole OpenAI-style tool calls (``[{id, type, function {name, arguments}}]``)."""
    return tuple(
        ToolCallOut(c["function"]["name"], json.loads(c["function"].get("arguments") or "{}"))
        for c in calls or ()
    )


def openai_usage(usage: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """``(input, output)`` totals of an OpenAI-style usage object (None when absent)."""
    if usage is None:
        return None, None
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    return usage["prompt_tokens"], usage["completion_tokens"]
