"""A real upstream on 127.0.0.1 that serves Anthropic's Message Batches API, for the
native-batch tests: ``POST /v1/messages/batches``, ``GET /v1/messages/batches/{id}``,
``POST /v1/messages/batches/{id}/cancel`` and ``GET /v1/messages/batches/{id}/results``. A batch
is ``in_progress`` on its first poll and ``ended`` on the next; one whose requests say ``hold``
stays ``in_progress`` until cancelled (then it ends with every request ``canceled``) or until
the test releases it (:meth:`FakeMessageBatches.release`).

Each request is answered as a message with fixed usage (10 input tokens, 5 output tokens)
quoting its last user text; one whose text contains ``refuse`` is ``errored`` with an
``invalid_request_error``. Every request's ``x-api-key`` and ``anthropic-version`` headers and
every submitted request are recorded; ``message_calls`` counts calls to ``/v1/messages`` (which
a native batch must never make). Its ``results_url`` points at an address nobody serves: the
gateway must read results at its configured base URL."""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

from tests.e2e.fake_openai_batches import text_of

USAGE = {"input_tokens": 10, "output_tokens": 5}


class FakeMessageBatches:
    """State and handlers of the fake upstream."""

    def __init__(self) -> None:
        self.batches: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, list[dict[str, Any]]] = {}
        self.keys: set[str] = set()
        self.versions: set[str] = set()
        self.cancelled: list[str] = []
        self.polls = 0
        self.message_calls = 0
        self.holding = True
        self._ids = itertools.count(1)

    def app(self) -> web.Application:
        app = web.Application()
        base = "/v1/messages/batches"
        app.router.add_post(base, self.create)
        app.router.add_get(base + "/{id}", self.retrieve)
        app.router.add_post(base + "/{id}/cancel", self.cancel)
        app.router.add_get(base + "/{id}/results", self.results)
        app.router.add_post("/v1/messages", self.message)
        return app

    def _seen(self, request: web.Request) -> None:
        self.keys.add(request.headers.get("x-api-key", ""))
        self.versions.add(request.headers.get("anthropic-version", ""))

    async def create(self, request: web.Request) -> web.Response:
        self._seen(request)
        body = await request.json()
        batch_id = f"msgbatch_up{next(self._ids)}"
        self.requests[batch_id] = body["requests"]
        self.batches[batch_id] = {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {
                "processing": len(body["requests"]),
                "succeeded": 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "created_at": "2026-01-01T00:00:00Z",
            "expires_at": "2026-01-02T00:00:00Z",
            "ended_at": None,
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": None,
        }
        return web.json_response(self.batches[batch_id])

    async def retrieve(self, request: web.Request) -> web.Response:
        self._seen(request)
        self.polls += 1
        batch_id = request.match_info["id"]
        batch = self.batches[batch_id]
        held = self.holding and any(
            "hold" in json.dumps(r["params"]) for r in self.requests[batch_id]
        )
        if batch["processing_status"] == "in_progress" and self.polls > 1 and not held:
            self._end(batch)
        return web.json_response(batch)

    def release(self) -> None:
        """Let held batches end on their next poll."""
        self.holding = False

    async def cancel(self, request: web.Request) -> web.Response:
        self._seen(request)
        batch = self.batches[request.match_info["id"]]
        batch["cancel_initiated_at"] = "2026-01-01T00:00:01Z"
        self.cancelled.append(batch["id"])
        self._end(batch)
        return web.json_response(batch)

    async def results(self, request: web.Request) -> web.Response:
        self._seen(request)
        batch_id = request.match_info["id"]
        cancelled = self.batches[batch_id]["cancel_initiated_at"] is not None
        lines = [self._result(item, cancelled) for item in self.requests[batch_id]]
        body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        return web.Response(body=body, content_type="application/binary")

    async def message(self, request: web.Request) -> web.Response:
        self.message_calls += 1
        return web.json_response({"type": "error", "error": {"type": "api_error"}}, status=500)

    def _end(self, batch: dict[str, Any]) -> None:
        batch["processing_status"] = "ended"
        batch["ended_at"] = "2026-01-01T00:00:02Z"
        batch["results_url"] = "http://127.0.0.1:9/nobody-serves-this"

    @staticmethod
    def _result(item: dict[str, Any], cancelled: bool) -> dict[str, Any]:
        custom_id, params = item["custom_id"], item["params"]
        if cancelled:
            return {"custom_id": custom_id, "result": {"type": "canceled"}}
        text = text_of(params["messages"][-1]["content"])
        if "refuse" in text:
            error = {"type": "invalid_request_error", "message": "refused"}
            failure = {"type": "error", "error": error}
            return {"custom_id": custom_id, "result": {"type": "errored", "error": failure}}
        message = {
            "id": "msg_batched",
            "type": "message",
            "role": "assistant",
            "model": params["model"],
            "content": [{"type": "text", "text": f"batched: {text}"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": USAGE,
        }
        return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}
