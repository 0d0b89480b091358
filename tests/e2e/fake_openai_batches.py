"""A real upstream on 127.0.0.1 that serves OpenAI's Files and Batch APIs, for the native-batch
tests: ``POST /v1/files`` (multipart), ``POST /v1/batches``, ``GET /v1/batches/{id}``,
``POST /v1/batches/{id}/cancel`` and ``GET /v1/files/{id}/content``. A batch is ``validating``,
then ``in_progress``, then ``completed`` on the polls that follow (each poll advances it); one
whose lines say ``hold`` stays ``in_progress`` until cancelled.

Each input line is answered as a chat completion with fixed usage (10 prompt tokens, 5
completion tokens), quoting its last message; a line whose message contains ``refuse`` goes to
the error file with a 400, and one whose message contains ``expire`` goes there as
``batch_expired`` (not run), the batch then ending ``expired``. Every request's
``authorization`` header and every uploaded line is recorded, and ``chat_calls`` counts calls
to ``/v1/chat/completions`` (which a native batch must never make). A request with the key
:data:`REFUSED_KEY` gets a 401 naming it, as some upstreams echo keys.

With ``root="/openai"`` it serves Azure OpenAI's spelling of the same APIs instead
(``/openai/files``, ``/openai/batches``, …), each request's ``api-version`` recorded in
``api_versions`` and its ``api-key`` header among the ``authorizations`` (as ``api-key …``)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from aiohttp import web

REFUSED_KEY = "prov-refused-upstream-key-0123456789"
USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


class FakeBatchAPI:
    """State and handlers of the fake upstream."""

    def __init__(self, root: str = "/v1") -> None:
        self.root = root
        self.api_versions: set[str] = set()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.lines: list[dict[str, Any]] = []
        self.authorizations: set[str] = set()
        self.chat_calls = 0
        self.cancelled: list[str] = []
        self.polls = 0
        self._ids = itertools.count(1)

    def app(self) -> web.Application:
        app = web.Application()
        root = self.root
        app.router.add_post(f"{root}/files", self.upload)
        app.router.add_get(f"{root}/files/{{id}}/content", self.content)
        app.router.add_post(f"{root}/batches", self.create)
        app.router.add_get(f"{root}/batches/{{id}}", self.retrieve)
        app.router.add_post(f"{root}/batches/{{id}}/cancel", self.cancel)
        app.router.add_post(f"{root}/chat/completions", self.chat)
        return app

    def _seen(self, request: web.Request) -> None:
        if "api-key" in request.headers:
            self.authorizations.add("api-key " + request.headers["api-key"])
        else:
            self.authorizations.add(request.headers.get("authorization", ""))
        if "api-version" in request.query:
            self.api_versions.add(request.query["api-version"])

    async def upload(self, request: web.Request) -> web.Response:
        self._seen(request)
        if REFUSED_KEY in (
            request.headers.get("authorization", "") + request.headers.get("api-key", "")
        ):
            message = f"Incorrect API key provided: {REFUSED_KEY}"
            return web.json_response({"error": {"message": message}}, status=401)
        form = await request.post()
        upload = form["file"]
        data = upload.file.read() if hasattr(upload, "file") else bytes(str(upload), "utf-8")
        file_id = f"file-up{next(self._ids)}"
        self.files[file_id] = data
        return web.json_response(
            {
                "id": file_id,
                "object": "file",
                "bytes": len(data),
                "created_at": 0,
                "filename": "batch.jsonl",
                "purpose": form["purpose"],
                "status": "processed",
            }
        )

    async def content(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(body=self.files[request.match_info["id"]])

    async def create(self, request: web.Request) -> web.Response:
        self._seen(request)
        body = await request.json()
        batch_id = f"batch_up{next(self._ids)}"
        self.batches[batch_id] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "input_file_id": body["input_file_id"],
            "completion_window": "24h",
            "status": "validating",
            "created_at": 0,
        }
        return web.json_response(self.batches[batch_id])

    async def retrieve(self, request: web.Request) -> web.Response:
        self._seen(request)
        self.polls += 1
        batch = self.batches[request.match_info["id"]]
        if batch["status"] == "validating":
            batch["status"] = "in_progress"
        elif batch["status"] == "in_progress" and b"hold" not in self.files[batch["input_file_id"]]:
            self._complete(batch)
        return web.json_response(batch)

    async def cancel(self, request: web.Request) -> web.Response:
        self._seen(request)
        batch = self.batches[request.match_info["id"]]
        batch["status"] = "cancelled"
        self.cancelled.append(batch["id"])
        return web.json_response(batch)

    async def chat(self, request: web.Request) -> web.Response:
        self.chat_calls += 1
        return web.json_response({"error": {"message": "not here"}}, status=500)

    def _complete(self, batch: dict[str, Any]) -> None:
        output, errors = [], []
        for raw in self.files[batch["input_file_id"]].splitlines():
            line = json.loads(raw)
            self.lines.append(line)
            text = text_of(line["body"]["messages"][-1]["content"])
            if "expire" in text:  # not run before the window passed: the batch ends expired
                expired = {"code": "batch_expired", "message": "not run in the window"}
                errors.append(
                    {"id": None, "custom_id": line["custom_id"], "response": None, "error": expired}
                )
                continue
            if "refuse" in text:
                body = {
                    "error": {
                        "message": "refused",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "refused",
                    }
                }
                errors.append(
                    {
                        "id": f"batch_req_{len(errors)}",
                        "custom_id": line["custom_id"],
                        "response": {"status_code": 400, "request_id": "r", "body": body},
                        "error": None,
                    }
                )
                continue
            body = {
                "id": "chatcmpl-x",
                "object": "chat.completion",
                "created": 0,
                "model": line["body"]["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"batched: {text}"},
                    }
                ],
                "usage": USAGE,
            }
            output.append(
                {
                    "id": f"batch_req_{len(output)}",
                    "custom_id": line["custom_id"],
                    "response": {"status_code": 200, "request_id": "r", "body": body},
                    "error": None,
                }
            )
        for key, lines in (("output_file_id", output), ("error_file_id", errors)):
            if lines:
                file_id = f"file-up{next(self._ids)}"
                self.files[file_id] = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
                batch[key] = file_id
        ran_out = any(e["response"] is None for e in errors)
        batch["status"] = "expired" if ran_out else "completed"
        batch["request_counts"] = {
            "total": len(output) + len(errors),
            "completed": len(output),
            "failed": len(errors),
        }


def text_of(content: str | list[dict[str, Any]]) -> str:
    """A message's text, whether it is a string or a list of text parts."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)
