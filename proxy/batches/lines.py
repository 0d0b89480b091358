"""Running one batch line: its request through the whole plugin chain, as the key that created
the batch, and its output-file line.

:meth:`LineRunner.run` decodes the line's body with the dialect of the batch's endpoint, as the
dialect route would (never streamed: a batch line's answer is a whole body), runs it through the
current snapshot's chain as the batch's principal — so the ``auth`` plugin's model checks, the
limits, budgets, cache and every other plugin apply to it as to a request — with the batch's id
on its :class:`~proxy.core.canonical.Accounting` (the ledger records it), and accounts for it
as a request (metrics, access line, ``finished`` hooks: one ledger record per line). What the
dialect answered becomes the line's ``response``: its status and body, an error's too; a failed
line also carries its error's ``code`` and ``message`` (``budget_exceeded`` when a budget ran
out; a line whose body does not decode is recorded with an empty model). A message batch's
line (Anthropic's) is its result instead: ``{"custom_id", "result":
{"type": "succeeded", "message"}}`` or ``{"type": "errored", "error"}`` with Anthropic's error
body. It never raises but for cancellation (then the line is accounted as 499 and has no
result: it runs again).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from proxy.batches.batches_db import Line, Result
from proxy.batches.objects import ENCODER, MESSAGES, LineError, LineResponse, OutputLine
from proxy.core.canonical import Call, Principal
from proxy.core.errors import GatewayError, InternalError, NoReadyDeployment
from proxy.core.metrics import Metrics
from proxy.core.streams import is_closable
from proxy.dialects.anthropic import AnthropicDialect
from proxy.dialects.base import Dialect
from proxy.dialects.openai_chat import OpenAIChatDialect
from proxy.dialects.openai_embeddings import OpenAIEmbeddingsDialect
from proxy.dialects.responses import ResponsesDialect
from proxy.http.answer import CLIENT_CLOSED, Outcome
from proxy.http.dialect_route import account
from proxy.runtime.snapshot import Snapshot

DIALECTS: dict[str, Dialect] = {
    "/v1/chat/completions": OpenAIChatDialect(),
    "/v1/responses": ResponsesDialect(),
    "/v1/embeddings": OpenAIEmbeddingsDialect(),
    MESSAGES: AnthropicDialect(),
}
"""The dialect each batch endpoint's lines are read and answered in."""
_NO_HEADERS: dict[str, str] = {}


def request_id() -> str:
    """A fresh id for one batch line's request (its output line's ``id``)."""
    return "batch_req_" + uuid.uuid4().hex


class LineRunner:
    """See the module docstring. ``snapshot()`` gives the current runtime snapshot."""

    def __init__(self, snapshot: Callable[[], Snapshot], metrics: Metrics) -> None:
        self._snapshot = snapshot
        self._metrics = metrics

    async def run(self, endpoint: str, batch_id: str, principal: Principal, line: Line) -> Result:
        """Run ``line`` of batch ``batch_id`` (module docstring)."""
        dialect = DIALECTS[endpoint]
        snapshot = self._snapshot()
        snapshot.enter()
        metrics = self._metrics
        start = time.perf_counter()
        rid = request_id()
        outcome = Outcome()
        outcome.principal = principal
        call = None
        try:
            try:
                try:
                    call = dialect.decode(line.body, _NO_HEADERS, rid, start)
                except GatewayError:  # its ledger record still names the batch
                    call = Call(rid, dialect.name, "", [], principal=principal)
                    call.accounting.batch_id = batch_id
                    raise
                call.stream = False
                router = snapshot.router
                if not call.model:
                    call.model = router.default_model(call.options.provider)
                call.principal = principal
                call.accounting.batch_id = batch_id
                try:
                    call.deployments = router.resolve(call.model, call.options.provider)
                except NoReadyDeployment:  # the upstream refuses, unless a plugin reroutes
                    call.deployments = []
                outcome.model = metrics.model_label(call.model)
                reply = await snapshot.chain(call)
                outcome.provider = reply.provider
                outcome.upstream_model = reply.model
                outcome.attempts = reply.attempts
                if reply.stream is not None:  # a plugin streamed what was asked whole
                    if is_closable(reply.stream):
                        await reply.stream.aclose()
                    raise InternalError("a batch line was answered as a stream")
                outcome.usage = reply.whole_usage()
                body = dialect.encode_response(call, reply)
                outcome.status = 200
                if endpoint == MESSAGES:
                    return Result(
                        line.number, message_result(line.custom_id, "message", body), False
                    )
                return Result(line.number, output_line(rid, line.custom_id, 200, body), False)
            except GatewayError as refused:
                failure: GatewayError = refused
            except Exception:
                snapshot.logger.exception("batch_line_failed", batch_id=batch_id, line=line.number)
                failure = InternalError("internal gateway error")
            status = dialect.error_status(failure)
            outcome.failed(failure, status)
            body = dialect.encode_error(failure, rid)
            if endpoint == MESSAGES:
                return Result(line.number, message_result(line.custom_id, "error", body), True)
            named = LineError(failure.code, failure.message)
            return Result(line.number, output_line(rid, line.custom_id, status, body, named), True)
        except BaseException:
            outcome.status = CLIENT_CLOSED
            raise
        finally:
            account(snapshot, metrics, dialect.name, call, outcome, start, rid)
            snapshot.leave()


def failed_line(custom_id: str, status: int, code: str, message: str) -> bytes:
    """The error-file line of a line that did not run (``cancelled``, ``expired``): an error
    body in OpenAI's shape."""
    body: dict[str, Any] = {"error": {"message": message, "type": "invalid_request_error"}}
    body["error"].update(param=None, code=code)
    rid = request_id()
    return output_line(rid, custom_id, status, ENCODER.encode(body), LineError(code, message))


EXPIRED = "batch_expired"
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


def expired_line(custom_id: str) -> bytes:
    """The error-file line of a line that had not run when its batch expired, as OpenAI writes
    it: no ``response``, the ``error`` ``batch_expired``."""
    rid = request_id()
    return ENCODER.encode(OutputLine(rid, custom_id, None, LineError(EXPIRED, EXPIRED_MESSAGE)))


class _Message(msgspec.Struct):
    type: str
    message: msgspec.Raw


class _Errored(msgspec.Struct):
    type: str
    error: msgspec.Raw


class _Individual(msgspec.Struct):
    custom_id: str
    result: _Message | _Errored


def message_result(custom_id: str, kind: str, body: bytes) -> bytes:
    """A message batch's result line: ``succeeded`` with the message, or ``errored``."""
    raw = msgspec.Raw(body)
    result = _Message("succeeded", raw) if kind == "message" else _Errored("errored", raw)
    return ENCODER.encode(_Individual(custom_id, result))


def output_line(
    rid: str, custom_id: str, status: int, body: bytes, error: LineError | None = None
) -> bytes:
    response = LineResponse(status, rid, msgspec.Raw(body))
    return ENCODER.encode(OutputLine(rid, custom_id, response, error))
