"""Anthropic's Message Batches as a provider's own batch API
(:class:`~proxy.providers.base.BatchesNatively`): ``POST {base_url}/v1/messages/batches`` with
``{"requests": [{"custom_id", "params"}]}`` (each ``params`` a Messages request, never
streamed), polled at ``/v1/messages/batches/{id}`` until its ``processing_status`` is ``ended``
(``cancelled`` when a cancel was initiated, else ``completed``: each request's own result says
whether it ran), cancelled at ``/v1/messages/batches/{id}/cancel``, and its results read from
``/v1/messages/batches/{id}/results`` — at the configured base URL, never at the
``results_url`` the answer names, so the key goes nowhere else. A result line is
``{custom_id, result: {type: succeeded, message} | {type: errored, error} | {type: canceled} |
{type: expired}}``; an errored one's status is the one Anthropic's online API gives its error
type (:data:`STATUS_OF`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import msgspec

from proxy.providers.base import (
    BatchAPIError,
    HttpRequest,
    NativeBatchState,
    NativeResult,
    ReadBatchLines,
    SendBatchRequest,
)

STATUS_OF = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status of each of Anthropic's error types."""

_ENCODER = msgspec.json.Encoder()


class _Created(msgspec.Struct):
    id: str


class _Batch(msgspec.Struct):
    processing_status: str
    cancel_initiated_at: str | None = None


class _ErrorDetail(msgspec.Struct):
    type: str = "api_error"


class _ErrorBody(msgspec.Struct):
    error: _ErrorDetail | None = None


_ABSENT = msgspec.Raw(b"null")


class _Outcome(msgspec.Struct):
    type: str
    message: msgspec.Raw = _ABSENT
    error: msgspec.Raw = _ABSENT


class _ResultLine(msgspec.Struct):
    custom_id: str
    result: _Outcome


_CREATED = msgspec.json.Decoder(_Created)
_BATCH = msgspec.json.Decoder(_Batch)
_RESULT = msgspec.json.Decoder(_ResultLine)
_ERROR = msgspec.json.Decoder(_ErrorBody)


def _unreadable(what: str) -> BatchAPIError:
    return BatchAPIError(f"{what}: the answer is not what the batch API sends", None, lasting=True)


class AnthropicBatchAPI:
    """Anthropic's Message Batches at ``base_url``, sent with ``headers`` (the key and
    ``anthropic-version`` among them)."""

    def __init__(self, base_url: str, headers: Mapping[str, str]) -> None:
        self._base = base_url.rstrip("/") + "/v1/messages/batches"
        self._headers = {**headers, "content-type": "application/json"}

    @property
    def batch_endpoints(self) -> frozenset[str]:
        """See :class:`~proxy.providers.base.BatchesNatively`: Messages requests only."""
        return frozenset({"/v1/messages"})

    def _request(self, path: str, body: bytes = b"", method: str = "POST") -> HttpRequest:
        return HttpRequest(self._base + path, dict(self._headers), body, method)

    async def submit_batch(
        self,
        send: SendBatchRequest,
        endpoint: str,
        model: str,
        lines: Sequence[tuple[str, dict[str, object]]],
    ) -> str:
        """See :meth:`~proxy.providers.base.BatchesNatively.submit_batch`."""
        requests: list[dict[str, Any]] = []
        for custom_id, body in lines:
            params = {key: value for key, value in body.items() if key != "stream"}
            params["model"] = model
            requests.append({"custom_id": custom_id, "params": params})
        what = "creating the message batch"
        answer = await send(self._request("", _ENCODER.encode({"requests": requests})), what)
        try:
            return _CREATED.decode(answer).id
        except msgspec.DecodeError:
            raise _unreadable(what) from None

    async def poll_batch(self, send: SendBatchRequest, batch_id: str) -> NativeBatchState:
        """See :meth:`~proxy.providers.base.BatchesNatively.poll_batch`."""
        what = "polling the message batch"
        try:
            found = _BATCH.decode(await send(self._request(f"/{batch_id}", method="GET"), what))
        except msgspec.DecodeError:
            raise _unreadable(what) from None
        if found.processing_status != "ended":
            return NativeBatchState(None)
        if found.cancel_initiated_at:
            return NativeBatchState("cancelled", results=(batch_id,))
        return NativeBatchState("completed", results=(batch_id,))

    async def cancel_batch(self, send: SendBatchRequest, batch_id: str) -> None:
        """See :meth:`~proxy.providers.base.BatchesNatively.cancel_batch`."""
        await send(self._request(f"/{batch_id}/cancel"), "cancelling the message batch")

    async def batch_results(
        self, read: ReadBatchLines, state: NativeBatchState
    ) -> AsyncIterator[NativeResult]:
        """See :meth:`~proxy.providers.base.BatchesNatively.batch_results`."""
        what = "reading the message batch's results"
        for batch_id in state.results:
            request = self._request(f"/{batch_id}/results", method="GET")
            async for raw in read(request, what):
                if not raw.strip():
                    continue
                try:
                    line = _RESULT.decode(raw)
                except msgspec.DecodeError:
                    raise _unreadable(what) from None
                yield _result(line)


def _result(line: _ResultLine) -> NativeResult:
    """One result line as a :class:`NativeResult`."""
    result = line.result
    if result.type == "succeeded" and bytes(result.message) != b"null":
        return NativeResult(line.custom_id, 200, bytes(result.message), "succeeded")
    if result.type == "canceled":
        return NativeResult(line.custom_id, 0, None, "cancelled")
    if result.type == "expired":
        return NativeResult(line.custom_id, 0, None, "expired")
    body = bytes(result.error)
    try:
        detail = _ERROR.decode(body).error
    except msgspec.DecodeError:
        detail = None
    if detail is None:
        error = {"type": "api_error", "message": f"the batch result was {result.type!r}"}
        body = _ENCODER.encode({"type": "error", "error": error})
        return NativeResult(line.custom_id, 500, body, "errored")
    return NativeResult(line.custom_id, STATUS_OF.get(detail.type, 500), body, "errored")
