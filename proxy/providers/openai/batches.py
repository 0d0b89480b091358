"""OpenAI's Files and Batch APIs as a provider's own batch API
(:class:`~proxy.providers.base.BatchesNatively`), for OpenAI and for Azure OpenAI, which serves
the same wire under its own URLs, credential and model (deployment) names.

A batch is submitted in two calls: its lines uploaded as one JSONL file (``purpose: batch``;
each line ``{custom_id, method: POST, url, body}``), then a batch created over that file
(``completion_window: 24h``). Polling reads the batch object (``validating``, ``in_progress``,
``finalizing``, ``cancelling``, then ``completed``, ``failed``, ``expired`` or ``cancelled``);
an ended one's output and error files are read back, each line
``{custom_id, response: {status_code, body} | null, error: {code, message} | null}``. A line
the provider did not run (``batch_expired``, ``batch_cancelled`` in its error file) is reported
as ``expired`` or ``cancelled`` with no body; a line with an ``error`` and no response gets
that error as an OpenAI error body, status 500.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Literal, TypeVar

import msgspec

from proxy.providers.base import (
    BatchAPIError,
    HttpRequest,
    NativeBatchState,
    NativeResult,
    ReadBatchLines,
    SendBatchRequest,
)

Ended = Literal["completed", "failed", "cancelled", "expired"]
NotRun = Literal["cancelled", "expired"]
ENDED: dict[str, Ended] = {
    "completed": "completed",
    "failed": "failed",
    "expired": "expired",
    "cancelled": "cancelled",
}
"""OpenAI's ending batch statuses, as :class:`NativeBatchState` outcomes."""
NOT_RUN: dict[str | None, NotRun] = {"batch_expired": "expired", "batch_cancelled": "cancelled"}
"""Error codes of lines the provider never ran, as :class:`NativeResult` outcomes."""

_ENCODER = msgspec.json.Encoder()
_T = TypeVar("_T")


class _Named(msgspec.Struct):
    id: str


class _Error(msgspec.Struct):
    code: str | None = None
    message: str | None = None


class _Errors(msgspec.Struct):
    data: list[_Error] | None = None


class _Batch(msgspec.Struct):
    status: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: _Errors | None = None


_ABSENT = msgspec.Raw(b"null")


class _Response(msgspec.Struct):
    status_code: int
    body: msgspec.Raw = _ABSENT


class _OutputLine(msgspec.Struct):
    custom_id: str
    response: _Response | None = None
    error: _Error | None = None


_NAMED = msgspec.json.Decoder(_Named)
_BATCH = msgspec.json.Decoder(_Batch)
_LINE = msgspec.json.Decoder(_OutputLine)


def _decoded(decoder: msgspec.json.Decoder[_T], body: bytes, what: str) -> _T:
    """``body`` decoded; a :class:`BatchAPIError` that lasts if it is not what was expected."""
    try:
        return decoder.decode(body)
    except msgspec.DecodeError:
        message = f"{what}: the answer is not what the batch API sends"
        raise BatchAPIError(message, None, lasting=True) from None


class OpenAIBatchAPI:
    """OpenAI's batch API at ``url(path)`` (``path`` like ``/files`` or ``/batches/{id}``),
    sent with ``headers`` (the credential among them). ``line_urls`` maps each batch endpoint
    it takes (OpenAI's names) to the ``url`` its lines and batches name upstream;
    ``deployment(model)`` is the name a line's ``model`` carries upstream."""

    def __init__(
        self,
        url: Callable[[str], str],
        headers: Mapping[str, str],
        line_urls: Mapping[str, str],
        deployment: Callable[[str], str] = str,
    ) -> None:
        self._url = url
        self._headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        self._line_urls = dict(line_urls)
        self._deployment = deployment
        self._endpoints = frozenset(line_urls)

    @property
    def batch_endpoints(self) -> frozenset[str]:
        """See :class:`~proxy.providers.base.BatchesNatively`."""
        return self._endpoints

    def _request(self, path: str, body: bytes = b"", method: str = "POST") -> HttpRequest:
        headers = dict(self._headers)
        if method == "POST":
            headers["content-type"] = "application/json"
        return HttpRequest(url=self._url(path), headers=headers, body=body, method=method)

    async def submit_batch(
        self,
        send: SendBatchRequest,
        endpoint: str,
        model: str,
        lines: Sequence[tuple[str, dict[str, object]]],
    ) -> str:
        """See :meth:`~proxy.providers.base.BatchesNatively.submit_batch`."""
        url = self._line_urls[endpoint]
        name = self._deployment(model)
        content = b"".join(
            _ENCODER.encode(
                {
                    "custom_id": custom_id,
                    "method": "POST",
                    "url": url,
                    "body": {**body, "model": name},
                }
            )
            + b"\n"
            for custom_id, body in lines
        )
        boundary = "crossway-" + secrets.token_hex(16)
        upload = self._request("/files")
        upload.headers["content-type"] = f"multipart/form-data; boundary={boundary}"
        upload.body = b"".join(
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n'
                f"batch\r\n--{boundary}\r\n"
                'Content-Disposition: form-data; name="file"; filename="batch.jsonl"\r\n'
                "Content-Type: application/jsonl\r\n\r\n".encode(),
                content,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        what = "uploading the batch file"
        uploaded = _decoded(_NAMED, await send(upload, what), what)
        create = {"input_file_id": uploaded.id, "endpoint": url, "completion_window": "24h"}
        what = "creating the batch"
        created = await send(self._request("/batches", _ENCODER.encode(create)), what)
        return _decoded(_NAMED, created, what).id

    async def poll_batch(self, send: SendBatchRequest, batch_id: str) -> NativeBatchState:
        """See :meth:`~proxy.providers.base.BatchesNatively.poll_batch`."""
        what = "polling the batch"
        found = _decoded(
            _BATCH, await send(self._request(f"/batches/{batch_id}", method="GET"), what), what
        )
        outcome = ENDED.get(found.status)
        if outcome is None:
            return NativeBatchState(None)
        errors = found.errors.data if found.errors is not None and found.errors.data else []
        return NativeBatchState(
            outcome,
            errors=tuple((e.code or "batch_failed", e.message or "") for e in errors),
            results=tuple(f for f in (found.output_file_id, found.error_file_id) if f),
        )

    async def cancel_batch(self, send: SendBatchRequest, batch_id: str) -> None:
        """See :meth:`~proxy.providers.base.BatchesNatively.cancel_batch`."""
        await send(self._request(f"/batches/{batch_id}/cancel"), "cancelling the batch")

    async def batch_results(
        self, read: ReadBatchLines, state: NativeBatchState
    ) -> AsyncIterator[NativeResult]:
        """See :meth:`~proxy.providers.base.BatchesNatively.batch_results`."""
        what = "reading a result file"
        for file_id in state.results:
            request = self._request(f"/files/{file_id}/content", method="GET")
            async for raw in read(request, what):
                if raw.strip():
                    yield _result(_decoded(_LINE, raw, what))


def _result(line: _OutputLine) -> NativeResult:
    """One output- or error-file line as a :class:`NativeResult`."""
    error, response = line.error, line.response
    if response is not None and bytes(response.body) != b"null":
        status = response.status_code
        failed = status >= 400 or error is not None
        answer = bytes(response.body)
        if failed:
            return NativeResult(line.custom_id, status, answer, "errored")
        return NativeResult(line.custom_id, status, answer, "succeeded")
    code = error.code if error is not None else None
    if code in NOT_RUN:
        return NativeResult(line.custom_id, 0, None, NOT_RUN[code])
    message = (error.message if error is not None else None) or "the batch API gave no answer"
    body = {"error": {"message": message, "type": "api_error", "param": None, "code": code}}
    return NativeResult(line.custom_id, 500, _ENCODER.encode(body), "errored")
