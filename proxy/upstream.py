"""The innermost link of the chain: send a call to one deployment and return its reply.

It picks the deployment (the one a plugin chose, else weighted-random among the candidates),
runs the provider — over the shared transport, or in-process — under the provider's clocks, and
returns a :class:`~proxy.canonical.Reply`. An embeddings call (``Call.embedding``) goes to the
provider's embedding translation (``build_embeddings`` / ``parse_embeddings``, or a local
provider's ``embed``) and comes back as ``Reply.embeddings``; a provider without one answers
400 ``embeddings_not_supported`` before anything is sent. Streams come back *primed* (their
first chunk has arrived), so every failure before the first byte is an exception from this
call, where retry and fallback can act. Every upstream error is sanitised (no secret reaches a
message) and counted.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from proxy.canonical import (
    Call,
    Chunk,
    Deployment,
    Embeddings,
    RawFrames,
    Reply,
    Response,
    Timings,
)
from proxy.errors import BadRequest, GatewayError, NoReadyDeployment, UpstreamTimeout
from proxy.observed import EndHook, StreamEnd
from proxy.providers.base import HttpProvider, LocalProvider, Provider, Timeouts
from proxy.redact import Redactor, sanitise_error
from proxy.transport import HttpTransport

ErrorHook = Callable[[str, GatewayError], None]
DroppedHook = Callable[[str, str, list[str]], None]


class UpstreamClocks:
    """The first-byte, idle and total deadlines of one upstream call (event-loop time).

    ``with clocks:`` guards one wait on the upstream: when the current deadline passes, the
    waiting task is cancelled and the block raises :class:`TimeoutError` (as
    :func:`asyncio.timeout` does). One timer serves the whole call — it is re-armed only when it
    fires before a deadline that has since moved — instead of one timer per wait, which matters
    for streams with many waits. :meth:`close` stops the timer when the call is over.
    """

    __slots__ = (
        "_armed_at",
        "_cancelling",
        "_expired",
        "_task",
        "_timer",
        "clock",
        "deadline",
        "idle",
        "loop",
        "total_deadline",
    )

    def __init__(self, timeouts: Timeouts) -> None:
        self.loop = asyncio.get_running_loop()
        now = self.loop.time()
        self.idle = timeouts.idle
        self.total_deadline = now + timeouts.total
        if timeouts.first_byte < timeouts.total:
            self.deadline, self.clock = now + timeouts.first_byte, "first_byte"
        else:
            self.deadline, self.clock = self.total_deadline, "total"
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self._expired = False

    def next_is_idle(self) -> None:
        """After a byte has arrived: the next wait is bounded by the idle clock."""
        deadline = self.loop.time() + self.idle
        if deadline < self.total_deadline:
            self.deadline, self.clock = deadline, "idle"
        else:
            self.deadline, self.clock = self.total_deadline, "total"

    def expired(self, provider: str) -> UpstreamTimeout:
        """The error for the clock that just ran out."""
        return UpstreamTimeout(
            f"provider {provider!r} exceeded the {self.clock.replace('_', ' ')} timeout",
            code=f"{self.clock}_timeout",
            provider=provider,
        )

    def __enter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        if self._timer is None or self.deadline < self._armed_at:
            self._arm()

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        task, self._task = self._task, None
        if self._expired:
            self._expired = False
            assert task is not None
            if task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from None

    def close(self) -> None:
        """The call is over: no more waits to guard."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = self.deadline
        self._timer = self.loop.call_at(self.deadline, self._fire)

    def _fire(self) -> None:
        self._timer = None
        task = self._task
        if task is None:  # not waiting now: the next wait arms a timer again
            return
        if self.loop.time() < self.deadline:
            self._arm()
            return
        self._expired = True
        task.cancel()


class UpstreamStream:
    """A provider's chunk stream under the first-byte, idle and total clocks.

    The provider side may yield single chunks or lists of items (the HTTP transport yields one
    list per network read, ending with ``None`` once the end marker was read; its items are
    chunks or :class:`~proxy.canonical.RawFrames`). Besides async iteration (chunks only), it
    offers the :class:`~proxy.canonical.BatchedStream` interface, so the app writes what
    arrived together in one go, verbatim frames included. Raw frames are decoded only when a
    reader asks for chunks. The clocks run per wait on the provider, not per chunk. Time spent
    waiting is added to ``timings.upstream_wait``. Errors raised by the provider stream, or by
    decoding its frames, are sanitised and counted through ``on_error`` before they propagate.
    It takes end hooks (:meth:`when_over`, see :mod:`proxy.observed`): they run once, when the
    stream ends, fails or is closed, before that is reported to its reader.
    """

    __slots__ = (
        "_clocks",
        "_end",
        "_ended",
        "_failure",
        "_inner",
        "_last",
        "_meters",
        "_model",
        "_on_error",
        "_provider",
        "_ready",
        "_timings",
    )

    def __init__(
        self,
        inner: AsyncIterator[Chunk] | AsyncIterator[list[Chunk | RawFrames | None]],
        clocks: UpstreamClocks,
        timings: Timings,
        provider: str,
        on_error: ErrorHook,
        model: str = "",
    ) -> None:
        """``model`` names chunks whose provider's wire format does not (e.g. Bedrock's)."""
        self._inner = inner
        self._model = model
        self._clocks = clocks
        self._timings = timings
        self._provider = provider
        self._on_error = on_error
        self._ready: deque[Chunk | RawFrames] = deque()
        self._ended = False
        self._failure: GatewayError | None = None
        self._end: StreamEnd | None = None
        self._last: list[Chunk | RawFrames] = []  # the last batch passed, kept for end hooks
        self._meters = False  # an end hook needs every batch (see StreamEnd)

    def when_over(self, hook: EndHook, meters: bool = False) -> None:
        """Run ``hook(usage, generated)`` once when the stream is over (see
        :class:`~proxy.observed.StreamEnd`)."""
        end = self._end
        if end is None:
            end = self._end = StreamEnd()
        end.add(hook, meters)
        self._meters = end.meters

    @property
    def ended(self) -> bool:
        """The end marker has arrived: no chunk will come beyond those already received."""
        return self._ended

    async def next_batch(self, raw: bool = False) -> list[Chunk | RawFrames]:
        """See :class:`~proxy.canonical.BatchedStream`."""
        ready = self._ready
        if not ready:
            try:
                if self._failure is not None:
                    raise self._failure
                if self._ended:
                    raise StopAsyncIteration
                await self._fill(report=True)
            except StopAsyncIteration:
                await self._over()
                return []
            except BaseException:
                await self._over()
                raise
        batch: list[Chunk | RawFrames] = list(ready)
        ready.clear()
        if not raw:
            try:
                batch = self._decoded(batch)  # type: ignore[assignment]
            except BaseException:
                await self._over()
                raise
        self._last = batch
        if self._meters:
            self._end.passed(batch)  # type: ignore[union-attr]
        return batch

    async def prime(self) -> None:
        """Wait for the first chunk (under the first-byte clock) and hold it.

        A failure here is the caller's to report: it happened before the reply existed.
        """
        await self._fill(report=False)

    def __aiter__(self) -> UpstreamStream:
        return self

    async def __anext__(self) -> Chunk:
        ready = self._ready
        try:
            while True:
                if not ready:
                    if self._failure is not None:
                        raise self._failure
                    if self._ended:
                        raise StopAsyncIteration
                    await self._fill(report=True)
                item = ready.popleft()
                if type(item) is not RawFrames:
                    break
                ready.extendleft(reversed(self._decoded([item])))
        except BaseException:
            await self._over()
            raise
        chunk: Chunk = item  # type: ignore[assignment]
        self._last = [chunk]
        if self._meters:
            self._end.passed_one(chunk)  # type: ignore[union-attr]
        return chunk

    def _decoded(self, items: list[Chunk | RawFrames]) -> list[Chunk]:
        """``items`` with raw frames decoded. A frame that cannot be decoded ends the stream:
        the chunks before it are returned, and the error is raised by the next read."""
        chunks: list[Chunk] = []
        for item in items:
            if type(item) is not RawFrames:
                chunks.append(item)  # type: ignore[arg-type]
                continue
            parse = item.parse  # type: ignore[union-attr]
            try:
                for payload in item.payloads():  # type: ignore[union-attr]
                    chunk = parse(payload)
                    if chunk is not None:
                        chunks.append(chunk)
            except GatewayError as error:
                self._on_error(self._provider, error)
                self._failure = error
                self._ready.clear()
                if not chunks:
                    raise
                break
        return chunks

    async def _fill(self, *, report: bool) -> None:
        """Wait until at least one item is ready; StopAsyncIteration at the end."""
        clocks = self._clocks
        started = time.perf_counter()
        try:
            with clocks:
                while not self._ready:
                    item = await anext(self._inner)
                    if isinstance(item, list):
                        if item and item[-1] is None:
                            item.pop()
                            self._ended = True
                        if item:
                            first = item[0]
                            if type(first) is Chunk and not first.model:
                                # The wire format does not name the model (raw frames always do).
                                for chunk in item:
                                    chunk.model = self._model  # type: ignore[union-attr]
                        self._ready.extend(item)  # type: ignore[arg-type]
                        if self._ended and not self._ready:
                            raise StopAsyncIteration
                    else:
                        self._ready.append(item)
        except TimeoutError:
            error = clocks.expired(self._provider)
            if report:
                self._on_error(self._provider, error)
            raise error from None
        except GatewayError as error:
            if report:
                self._on_error(self._provider, error)
            raise
        finally:
            self._timings.upstream_wait += time.perf_counter() - started
        clocks.next_is_idle()

    async def aclose(self) -> None:
        """Stop the stream (its end hooks run, if they have not) and free its upstream
        connection."""
        self._clocks.close()
        try:
            await self._over()
        finally:
            aclose = getattr(self._inner, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _over(self) -> None:
        end = self._end
        if end is not None:
            pending = end.over(self._last)
            if pending is not None:
                await pending


class Upstream:
    """The chain's innermost ``next``: ``await upstream(call) -> Reply``."""

    def __init__(
        self,
        providers: Mapping[str, Provider],
        transport: HttpTransport,
        redactor: Redactor,
        on_error: ErrorHook,
        rng: random.Random | None = None,
        on_dropped: DroppedHook | None = None,
    ) -> None:
        """``on_error(provider, error)`` is told of every upstream failure (for metrics);
        ``on_dropped(provider, model, fields)``, when given, of request fields a provider
        removes because its vendor rejects them (a debug log line)."""
        self._on_dropped = on_dropped
        self._providers = dict(providers)
        self._local_names = frozenset(
            name for name, p in providers.items() if isinstance(p, LocalProvider)
        )
        self._transport = transport
        self._redactor = redactor
        self._on_error = on_error
        self._rng = rng or random.Random()

    async def __call__(self, call: Call) -> Reply:
        """Send ``call`` to its deployment. Raises a sanitised :class:`GatewayError`;
        :class:`NoReadyDeployment` when the call has no candidate at all."""
        deployment = call.deployment or self._pick(call.deployments)
        provider = self._providers[deployment.provider]
        if call.embedding is not None and not _embeds(provider):
            raise BadRequest(
                f"the model {call.model!r} is served by provider {deployment.provider!r}, "
                "which does not serve embeddings",
                code="embeddings_not_supported",
                param="model",
            )
        clocks = UpstreamClocks(provider.config.timeouts)
        try:
            if call.embedding is not None:
                result = await self._embed(provider, call, deployment, clocks)
            elif deployment.provider in self._local_names:
                result: Any = await self._local(provider, call, deployment, clocks)  # type: ignore[arg-type]
            else:
                result = await self._http(provider, call, deployment, clocks)  # type: ignore[arg-type]
        except GatewayError as error:
            clocks.close()
            self._fail(deployment.provider, error)
            raise
        except BaseException:
            clocks.close()
            raise
        if isinstance(result, Response):
            clocks.close()
            return Reply(provider=deployment.provider, model=deployment.model, response=result)
        if isinstance(result, Embeddings):
            clocks.close()
            return Reply(provider=deployment.provider, model=deployment.model, embeddings=result)
        return Reply(provider=deployment.provider, model=deployment.model, stream=result)

    async def count_tokens(self, call: Call, deployments: list[Deployment]) -> int | None:
        """The exact input tokens of ``call`` from the first of ``deployments`` whose provider
        can count them (an in-process ``count_tokens``, or an API's counting endpoint, asked
        under the provider's clocks); None when none can. Raises a sanitised
        :class:`GatewayError` when the counting upstream fails."""
        for deployment in deployments:
            provider = self._providers[deployment.provider]
            local = getattr(provider, "count_tokens", None)
            if local is not None:
                return int(local(call, deployment.model))
            if getattr(provider, "count_tokens_request", None) is not None:
                try:
                    return await self._count(provider, call, deployment)  # type: ignore[arg-type]
                except GatewayError as error:
                    self._fail(deployment.provider, error)
                    raise
        return None

    async def _count(self, provider: Any, call: Call, deployment: Deployment) -> int:
        request = provider.count_tokens_request(call, deployment.model)
        clocks = UpstreamClocks(provider.config.timeouts)
        try:
            with clocks:
                status, headers, body = await self._transport.request(provider, request)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            clocks.close()
        if status >= 300:
            raise provider.parse_error(status, headers, body)
        return int(provider.parse_token_count(body))

    def _pick(self, deployments: list[Deployment]) -> Deployment:
        if len(deployments) == 1:
            return deployments[0]
        if not deployments:
            raise NoReadyDeployment(
                "no ready deployment for this model (check provider credentials and health)"
            )
        weights = [d.weight for d in deployments]
        return self._rng.choices(deployments, weights=weights)[0]

    def _fail(self, provider: str, error: GatewayError) -> None:
        """Sanitise ``error`` in place (no secrets, bounded lengths: see
        :func:`~proxy.redact.sanitise_error`) and report it."""
        sanitise_error(error, self._redactor)
        self._on_error(provider, error)

    async def _embed(
        self, provider: Any, call: Call, deployment: Deployment, clocks: UpstreamClocks
    ) -> Embeddings:
        """The vectors of an embeddings call: in-process, or from the provider's requests
        (sent together when it needs several, e.g. one per text)."""
        started = time.perf_counter()
        try:
            with clocks:
                local = getattr(provider, "embed", None)
                if local is not None:
                    return await local(call, deployment.model)  # type: ignore[no-any-return]
                requests = provider.build_embeddings(call, deployment.model)
                if len(requests) == 1:
                    answers = [await self._transport.request(provider, requests[0])]
                else:
                    gathered = await asyncio.gather(
                        *(self._transport.request(provider, request) for request in requests),
                        return_exceptions=True,
                    )
                    for answer in gathered:
                        if isinstance(answer, BaseException):
                            raise answer
                    answers = gathered
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            call.timings.upstream_wait += time.perf_counter() - started
        for status, headers, body in answers:
            if status >= 300:
                raise provider.parse_error(status, headers, body)
        return provider.parse_embeddings(  # type: ignore[no-any-return]
            [body for _, _, body in answers], call, deployment.model
        )

    async def _local(
        self, provider: LocalProvider, call: Call, deployment: Deployment, clocks: UpstreamClocks
    ) -> Response | UpstreamStream:
        started = time.perf_counter()
        try:
            with clocks:
                result = await provider.complete(call, deployment.model)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            call.timings.upstream_wait += time.perf_counter() - started
        if isinstance(result, Response):
            return result
        return await self._primed(result, clocks, call, deployment)

    async def _http(
        self, provider: HttpProvider, call: Call, deployment: Deployment, clocks: UpstreamClocks
    ) -> Response | UpstreamStream:
        request = provider.build_request(call, deployment.model)
        if self._on_dropped is not None:
            dropped_fields = getattr(provider, "dropped_fields", None)
            dropped = dropped_fields(call, deployment.model) if dropped_fields else []
            if dropped:
                self._on_dropped(provider.name, deployment.model, dropped)
        started = time.perf_counter()
        try:
            with clocks:
                if call.stream:
                    chunks = await self._transport.open_stream(provider, request)
                else:
                    status, headers, body = await self._transport.request(provider, request)
        except TimeoutError:
            raise clocks.expired(provider.name) from None
        finally:
            call.timings.upstream_wait += time.perf_counter() - started
        if call.stream:
            return await self._primed(chunks, clocks, call, deployment)
        if status >= 300:
            raise provider.parse_error(status, headers, body)
        return provider.parse_response(body, deployment.model)

    async def _primed(
        self,
        chunks: AsyncIterator[Chunk] | AsyncIterator[list[Chunk | RawFrames | None]],
        clocks: UpstreamClocks,
        call: Call,
        deployment: Deployment,
    ) -> UpstreamStream:
        stream = UpstreamStream(
            chunks, clocks, call.timings, deployment.provider, self._fail, deployment.model
        )
        try:
            await stream.prime()
        except BaseException:
            await stream.aclose()
            raise
        return stream


def _embeds(provider: Provider) -> bool:
    """Whether ``provider`` has an embedding translation (or answers embeddings itself)."""
    return hasattr(provider, "build_embeddings") or hasattr(provider, "embed")
