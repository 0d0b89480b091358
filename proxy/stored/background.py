"""Background responses (``background: true``): run on the gateway, apart from the request that
created them.

:meth:`BackgroundRunner.start` stores the response ``queued`` (a 503
``response_store_unavailable`` when it cannot) and runs it in a task the runner keeps, so it
survives its client going away: the task stores it ``in_progress``, runs the chain (``run``,
which the route gives: the same chain as a foreground request, its conversation state
included, which stores the finished response), reads the reply as a stream (a background call
always streams: its events are what ``GET …?stream=true`` replays; a reply a plugin answered
whole is framed as the stream that carries it) and frames every event with
the Responses stream encoder into the job's :class:`EventLog`. A failure is stored ``failed``
with its error (and framed as ``response.failed``); a cancelled job is stored ``cancelled``. When
the job ends, ``done`` gets a :class:`Ran` (usage, error, reply) once: the route's accounting
(metrics, access line, ``finished`` hooks).

The events are kept per response, in memory, in the process running it: at most
:data:`MAX_EVENTS` events and :data:`MAX_EVENT_BYTES` bytes; past either cap the oldest go. A
stream asked to start before the oldest kept event is a 400 naming ``starting_after``; a live
reader that falls that far behind gets an ``error`` event (code ``events_dropped``) and its stream
ends. A finished job's events are kept ``ttl`` seconds, and each owner's finished jobs are bounded
by ``max_kept`` (its oldest go first); running jobs are never dropped.

A shared (database) store holds a running response under a lease
(:data:`~proxy.stored.response_store.LEASE_SECONDS`) that the runner renews every third of it;
when the store says it holds a job no more (cancelled or deleted by another process), the job is
stopped without another write. At stop (:meth:`BackgroundRunner.stop`) the jobs get the drain's
deadline, then are cancelled and stored ``failed`` (the gateway stopped); a process that dies
without that leaves them to the lease (:meth:`~proxy.stored.response_store.ResponseStore.sweep`
at the next start). Use from one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from msgspec import Struct

from proxy.cache.replay import replay_chunks
from proxy.core.canonical import Call, Principal, Usage
from proxy.core.errors import BadRequest, GatewayError, InternalError
from proxy.core.reply import Reply
from proxy.core.streams import ReplyStream, batched, is_closable
from proxy.dialects.responses import ResponsesDialect, envelope_of
from proxy.dialects.responses.objects import ENCODER, ResponseError, Status, response_object
from proxy.dialects.responses.stream import ResponsesStreamEncoder
from proxy.stored.response_state import ResponseState
from proxy.stored.response_store import LEASE_SECONDS, StoredResponse, interrupted

MAX_EVENTS = 10_000
"""Events kept per background response (the oldest go past it)."""
MAX_EVENT_BYTES = 8 * 1024 * 1024
"""Bytes of events kept per background response (the oldest go past it)."""
ENDING_GRACE = 1.0
"""Seconds the jobs cancelled at stop get to store that they failed."""

_DIALECT = ResponsesDialect()


class _Head(Struct):
    status: str
    background: bool = False


_HEAD = msgspec.json.Decoder(_Head)


class Ran:
    """What a background run did, for its accounting: the chain's ``reply`` (None if the chain
    failed first), the ``usage`` reported, the ``error`` it ended with, whether it was
    ``cancelled``."""

    __slots__ = ("cancelled", "error", "reply", "usage")

    def __init__(self) -> None:
        self.reply: Reply | None = None
        self.usage: Usage | None = None
        self.error: GatewayError | None = None
        self.cancelled = False


class EventLog:
    """One background response's framed events, by ``sequence_number`` (the encoder counts
    from 0 without gaps), bounded as the module docstring says."""

    __slots__ = ("_bytes", "_changed", "_frames", "_max_bytes", "_max_events", "done", "first")

    def __init__(self, max_events: int = MAX_EVENTS, max_bytes: int = MAX_EVENT_BYTES) -> None:
        self._frames: list[bytes] = []
        self._bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._changed = asyncio.Event()
        self.first = 0
        """The sequence number of the oldest event kept."""
        self.done = False

    def add(self, data: bytes) -> None:
        """Keep the SSE frames in ``data`` (whole frames, each ending in a blank line)."""
        frames = [frame + b"\n\n" for frame in data.split(b"\n\n")[:-1]]
        self._frames += frames
        self._bytes += sum(map(len, frames))
        drop = 0
        while len(self._frames) - drop > self._max_events or (
            self._bytes > self._max_bytes and drop < len(self._frames) - 1
        ):
            self._bytes -= len(self._frames[drop])
            drop += 1
        if drop:
            del self._frames[:drop]
            self.first += drop
        self._wake()

    def close(self) -> None:
        """No more events will come."""
        self.done = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def check(self, after: int) -> None:
        """A 400 naming ``starting_after`` if the events after ``after`` are no longer all
        kept."""
        if after + 1 < self.first:
            raise BadRequest(
                f"The events of this response before sequence number {self.first} are no longer "
                "kept: stream it from a later one.",
                param="starting_after",
            )

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        """The frames after sequence number ``after``, those kept then the rest as they come,
        until the response ends (see :meth:`check`; a reader fallen behind gets an ``error``
        event and no more)."""
        self.check(after)
        at = after + 1
        while True:
            if at < self.first:
                yield _dropped(at, self.first)
                return
            frames = self._frames[at - self.first :]
            if frames:
                at += len(frames)
                yield b"".join(frames)
                continue
            if self.done:
                return
            await self._changed.wait()


def _dropped(at: int, first: int) -> bytes:
    event = {
        "type": "error",
        "code": "events_dropped",
        "message": f"events {at} to {first - 1} were dropped before this stream read them",
        "param": None,
        "sequence_number": at,
    }
    return b"event: error\ndata: " + ENCODER.encode(event) + b"\n\n"


class Job:
    """One background response: its owner, events and task."""

    __slots__ = ("abandoned", "ended_at", "log", "owner", "response_id", "task")

    def __init__(self, response_id: str, owner: str | None, log: EventLog) -> None:
        self.response_id = response_id
        self.owner = owner
        self.log = log
        self.task: asyncio.Task[None] | None = None
        self.ended_at: float | None = None
        self.abandoned = False

    @property
    def running(self) -> bool:
        """Whether its task has not ended."""
        return self.task is not None and not self.task.done()


class BackgroundRunner:
    """See the module docstring. ``ttl`` and ``max_kept`` bound the finished jobs kept; the
    event caps are per response."""

    def __init__(
        self,
        state: ResponseState,
        logger: Callable[[], Any],
        *,
        ttl: float,
        max_kept: int,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_EVENT_BYTES,
        lease: float = LEASE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._state = state
        self._logger = logger
        self._ttl = ttl
        self._max_kept = max_kept
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._lease = lease
        self._clock = clock
        self._jobs: dict[str, Job] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._stopping = False

    @staticmethod
    def accepts(call: Call) -> bool:
        """Whether ``call`` is a Responses call that asked for ``background: true``."""
        envelope = call.dialect_state.get("envelope")
        return envelope is not None and bool(envelope_of(call).background)

    def job(self, response_id: str, principal: Principal) -> Job | None:
        """The caller's job of ``response_id`` this process holds, if any."""
        job = self._jobs.get(response_id)
        return job if job is not None and job.owner == principal.key_id else None

    async def start(
        self,
        call: Call,
        run: Callable[[], Awaitable[Reply]],
        done: Callable[[Ran], None],
    ) -> tuple[Job, bytes]:
        """Store ``call``'s response ``queued`` and start running it; the job and the queued
        response object. A 503 ``response_store_unavailable`` when it cannot be stored (then
        nothing runs and ``done`` is not called)."""
        envelope = envelope_of(call)
        call.stream = True  # its events are kept, whether or not its creator streams them
        at = 1 if envelope.instructions else 0
        given = ENCODER.encode(call.messages[at:])
        owner = call.principal.key_id
        queued = self._body(call, "queued")
        if not await self._state.remember(envelope.id, _record(owner, queued, given, True)):
            raise GatewayError(
                "the background response could not be stored: try again",
                status=503,
                code="response_store_unavailable",
            )
        self._evict(owner)
        job = Job(envelope.id, owner, EventLog(self._max_events, self._max_bytes))
        self._jobs[envelope.id] = job
        job.task = asyncio.create_task(self._run(job, call, given, run, done))
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew())
        return job, queued

    async def cancel(self, response_id: str, principal: Principal) -> bytes:
        """Cancel the caller's background response (``POST …/cancel``): the response object,
        ``cancelled`` (again, if it already was). A 404 if the caller has no such response, a
        400 if it is not a background one or has already ended otherwise."""
        record = await self._state.record(response_id, principal)
        job = self.job(response_id, principal)
        if job is not None and job.running and job.task is not None:
            job.task.cancel()
            await asyncio.wait((job.task,))
            record = await self._state.record(response_id, principal)
        elif record.running:  # it runs in another process: that one sees the cancel on renewal
            body = _restatus(record.body, "cancelled")
            await self._state.remember(response_id, _record(record.owner, body, record.input))
            record = await self._state.record(response_id, principal)
        head = _HEAD.decode(record.body)
        if head.status == "cancelled":
            return record.body
        if not head.background:
            raise BadRequest("Cannot cancel a synchronous response.", code="invalid_request")
        raise BadRequest(
            f"Cannot cancel a response that is {head.status}: only a queued or in-progress "
            "background response can be cancelled.",
            code="invalid_request",
        )

    async def stop(self, seconds: float) -> int:
        """Give the running jobs ``seconds`` to end, then cancel those left (stored ``failed``:
        the gateway stopped) and wait at most :data:`ENDING_GRACE` seconds for them; how many
        were cancelled. Never raises."""
        running = [job.task for job in self._jobs.values() if job.running and job.task]
        if running and seconds > 0:
            await asyncio.wait(running, timeout=seconds)
        self._stopping = True
        ending = [task for task in running if not task.done()]
        for task in ending:
            task.cancel()
        if ending:
            await asyncio.wait(ending, timeout=ENDING_GRACE)
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        return len(ending)

    async def _run(
        self,
        job: Job,
        call: Call,
        given: bytes,
        run: Callable[[], Awaitable[Reply]],
        done: Callable[[Ran], None],
    ) -> None:
        ran = Ran()
        envelope = envelope_of(call)
        encoder = ResponsesStreamEncoder(envelope, call.model)
        owner = call.principal.key_id
        try:
            await self._state.remember(
                job.response_id, _record(owner, self._body(call, "in_progress"), given, True)
            )
            reply = ran.reply = await run()
            encoder = _DIALECT.stream_encoder(call, reply)
            if reply.stream is None:  # framed as the stream that carries it, item events and all
                ran.usage = reply.whole_usage()
                _frame_whole(reply, encoder, job.log)
            else:
                await _pump(reply.stream, encoder, job.log, ran)
        except asyncio.CancelledError:
            ran.cancelled = True
            if not job.abandoned:
                body = self._body(call, "cancelled")
                if self._stopping:
                    body = interrupted(self._body(call, "in_progress"))
                await self._state.remember(job.response_id, _record(owner, body, given))
            raise
        except Exception as failure:
            if isinstance(failure, GatewayError):
                error: GatewayError = failure
            else:
                self._logger().exception("background_response_failed", response_id=job.response_id)
                error = InternalError("internal gateway error")
            ran.error = error
            job.log.add(encoder.error(error))
            body = self._body(call, "failed", ResponseError.of(error))
            await self._state.remember(job.response_id, _record(owner, body, given))
        finally:
            job.log.close()
            job.ended_at = self._clock()
            done(ran)

    def _body(self, call: Call, status: Status, error: ResponseError | None = None) -> bytes:
        envelope = envelope_of(call)
        response = response_object(
            envelope, model=call.model, output=[], status=status, error=error
        )
        return ENCODER.encode(response)

    async def _renew(self) -> None:
        """Renew the running jobs' leases every third of the lease; stop those the store no
        longer holds; end once no job runs."""
        while True:
            await asyncio.sleep(self._lease / 3)
            running = {i: job for i, job in self._jobs.items() if job.running}
            if not running:
                self._renewer = None
                return
            try:
                gone = await self._state.store.renew(list(running))
            except Exception:
                self._logger().exception("background_lease_renewal_failed")
                continue
            for response_id in gone:
                job = running[response_id]
                if job.running and job.task is not None:
                    job.abandoned = True
                    job.task.cancel()

    def _evict(self, owner: str | None) -> None:
        """Drop finished jobs past ``ttl``, then ``owner``'s oldest finished ones past
        ``max_kept``."""
        now = self._clock()
        jobs = self._jobs
        for response_id, job in list(jobs.items()):
            if job.ended_at is not None and now - job.ended_at >= self._ttl:
                del jobs[response_id]
        mine = [job for job in jobs.values() if job.owner == owner]
        excess = len(mine) - self._max_kept + 1
        for job in mine:
            if excess <= 0:
                return
            if job.ended_at is not None:
                del jobs[job.response_id]
                excess -= 1


async def _pump(
    stream: ReplyStream, encoder: ResponsesStreamEncoder, log: EventLog, ran: Ran
) -> None:
    """Frame ``stream``'s chunks into ``log`` as they come, the end events last; the stream is
    closed whatever happens."""
    source = batched(stream)
    try:
        while batch := await source.next_batch(False):
            for chunk in batch:
                if chunk.usage is not None:
                    ran.usage = chunk.usage
                data = encoder.chunk(chunk)  # type: ignore[arg-type]  # raw=False: chunks only
                if data:
                    log.add(data)
        log.add(encoder.end())
    finally:
        if is_closable(stream):
            await stream.aclose()


def _frame_whole(reply: Reply, encoder: ResponsesStreamEncoder, log: EventLog) -> None:
    """Frame a reply that came whole (a plugin answered at once) into ``log`` as the events of
    the stream that carries it (:func:`~proxy.cache.replay.replay_chunks`), so that a streaming
    reader sees its output items, text and arguments as it would from an upstream stream."""
    if reply.response is not None:
        for chunk in replay_chunks(reply.response):
            data = encoder.chunk(chunk)
            if data:
                log.add(data)
    log.add(encoder.end())


def _record(owner: str | None, body: bytes, given: bytes, running: bool = False) -> StoredResponse:
    """A background response's record before it completes: its input is its conversation too
    (it has no output yet)."""
    return StoredResponse(owner, body, given, given, running)


def _restatus(body: bytes, status: Status) -> bytes:
    response = msgspec.json.decode(body)
    response["status"] = status
    return ENCODER.encode(response)
