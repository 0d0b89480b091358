"""The dialect routes' request pipeline: one handler per dialect, the same steps for each.

Every dialect route runs the same pipeline: authenticate the request with the current
snapshot's ``authenticate`` when it demands a key, before the body is read (a client without a
key costs no decoding), read the
body bounded in size and time (``server.max_body_bytes``, ``server.body_read_timeout``; a
``gzip`` or ``deflate`` body inflated within the same size, :mod:`proxy.http.request_body`) and
checked for nesting (an upload route's multipart form read part by part within
``media.max_upload_bytes`` instead, :mod:`proxy.http.multipart`), decode it with the dialect,
resolve the model, run the plugin chain on the
snapshot (a Responses call inside its conversation state), and answer in the dialect — as one
JSON body, or as an SSE stream (:func:`proxy.http.sse_answer.stream_answer`, which flushes chunks as
they arrive). Each request is counted in the metrics, logged as one access line (when
``server.access_log`` is on, and always for a 5xx), and handed to the plugins' ``finished``
hooks.

A failure before the first byte is an error response in the dialect's shape; after it, an
in-band error frame and no end marker (see :mod:`proxy.http.sse_answer`). Either way the request's
:class:`~proxy.http.answer.Outcome` keeps the error's code and message and drops its tracebacks, so
that nothing the request read outlives it in a reference cycle. A client that went away
counts as :data:`~proxy.http.answer.CLIENT_CLOSED`. A request still running when a stop's deadline
passes (:mod:`proxy.http.drain`) is answered as failed with 503 ``server_shutting_down``.
:func:`dialect_handler` is the entry (:mod:`proxy.server.app` routes each dialect's paths to one);
:func:`read_body` also reads the side routes' bodies, and :func:`with_response_state` is the
Responses dialect's ``around``.

With the snapshot's tracer on (:mod:`proxy.core.tracing`), each request is one server span,
``"{method} {route}"``, continuing the caller's ``traceparent``, current while the request runs
(the chain's and the upstream's spans are under it); authentication is a ``crossway.auth`` span
of its own. The span ends with the request's status, who called (``crossway.key_alias``,
``crossway.team``), what it cost (``crossway.cost_usd``) and the cache's answer
(``crossway.cache``); every answer, errors included, carries the trace id in
``x-crossway-trace-id``. With it off, a request pays one attribute check.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from aiohttp import web

from proxy.aiohttp_ext.whole_response import WholeResponse
from proxy.core.canonical import ANONYMOUS, Call, Principal
from proxy.core.errors import (
    GatewayError,
    InternalError,
    NoReadyDeployment,
    drop_tracebacks,
)
from proxy.core.headers import OVERHEAD_HEADER, SERVER_NAME, TRACE_ID_HEADER
from proxy.core.logs import AccessLog
from proxy.core.metrics import Metrics
from proxy.core.plugin import FinishedRequest
from proxy.core.reply import Reply
from proxy.core.tracing import AttributeValue, Span, Tracer
from proxy.dialects.base import DecodesForms, Dialect, check_json_depth
from proxy.governance.pricing import nanos_to_usd
from proxy.http.answer import CLIENT_CLOSED, Outcome, overhead_ms, reply_headers
from proxy.http.app_keys import DRAIN, METRICS, RUNTIME, SERVER
from proxy.http.compat_headers import add_litellm_headers
from proxy.http.drain import shutting_down
from proxy.http.edges import REQUEST_ID, SERVER_HEADER, RequestIds
from proxy.http.multipart import read_form
from proxy.http.request_body import read_request_body
from proxy.http.responses_routes import background_answer
from proxy.http.sse_answer import stream_answer
from proxy.runtime.config import ServerConfig
from proxy.runtime.snapshot import Snapshot
from proxy.stored.background import BackgroundRunner, Ran
from proxy.stored.response_state import ResponseState

_MAX_LOGGED_MODEL = 256
_JSON = "application/json"


async def read_body(request: web.Request, server: ServerConfig) -> bytes:
    """The request's JSON body, read and inflated within the server's size and time limits
    (:func:`~proxy.http.request_body.read_request_body`) and checked for nesting
    (:func:`~proxy.dialects.base.check_json_depth`) before any decoder sees it."""
    body = await read_request_body(request, server.max_body_bytes, server.body_read_timeout)
    check_json_depth(body)
    return body


Around = Callable[[Call, Snapshot], Awaitable[Reply]]


def with_response_state(state: ResponseState) -> Around:
    """Responses calls run their chain inside the conversation state (continue, store)."""

    async def around(call: Call, snapshot: Snapshot) -> Reply:
        return await state.run(call, snapshot.chain, snapshot.authenticate)

    return around


def dialect_handler(
    dialect: Dialect,
    app: web.Application,
    request_ids: RequestIds,
    around: Around | None = None,
    background: BackgroundRunner | None = None,
) -> Any:
    """The request pipeline for one dialect (see the module docstring); ``around``, when given,
    runs the chain in its place (it calls the snapshot's chain itself). A call ``background``
    accepts (``background: true``) is handed to it once authenticated, decoded and resolved:
    the request is answered at once (:func:`~proxy.http.responses_routes.background_answer`)
    and the chain runs in the runner's task, which holds the snapshot and does the request's
    accounting (metrics, access line, ``finished`` hooks: once) when the response ends."""
    metrics = app[METRICS]
    server = app[SERVER]  # limits apply as the process started (aiohttp enforces them too)
    drain = app[DRAIN]
    in_flight = metrics.in_flight(dialect.name)
    name = dialect.name
    forms = dialect if isinstance(dialect, DecodesForms) else None  # uploads: multipart

    async def handle(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        request_id = request_ids(request)
        snapshot = app[RUNTIME].snapshot
        span: Span | None = None
        activation: AbstractContextManager[None] | None = None
        if snapshot.tracer.enabled:  # with tracing off, this check is all a request pays
            span, activation = _request_span(snapshot.tracer, request, name)
        snapshot.enter()
        in_flight.inc()
        outcome = Outcome()
        call: Call | None = None
        handed_over = False
        demands_key = snapshot.demands_key
        try:
            try:
                # Authenticated before the body is read: a client without a key costs no decoding
                if not demands_key:
                    principal = ANONYMOUS
                elif span is None:
                    principal = await snapshot.authenticate(request.headers)
                else:
                    principal = await _traced_authentication(snapshot, request.headers)
                outcome.principal = principal
                if forms is None:
                    body = await read_body(request, server)
                    call = dialect.decode(body, request.headers, request_id, start)
                else:
                    limit = snapshot.config.media.max_upload_bytes
                    form = await read_form(request, limit, server.body_read_timeout)
                    call = forms.decode_form(form, request.headers, request_id, start)
                if not call.model:  # a dialect that lets the client omit it (Fabro)
                    call.model = snapshot.router.default_model(call.options.provider)
                if demands_key:
                    call.principal = principal
                try:
                    call.deployments = snapshot.router.resolve(call.model, call.options.provider)
                except NoReadyDeployment:  # the upstream refuses, unless a plugin reroutes
                    call.deployments = []
                outcome.model = metrics.model_label(call.model)
                if background is not None and background.accepts(call):
                    streamed = call.stream  # the job streams whatever the client asked
                    job, queued = await background.start(
                        call, _runs(call, snapshot), _ends(call, snapshot, outcome, start)
                    )
                    snapshot.enter()  # held by the job (its task runs from the next await on)
                    in_flight.inc()
                    handed_over = True  # the job leaves both and does the accounting
                    headers = {OVERHEAD_HEADER: overhead_ms(start, call.timings.upstream_wait)}
                    if span is not None and span.trace_id:
                        headers[TRACE_ID_HEADER] = span.trace_id
                    return await background_answer(
                        request, streamed, job, queued, request_id, headers
                    )
                if around is None:
                    reply = await snapshot.chain(call)
                else:
                    reply = await around(call, snapshot)
                if snapshot.litellm_headers:
                    add_litellm_headers(reply)
                if span is not None and span.trace_id:
                    reply.headers[TRACE_ID_HEADER] = span.trace_id
                outcome.provider = reply.provider
                outcome.upstream_model = reply.model
                outcome.attempts = reply.attempts
                if reply.stream is None:
                    return _whole(dialect, call, reply, request_id, outcome)
            except GatewayError as error:
                return _error_response(dialect, error, request_id, outcome, call, start, span)
            except asyncio.CancelledError:
                if not drain.claim():  # the client went away
                    raise
                return _error_response(
                    dialect, shutting_down(), request_id, outcome, call, start, span
                )
            except Exception as unexpected:
                snapshot.logger.exception("unhandled_error", request_id=request_id, dialect=name)
                drop_tracebacks(unexpected)  # logged: now nothing needs its frames
                return _error_response(
                    dialect,
                    InternalError("internal gateway error"),
                    request_id,
                    outcome,
                    call,
                    start,
                    span,
                )
            return await stream_answer(request, dialect, call, reply, request_id, outcome, drain)
        except asyncio.CancelledError:
            outcome.status = CLIENT_CLOSED
            raise
        finally:
            in_flight.dec()
            if not handed_over:
                account(snapshot, metrics, name, call, outcome, start, request_id)
            if span is not None:
                _end_request_span(span, call, outcome)
            if activation is not None:
                activation.__exit__(None, None, None)
            snapshot.leave()

    def _runs(call: Call, snapshot: Snapshot) -> Callable[[], Awaitable[Reply]]:
        if around is None:
            return lambda: snapshot.chain(call)
        return lambda: around(call, snapshot)

    def _ends(
        call: Call, snapshot: Snapshot, outcome: Outcome, start: float
    ) -> Callable[[Ran], None]:
        def ended(ran: Ran) -> None:
            reply = ran.reply
            if reply is not None:
                outcome.provider = reply.provider
                outcome.upstream_model = reply.model
                outcome.attempts = reply.attempts
            outcome.usage = ran.usage
            if ran.error is not None:
                outcome.failed(ran.error, ran.error.status)
            else:
                outcome.status = CLIENT_CLOSED if ran.cancelled else 200
            in_flight.dec()
            account(snapshot, metrics, name, call, outcome, start, call.request_id)
            snapshot.leave()

        return ended

    return handle


def account(
    snapshot: Snapshot,
    metrics: Metrics,
    dialect: str,
    call: Call | None,
    outcome: Outcome,
    start: float,
    request_id: str,
) -> None:
    """A request's accounting once it ended: counted in the metrics, logged as one access line
    (when ``server.access_log`` is on, and always for a 5xx), handed to the plugins'
    ``finished`` hooks (how the ledger records it). Also the batch lines' (:mod:`proxy.batches`)."""
    _observe(metrics, dialect, call, outcome, start)
    if snapshot.config.server.access_log or outcome.status >= 500:
        _access_log(snapshot.access_log, dialect, call, outcome, start, request_id)
    if snapshot.finishers:
        _finished(snapshot, dialect, call, outcome, start, request_id)


def _whole(
    dialect: Dialect, call: Call, reply: Reply, request_id: str, outcome: Outcome
) -> web.Response:
    outcome.usage = reply.whole_usage()
    encoded = reply.encoded
    if (
        encoded is not None
        and encoded.response is reply.response
        and encoded.dialect == dialect.name
    ):
        body = encoded.body  # made ahead for this dialect, and the answer is still the same
    else:
        body = dialect.encode_response(call, reply)
    outcome.status = 200
    headers = reply_headers(dialect, call, reply, request_id)
    headers.setdefault("content-type", _JSON)  # a media answer's is its own (audio, text)
    return WholeResponse(body, headers)


def _error_response(
    dialect: Dialect,
    error: GatewayError,
    request_id: str,
    outcome: Outcome,
    call: Call | None,
    start: float,
    span: Span | None = None,
) -> web.Response:
    """The error answer in the dialect's shape, with the gateway's overhead (the whole time
    when the body was never decoded: nothing waited on an upstream)."""
    status = dialect.error_status(error)
    outcome.failed(error, status)
    if error.provider is not None:
        outcome.provider = error.provider
        outcome.attempts = error.attempts
    headers = error.response_headers()
    headers.update(dialect.error_headers(error, request_id))
    headers[REQUEST_ID] = request_id
    headers[SERVER_HEADER] = SERVER_NAME
    headers[OVERHEAD_HEADER] = overhead_ms(
        start, 0.0 if call is None else call.timings.upstream_wait
    )
    headers["content-type"] = _JSON
    if span is not None and span.trace_id:
        headers[TRACE_ID_HEADER] = span.trace_id
    return WholeResponse(dialect.encode_error(error, request_id), headers, status)


async def _traced_authentication(snapshot: Snapshot, headers: Mapping[str, str]) -> Principal:
    """``snapshot.authenticate(headers)`` inside a ``crossway.auth`` span: who called on
    success, the error's code on a refusal."""
    span = snapshot.tracer.child_span("crossway.auth", {"crossway.plugin": "auth"})
    try:
        principal = await snapshot.authenticate(headers)
    except GatewayError as error:
        span.fail(error.code)
        span.end()
        raise
    except BaseException as error:
        span.fail(type(error).__qualname__)
        span.end()
        raise
    if principal.key_alias is not None:
        span.set("crossway.key_alias", principal.key_alias)
    if principal.team is not None:
        span.set("crossway.team", principal.team)
    span.end()
    return principal


def _request_span(
    tracer: Tracer, request: web.Request, dialect: str
) -> tuple[Span, AbstractContextManager[None]]:
    """The request's server span, continuing the caller's context, and its activation, entered:
    the span is current until the caller exits the activation (when the request ends)."""
    span = tracer.request_span(
        f"{request.method} {request.path}",
        request.headers,
        {
            "http.request.method": request.method,
            "http.route": request.path,
            "url.path": request.path,
            "crossway.dialect": dialect,
        },
    )
    activation = tracer.activate(span)
    activation.__enter__()
    return span, activation


def _end_request_span(span: Span, call: Call | None, outcome: Outcome) -> None:
    """The request span's last attributes (see the module docstring), then its end. The
    status is an error for a 5xx only, as the HTTP conventions say for a server; a refusal
    (4xx) keeps its code in ``error.type``."""
    if span.recording:
        status = outcome.status
        attributes: dict[str, AttributeValue] = {"http.response.status_code": status}
        if call is not None:
            attributes["crossway.request_id"] = call.request_id
            attributes["gen_ai.request.model"] = call.model[:_MAX_LOGGED_MODEL]
            principal = call.principal
            if principal.key_alias is not None:
                attributes["crossway.key_alias"] = principal.key_alias
            if principal.team is not None:
                attributes["crossway.team"] = principal.team
            accounting = call.accounting
            if accounting.cost_nanos is not None:
                attributes["crossway.cost_usd"] = nanos_to_usd(accounting.cost_nanos)
            if accounting.cache is not None:
                attributes["crossway.cache"] = accounting.cache
        if outcome.provider not in (None, "none"):
            attributes["crossway.provider"] = str(outcome.provider)
        attributes["crossway.attempts"] = outcome.attempts
        span.set_many(attributes)
        if outcome.error_code is not None:
            if status >= 500:
                span.fail(outcome.error_code, outcome.error_message)
            else:
                span.set("error.type", outcome.error_code)
    span.end()


def _observe(
    metrics: Metrics, dialect: str, call: Call | None, outcome: Outcome, start: float
) -> None:
    total = time.perf_counter() - start
    provider = outcome.provider
    series = metrics.request_series(dialect, outcome.model, provider)
    series.count(outcome.status)
    series.duration.observe(total)
    if call is None:
        series.overhead.observe(total)
        return
    timings = call.timings
    series.overhead.observe(max(total - timings.upstream_wait, 0.0))
    served_by_upstream = call.accounting.cache != "hit"  # a cache hit made no upstream call
    if provider != "none" and served_by_upstream:
        series.upstream(timings.upstream_wait)
    if timings.first_token is not None:
        series.time_to_first_token(timings.first_token)
    if outcome.usage is not None and served_by_upstream:
        series.record_tokens(outcome.usage)


def _finished(
    snapshot: Snapshot,
    dialect: str,
    call: Call | None,
    outcome: Outcome,
    start: float,
    request_id: str,
) -> None:
    """Tell the plugins that record every request (``finished`` hooks) what this one did."""
    provider = outcome.provider
    finished = FinishedRequest(
        request_id=request_id,
        dialect=dialect,
        call=call,
        principal=outcome.principal if call is None else call.principal,
        status=outcome.status,
        provider=None if provider == "none" else provider,
        upstream_model=outcome.upstream_model,
        usage=outcome.usage,
        error_code=outcome.error_code,
        duration=time.perf_counter() - start,
        ended_at=time.time(),
        attempts=outcome.attempts,
    )
    for hook in snapshot.finishers:
        try:
            hook(finished)
        except Exception:
            snapshot.logger.exception("finished_hook_failed", request_id=request_id)


def _access_log(
    access_log: AccessLog,
    dialect: str,
    call: Call | None,
    outcome: Outcome,
    start: float,
    request_id: str,
) -> None:
    total = time.perf_counter() - start
    fields: dict[str, Any] = {
        "request_id": request_id,
        "dialect": dialect,
        "model": call.model[:_MAX_LOGGED_MODEL] if call is not None else None,
        "provider": outcome.provider,
        "status": outcome.status,
        "duration_ms": round(total * 1000, 3),
    }
    if call is not None:
        timings = call.timings
        fields["upstream_ms"] = round(timings.upstream_wait * 1000, 3)
        fields["overhead_ms"] = round((total - timings.upstream_wait) * 1000, 3)
        fields["stream"] = call.stream
        if timings.first_token is not None:
            fields["ttft_ms"] = round(timings.first_token * 1000, 3)
        principal = call.principal
        if principal is not ANONYMOUS:
            fields["key_id"] = principal.key_id
            fields["key_alias"] = principal.key_alias
            fields["team"] = principal.team
            fields["user"] = principal.user
    usage = outcome.usage
    if usage is not None:
        fields["input_tokens"] = usage.prompt_tokens
        fields["output_tokens"] = usage.completion_tokens
    if call is not None and call.accounting.cost_nanos is not None:
        fields["cost_usd"] = nanos_to_usd(call.accounting.cost_nanos)
        fields["cost_source"] = call.accounting.cost_source
    if call is not None and call.accounting.cache is not None:
        fields["cache"] = call.accounting.cache
    if outcome.error_code is not None:
        fields["error_code"] = outcome.error_code
        fields["error"] = outcome.error_message
    access_log.write(fields)
