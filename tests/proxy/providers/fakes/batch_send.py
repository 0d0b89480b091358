"""A recording ``send`` for the providers' batch APIs
(:data:`~proxy.providers.base.SendBatchRequest`), and its line reader
(:data:`~proxy.providers.base.ReadBatchLines`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from proxy.providers.base import BatchAPIError, HttpRequest


class Recorder:
    """A ``send`` that answers from ``answers`` (path suffix → body) and records requests;
    :meth:`read` answers the same, line by line."""

    def __init__(self, answers: dict[str, bytes]) -> None:
        self.answers = answers
        self.sent: list[HttpRequest] = []

    async def __call__(self, request: HttpRequest, what: str) -> bytes:
        self.sent.append(request)
        path = request.url.split("?")[0]
        for suffix, body in self.answers.items():
            if path.endswith(suffix):
                return body
        raise BatchAPIError(what, 404)

    async def read(self, request: HttpRequest, what: str) -> AsyncIterator[bytes]:
        """The answer's lines, without their ends."""
        for line in (await self(request, what)).split(b"\n"):
            yield line
