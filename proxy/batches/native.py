"""Native batches: a batch whose model is an alias with a ``batch: native`` deployment runs
through that provider's own batch API (:class:`~proxy.providers.base.BatchesNatively`: OpenAI's,
Azure OpenAI's, Anthropic's Message Batches), at its discount, instead of line by line through
the chain.

:func:`plan_of` decides when a batch is created: every line must name the same alias, one its
creator may use, and its first ``native`` deployment whose provider has a batch API must take
the batch's endpoint — as it is, or, for a chat batch, translated between OpenAI's chat
completions and Anthropic's messages (:mod:`proxy.batches.wire`): so an OpenAI SDK's batch can
run at Anthropic's batch price, and an Anthropic SDK's message batch at OpenAI's or Azure's.
Otherwise the batch is gateway-executed — and so it is, too, when its creator has a budget or
guardrails of its own (:func:`governed`): a native batch's lines pass no plugin, and its spend
is known only when its results come back, so neither a budget's bound nor a key's checks could
hold for it. The :class:`NativePlan` (provider, upstream model, the wire endpoint, the upstream
batch's id once submitted — never a key) is stored with the batch, so that a restart resumes
polling.

:class:`NativeRunner` submits the lines (each under the upstream id ``l<number>``, which every
provider's custom-id rules accept, its body as the provider's endpoint takes it; a line that
cannot be translated fails at once with the error its online request would have had), polls,
cancels, and maps the results back — read line by line as they arrive, each line within the
provider's ``max_response_bytes``, never a whole result file — into the client's lines: an
OpenAI output line under the client's ``custom_id``, or a message batch's result. A request the
provider never ran gets no result of its own (upstream ``cancelled``: left out, as a line the
gateway did not run; upstream ``expired``: the executor records it ``batch_expired``). An
errored result's body has the snapshot's secrets redacted (an upstream may quote a key).
Each result is recorded in the ledger as one request of the batch — the deployment that served,
the usage it reported, priced at the model's batch rate
(:meth:`~proxy.governance.pricing.ModelPrice.batch_nanos`) — through the snapshot's
``finished`` hooks. A batch API that answers an error raises
:class:`~proxy.providers.base.BatchAPIError` with its status (its body is not kept: it may
quote a key).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
import msgspec

from proxy.batches.batches_db import Line, Result
from proxy.batches.lines import DIALECTS, message_result, output_line, request_id
from proxy.batches.objects import MESSAGES, LineError
from proxy.batches.wire import CHAT, Answer, LineCodec, Passthrough, Translated
from proxy.core.canonical import Call, Principal
from proxy.core.errors import GatewayError
from proxy.core.plugin import FinishedRequest
from proxy.providers.base import (
    BatchAPIError,
    BatchesNatively,
    Capabilities,
    HttpRequest,
    NativeBatchState,
    ReadBatchLines,
)
from proxy.runtime.snapshot import Snapshot

UPSTREAM_TIMEOUT = 3600.0
"""Seconds one call of a batch API may take (a result file can be large)."""
CONNECT_TIMEOUT = 10.0
READ_BYTES = 1024 * 1024
"""The most bytes of a result file read at once."""
DEFAULT_LINE_BYTES = 32 * 1024 * 1024
"""The bound of a result line for a provider no longer configured (its default)."""


class NativePlan(msgspec.Struct):
    """How a native batch runs: the ``provider`` and upstream ``model`` of the alias
    ``alias``'s native deployment, the endpoint its lines take upstream (``wire``; None: the
    batch's own), and the upstream batch's id once submitted."""

    provider: str
    model: str
    alias: str
    upstream_id: str | None = None
    cancel_sent: bool = False
    wire: str | None = None


PLAN_DECODER = msgspec.json.Decoder(NativePlan)


class _Model(msgspec.Struct):
    model: str | None = None


_MODEL = msgspec.json.Decoder(_Model)


def wire_id(number: int) -> str:
    """The upstream custom id of line ``number``."""
    return f"l{number}"


def _wire_of(endpoint: str, capabilities: Capabilities) -> str | None:
    """The endpoint a batch of ``endpoint`` takes at a provider of ``capabilities`` (None: its
    batch API cannot run it)."""
    batcher = capabilities.batcher
    if batcher is None:
        return None
    if endpoint in batcher.batch_endpoints:
        return endpoint
    if endpoint in CHAT and capabilities.http is not None:
        return next((wire for wire in CHAT if wire in batcher.batch_endpoints), None)
    return None


def plan_of(
    snapshot: Snapshot, endpoint: str, lines: list[tuple[str, bytes]], principal: Principal
) -> NativePlan | None:
    """The native plan of a batch of ``lines`` for ``endpoint`` created by ``principal``
    (module docstring), or None."""
    try:
        models = {_MODEL.decode(body).model for _, body in lines}
    except msgspec.DecodeError:
        return None
    if len(models) != 1:
        return None
    (alias,) = models
    if alias is None or not principal.allows(alias) or governed(principal):
        return None
    for deployment in snapshot.config.models.get(alias, ()):
        if deployment.batch != "native":
            continue
        provider, _, model = deployment.target.partition("/")
        capabilities = snapshot.capabilities.get(provider)
        wire = None if capabilities is None else _wire_of(endpoint, capabilities)
        if wire is not None:
            return NativePlan(provider, model, alias, wire=None if wire == endpoint else wire)
    return None


def governed(principal: Principal) -> bool:
    """Whether ``principal`` has a budget (its own, its team's, its end users') or guardrails of
    its own: what only the chain applies, line by line, so its batches are gateway-executed."""
    return bool(
        principal.budget or principal.team_budget or principal.user_budget or principal.guardrails
    )


class NativeRunner:
    """Talks to the providers' batch APIs with the current snapshot's credentials."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def _batcher(self, plan: NativePlan) -> tuple[BatchesNatively, Capabilities]:
        capabilities = self._snapshot().capabilities.get(plan.provider)
        if capabilities is None or capabilities.batcher is None:
            message = f"provider {plan.provider!r} has no batch API any more"
            raise BatchAPIError(message, None, lasting=True)
        return capabilities.batcher, capabilities

    def _codec(self, plan: NativePlan, endpoint: str) -> LineCodec:
        _, capabilities = self._batcher(plan)
        http = capabilities.http
        if plan.wire is None:
            return Passthrough(endpoint, http, plan.model)
        if http is None:
            raise BatchAPIError(f"provider {plan.provider!r} is not reached over HTTP", None)
        return Translated(DIALECTS[endpoint], http, plan.provider, plan.model)

    @contextlib.asynccontextmanager
    async def _exchange(
        self, request: HttpRequest, what: str
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The provider's 2xx answer to ``request`` (within :data:`UPSTREAM_TIMEOUT`); a
        :class:`BatchAPIError` naming ``what`` for any other answer, or a failure to reach it
        or to read it."""
        timeout = aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT, connect=CONNECT_TIMEOUT)
        body = request.body if request.method == "POST" else None
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(
                    request.method, request.url, headers=request.headers, data=body
                ) as answer,
            ):
                if answer.status >= 400:
                    raise BatchAPIError(what, answer.status)
                yield answer
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BatchAPIError(f"{what}: {type(exc).__name__}", None) from None

    async def _send(self, request: HttpRequest, what: str) -> bytes:
        """See :data:`~proxy.providers.base.SendBatchRequest`."""
        async with self._exchange(request, what) as answer:
            return await answer.read()

    def _reader(self, plan: NativePlan) -> ReadBatchLines:
        """A :data:`~proxy.providers.base.ReadBatchLines` whose lines are bounded by the
        provider's ``max_response_bytes`` (one line is one request's answer)."""
        provider = self._snapshot().config.providers.get(plan.provider)
        bound = DEFAULT_LINE_BYTES if provider is None else provider.max_response_bytes

        def within(line: bytes, what: str) -> bytes:
            if len(line) > bound:
                message = f"{what}: a line is larger than {bound} bytes"
                raise BatchAPIError(message, None, lasting=True)
            return line

        async def read(request: HttpRequest, what: str) -> AsyncIterator[bytes]:
            async with self._exchange(request, what) as answer:
                held = b""  # the line still open
                async for piece in answer.content.iter_chunked(READ_BYTES):
                    *whole, held = (held + piece).split(b"\n")
                    for line in whole:
                        yield within(line, what)
                    within(held, what)
                if held:
                    yield held

        return read

    async def submit(
        self, plan: NativePlan, endpoint: str, lines: Sequence[Line]
    ) -> tuple[str | None, list[Result]]:
        """Create the upstream batch of ``lines``: its id (None: no line could be sent) and
        the results of the lines that could not (each failed as its online request would)."""
        batcher, _ = self._batcher(plan)
        codec = self._codec(plan, endpoint)
        sent: list[tuple[str, dict[str, Any]]] = []
        refused: list[Result] = []
        for line in lines:
            try:
                sent.append((wire_id(line.number), codec.request(line.body)))
            except GatewayError as failure:
                dialect = DIALECTS[endpoint]
                rid = request_id()
                status = dialect.error_status(failure)
                body = dialect.encode_error(failure, rid)
                answer = Answer(status, body, None, (failure.code, failure.message))
                refused.append(Result(line.number, _client_line(endpoint, line, rid, answer), True))
        if not sent:
            return None, refused
        wire = plan.wire or endpoint
        return await batcher.submit_batch(self._send, wire, plan.model, sent), refused

    async def poll(self, plan: NativePlan) -> NativeBatchState:
        """The upstream batch as it stands."""
        assert plan.upstream_id is not None
        batcher, _ = self._batcher(plan)
        return await batcher.poll_batch(self._send, plan.upstream_id)

    async def cancel(self, plan: NativePlan) -> None:
        """Ask the provider to cancel the upstream batch."""
        assert plan.upstream_id is not None
        batcher, _ = self._batcher(plan)
        await batcher.cancel_batch(self._send, plan.upstream_id)

    async def results(
        self,
        plan: NativePlan,
        endpoint: str,
        batch_id: str,
        principal: Principal,
        state: NativeBatchState,
        lines: Sequence[Line],
    ) -> AsyncIterator[Result]:
        """The client's results of the ended upstream batch (``state``) of ``lines`` (those
        without a result), as they are read, each recorded in the ledger (module docstring).
        A line gets one result at most."""
        batcher, _ = self._batcher(plan)
        codec = self._codec(plan, endpoint)
        redactor = self._snapshot().redactor
        waiting = {wire_id(line.number): line for line in lines}
        # (a batch submitted before lines went up as l<number> has the client's ids)
        waiting.update({line.custom_id: line for line in lines if line.custom_id not in waiting})
        done: set[int] = set()
        async for result in batcher.batch_results(self._reader(plan), state):
            line = waiting.get(result.custom_id)
            if line is None or line.number in done or result.body is None:
                continue  # not ours, seen, or never ran
            done.add(line.number)
            answer = codec.answer(line.body, result)
            if answer.error is not None:
                clean = redactor.text(answer.body.decode("utf-8", "replace")).encode()
                answer = Answer(answer.status, clean, answer.usage, answer.error)
            rid = request_id()
            failed = answer.error is not None
            self._account(plan, endpoint, batch_id, principal, rid, answer)
            yield Result(line.number, _client_line(endpoint, line, rid, answer), failed)

    def _account(
        self,
        plan: NativePlan,
        endpoint: str,
        batch_id: str,
        principal: Principal,
        rid: str,
        answer: Answer,
    ) -> None:
        """Record one result in the ledger (its cost at the batch rate)."""
        snapshot = self._snapshot()
        dialect = DIALECTS[endpoint].name
        call = Call(rid, dialect, plan.alias, [], principal=principal)
        call.accounting.batch_id = batch_id
        price = snapshot.prices.price(plan.provider, plan.model)
        if price is not None and answer.usage is not None:
            call.accounting.cost_nanos = price.batch_nanos(answer.usage)
            call.accounting.cost_source = "estimated"
        finished = FinishedRequest(
            request_id=rid,
            dialect=dialect,
            call=call,
            principal=principal,
            status=answer.status,
            provider=plan.provider,
            upstream_model=plan.model,
            usage=answer.usage,
            error_code=None if answer.error is None else answer.error[0],
            duration=0.0,
            ended_at=time.time(),
            attempts=1,
        )
        for hook in snapshot.finishers:
            try:
                hook(finished)
            except Exception:
                snapshot.logger.exception("finished_hook_failed", request_id=rid)


def _client_line(endpoint: str, line: Line, rid: str, answer: Answer) -> bytes:
    """The client's result line of ``line``: a message batch's result, or an OpenAI output
    line under the client's ``custom_id``."""
    if endpoint == MESSAGES:
        kind = "error" if answer.error is not None else "message"
        return message_result(line.custom_id, kind, answer.body)
    error = None if answer.error is None else LineError(*answer.error)
    return output_line(rid, line.custom_id, answer.status, answer.body, error)
