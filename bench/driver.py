"""Closed-loop HTTP load generator for ``POST /v1/chat/completions``.

``concurrency`` workers each send requests back to back over a shared keep-alive session
until the duration elapses or the request budget is spent, whichever comes first;
requests in flight at the deadline are completed and counted.

A request succeeds when the status is 200, the body was read to the end and, for
streams, the body ends with ``data: [DONE]``. Everything else is counted as an error,
keyed by its kind (``HTTP 502``, an exception class name, ``missing data: [DONE]``).
"""

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp

MODEL = "upstream/bench-model"
_HEADERS = {"Content-Type": "application/json"}
_DONE = b"data: [DONE]"
_TAIL_BYTES = 64
_PROMPT = (
    "Summarise in one sentence what an LLM gateway does, for a reader who has never "
    "heard the term. Keep it short and avoid jargon."
)


_EARLIER_TURN = (
    "Earlier we talked about how requests reach a model through a gateway: the client sends "
    "its messages, the gateway checks who is calling and forwards them, and the answer comes "
    "back the same way. "
)


def _earlier_turns(conversation_bytes: int) -> list[dict[str, str]]:
    """Alternating user and assistant turns of ordinary text (no secrets, no personal data)
    that bring the request's messages to about ``conversation_bytes`` bytes (none for 0)."""
    turns: list[dict[str, str]] = []
    size = len(_PROMPT)
    while size < conversation_bytes:
        role = "assistant" if len(turns) % 2 else "user"
        turns.append({"role": role, "content": _EARLIER_TURN})
        size += len(_EARLIER_TURN)
    return turns


def request_body(stream: bool, conversation_bytes: int = 0) -> bytes:
    """Return the JSON request sent to every target; streams ask for a usage chunk. With
    ``conversation_bytes``, earlier turns precede the prompt until the conversation's text is
    about that long."""
    payload: dict[str, object] = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "You are a concise technical assistant."},
            *_earlier_turns(conversation_bytes),
            {"role": "user", "content": _PROMPT},
        ],
        "max_tokens": 64,
        "temperature": 0,
    }
    if stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    return json.dumps(payload, separators=(",", ":")).encode()


@dataclass(frozen=True)
class LoadSpec:
    """One load run: where to send (with which extra headers), which mode, how many workers,
    and its two bounds."""

    url: str
    stream: bool
    concurrency: int
    duration_s: float
    max_requests: int
    headers: tuple[tuple[str, str], ...] = ()
    conversation_bytes: int = 0


@dataclass
class LoadResult:
    """Outcome of one load run.

    ``latencies_s`` and ``ttfb_s`` (streams only: time to the first body byte) hold one
    entry per successful request, in seconds; ``wall_s`` spans from the first request
    sent to the last response finished.
    """

    latencies_s: list[float] = field(default_factory=list)
    ttfb_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    @property
    def succeeded(self) -> int:
        """Number of successful requests."""
        return len(self.latencies_s)


@dataclass
class RequestBudget:
    """Requests that may still be started in one run."""

    remaining: int

    def take(self) -> bool:
        """Take one request from the budget; False when none is left."""
        if self.remaining <= 0:
            return False
        self.remaining -= 1
        return True


def open_session(request_timeout_s: float) -> aiohttp.ClientSession:
    """Return a client session with an unlimited connection pool and a per-request timeout.

    Must be called (and closed) inside a running event loop.
    """
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=request_timeout_s),
    )


async def run_load(session: aiohttp.ClientSession, spec: LoadSpec) -> LoadResult:
    """Drive ``spec`` through ``session`` and return what was measured."""
    body = request_body(spec.stream, spec.conversation_bytes)
    result = LoadResult()
    budget = RequestBudget(spec.max_requests)
    started = time.perf_counter()
    deadline = started + spec.duration_s
    await asyncio.gather(
        *(_worker(session, spec, body, deadline, budget, result) for _ in range(spec.concurrency))
    )
    result.wall_s = time.perf_counter() - started
    return result


async def _worker(
    session: aiohttp.ClientSession,
    spec: LoadSpec,
    body: bytes,
    deadline: float,
    budget: RequestBudget,
    result: LoadResult,
) -> None:
    headers = {**_HEADERS, **dict(spec.headers)}
    while time.perf_counter() < deadline and budget.take():
        started = time.perf_counter()
        first_byte = 0.0
        try:
            async with session.post(spec.url, data=body, headers=headers) as response:
                if response.status != 200:
                    await response.read()
                    result.errors[f"HTTP {response.status}"] += 1
                    continue
                if spec.stream:
                    first_byte, complete = await _read_event_stream(response)
                else:
                    await response.read()
                    complete = True
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            result.errors[type(exc).__name__] += 1
            continue
        finished = time.perf_counter()
        if not complete:
            result.errors["missing data: [DONE]"] += 1
            continue
        result.latencies_s.append(finished - started)
        if spec.stream:
            result.ttfb_s.append(first_byte - started)


async def _read_event_stream(response: aiohttp.ClientResponse) -> tuple[float, bool]:
    """Read an event stream to its end.

    Returns the perf_counter time of the first body chunk and whether the stream ended
    with ``data: [DONE]``.
    """
    first_byte = 0.0
    tail = b""
    async for chunk in response.content.iter_any():
        if not first_byte:
            first_byte = time.perf_counter()
        tail = (tail + chunk)[-_TAIL_BYTES:]
    return first_byte, tail.rstrip().endswith(_DONE)
