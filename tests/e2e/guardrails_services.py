"""The services around a gateway with guardrails, on 127.0.0.1, in one aiohttp application:

- ``POST /v1/chat/completions`` (OpenAI-compatible): model ``echo`` answers with the last user
  turn's text, streamed in 3-character pieces (one frame and one write each: every word of
  more than three letters is split across chunks); model ``scripted`` answers with the next
  text of ``answers`` (whole or streamed the same way).
- ``POST /v1/moderations``: OpenAI's moderation answer, each input scoring 0.9 in
  ``harassment`` when it contains ``HATEFUL`` (else 0.01), 0.9 in ``violence`` when it contains
  ``VIOLENT``.
- ``POST /guard/<mode>``: the operator's webhook. ``native`` and ``litellm`` answer in the
  gateway's shape or LiteLLM's generic guardrail API shape: block when a text contains
  ``FORBIDDEN``, modify (``REWRITE`` → ``rewritten``) when one contains ``REWRITE``, else allow;
  ``slow`` answers after 2 s; ``garbage`` answers 200 with a body that is no verdict; ``broken``
  answers 500.

Every request body is recorded by path in ``received``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.e2e.masking_upstream import _last_user_text

PIECE = 3


class Services:
    """State and handlers (see the module docstring)."""

    def __init__(self) -> None:
        self.received: dict[str, list[dict[str, Any]]] = {}
        self.answers: list[str] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/moderations", self._moderations)
        app.router.add_post("/guard/{mode}", self._guard)
        return app

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return self.received.get(path, [])

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body: dict[str, Any] = await request.json()
        self.received.setdefault(request.path, []).append(body)
        return body

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if body["model"] == "scripted":
            text = self.answers.pop(0)
        else:
            text = _last_user_text(body["messages"])
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "chatcmpl-guard",
                    "object": "chat.completion",
                    "created": 1,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text, "refusal": None},
                            "finish_reason": "stop",
                            "logprobs": None,
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
                }
            )
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": text[i : i + PIECE]} for i in range(0, len(text), PIECE)]
        for delta in deltas:
            await response.write(_chunk(body["model"], delta, None))
        await response.write(_chunk(body["model"], {}, "stop"))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def _moderations(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        results = []
        for text in body["input"]:
            scores = {
                "harassment": 0.9 if "HATEFUL" in text else 0.01,
                "violence": 0.9 if "VIOLENT" in text else 0.01,
                "self-harm/intent": 0.01,
            }
            results.append(
                {
                    "flagged": any(score > 0.5 for score in scores.values()),
                    "categories": {name: score > 0.5 for name, score in scores.items()},
                    "category_scores": scores,
                }
            )
        return web.json_response({"id": "modr-1", "model": body["model"], "results": results})

    async def _guard(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        mode = request.match_info["mode"]
        if mode == "slow":
            await asyncio.sleep(2)
            return web.json_response({"verdict": "allow"})
        if mode == "garbage":
            return web.Response(text="<html>not a verdict</html>", content_type="text/html")
        if mode == "broken":
            return web.json_response({"error": "down"}, status=500)
        texts: list[str] = body["texts"]
        litellm = mode == "litellm"
        if any("FORBIDDEN" in text for text in texts):
            if litellm:
                return web.json_response(
                    {"action": "BLOCKED", "blocked_reason": "reason-from-service"}
                )
            return web.json_response({"verdict": "block", "reason": "reason-from-service"})
        if any("REWRITE" in text for text in texts):
            replaced = [text.replace("REWRITE", "rewritten") for text in texts]
            if litellm:
                return web.json_response({"action": "GUARDRAIL_INTERVENED", "texts": replaced})
            return web.json_response({"verdict": "modify", "texts": replaced})
        return web.json_response({"action": "NONE"} if litellm else {"verdict": "allow"})


def _chunk(model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    chunk = {
        "id": "chatcmpl-guard",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"
