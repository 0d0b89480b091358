"""A real embeddings upstream on 127.0.0.1 speaking three vendors' wire formats.

- OpenAI-compatible ``POST /v1/embeddings`` (and Azure's
  ``/openai/deployments/{deployment}/embeddings``): one vector per input; the model
  ``b64-model`` answers in base64, ``fail-<status>`` fails with that status and an error body
  that echoes the key it was sent (as some upstreams do).
- Gemini ``POST /v1beta/models/{model}:batchEmbedContents``.
- Bedrock ``POST /model/{id}/invoke`` for Titan (one text per request) and Cohere Embed.

A vector is :func:`vector_for` of its text (or token list): deterministic, so tests can check
exactly which vector came back for which input and in which order. Every request body, path and
header set is recorded.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from aiohttp import web


def vector_for(item: Any, dimensions: int | None = None) -> list[float]:
    """The fake vector of one input: its length, its first character code, then 0.5s."""
    text = item if isinstance(item, str) else " ".join(str(token) for token in item)
    size = dimensions or 4
    return [float(len(text)), float(ord(text[0])), *([0.5] * (size - 2))][:size]


class FakeEmbeddings:
    """State and handlers of the fake upstream."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self.openai)
        app.router.add_post("/openai/deployments/{deployment}/embeddings", self.openai)
        app.router.add_post("/v1beta/models/{action}", self.gemini)
        app.router.add_post("/model/{model}/invoke", self.bedrock)
        return app

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = await request.json()
        self.requests.append(body)
        self.paths.append(request.path_qs)
        self.headers.append(dict(request.headers))
        return body

    async def openai(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        model = body["model"]
        if model.startswith("fail-"):
            key = request.headers.get("authorization", "")
            return web.json_response(
                {"error": {"message": f"bad things for {key}", "type": "server_error"}},
                status=int(model.removeprefix("fail-")),
            )
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if inputs and isinstance(inputs[0], int):
            inputs = [inputs]
        data = []
        for index, item in enumerate(inputs):
            vector: Any = vector_for(item, body.get("dimensions"))
            if model == "b64-model":
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        data.reverse()  # the index, not the order, says which input a vector is for
        tokens = sum(len(str(item).split()) for item in inputs)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": f"{model}-2024",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def gemini(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        embeddings = [
            {
                "values": vector_for(
                    one["content"]["parts"][0]["text"], one.get("outputDimensionality")
                )
            }
            for one in body["requests"]
        ]
        return web.json_response({"embeddings": embeddings})

    async def bedrock(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        if "inputText" in body:
            text = body["inputText"]
            return web.json_response(
                {
                    "embedding": vector_for(text, body.get("dimensions")),
                    "inputTextTokenCount": len(text.split()),
                }
            )
        vectors = [vector_for(text) for text in body["texts"]]
        return web.json_response(
            {"id": "x", "embeddings": vectors, "texts": body["texts"], "response_type": "f"}
        )
