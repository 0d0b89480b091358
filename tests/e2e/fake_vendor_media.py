"""A real Gemini and Bedrock media upstream on 127.0.0.1: Imagen's ``models/{model}:predict``,
Gemini TTS's ``models/{model}:generateContent`` (audio out), the Bedrock agent runtime's
``/rerank`` and ``/model/{model}/invoke`` with Amazon's image models' body.

Like the real services it checks credentials — Gemini's ``x-goog-api-key`` (400
``API_KEY_INVALID`` otherwise), Bedrock's SigV4 signature, recomputed with botocore (403
``InvalidSignatureException`` otherwise) — and answers from what was sent, so that a test can
tell the gateway's translation both ways: images whose bytes name the prompt, PCM whose length
follows the text, rerank scores that are the share of the query's words a document holds. Every
request is recorded (path, headers, JSON body). The prompt ``filtered`` makes Imagen remove
every image (``raiFilteredReason``) and Amazon's image model answer an ``error``.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from aiohttp import web

from tests.proxy.providers.fakes.bedrock import signature_is_valid

GEMINI_KEY = "AIzaSyFakeGeminiMediaKey0123456789"
PCM_BYTES_PER_CHARACTER = 480  # 10 ms of 24 kHz 16-bit mono audio a character
_WORD = re.compile(r"\w+")


def image_bytes(prompt: str, index: int) -> bytes:
    """The image the fake makes for ``prompt`` (its ``index``-th)."""
    return f"\x89PNG-fake-{index}-{prompt}".encode()


class Recorded:
    """One request the fake upstream received."""

    def __init__(self, path: str, headers: dict[str, str], body: Any) -> None:
        self.path = path
        self.headers = headers
        self.body = body


class FakeVendorMedia:
    """State and handlers of the fake upstream."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1beta/models/{action}", self.gemini)
        app.router.add_post("/rerank", self.rerank)
        app.router.add_post("/model/{model}/invoke", self.invoke)
        return app

    async def _record(self, request: web.Request) -> tuple[bytes, Any]:
        raw = await request.read()
        body = json.loads(raw)
        self.requests.append(Recorded(request.path, dict(request.headers), body))
        return raw, body

    async def gemini(self, request: web.Request) -> web.Response:
        _, body = await self._record(request)
        if request.headers.get("x-goog-api-key") != GEMINI_KEY:
            error = {
                "code": 400,
                "message": "API key not valid. Please pass a valid API key.",
                "status": "INVALID_ARGUMENT",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                             "reason": "API_KEY_INVALID"}],
            }  # fmt: skip
            return web.json_response({"error": error}, status=400)
        action = request.match_info["action"]
        if action.endswith(":predict"):
            return self._imagen(body)
        if action.endswith(":generateContent"):
            return self._speech(body)
        return web.json_response({"error": {"code": 404, "message": "no such method"}}, status=404)

    def _imagen(self, body: dict[str, Any]) -> web.Response:
        prompt = body["instances"][0]["prompt"]
        count = body["parameters"].get("sampleCount", 4)
        if prompt == "filtered":
            reason = "Your current safety filter threshold filtered out the generated image."
            return web.json_response({"predictions": [{"raiFilteredReason": reason}]})
        predictions = [
            {
                "mimeType": "image/png",
                "bytesBase64Encoded": base64.b64encode(image_bytes(prompt, i)).decode(),
            }
            for i in range(count)
        ]
        return web.json_response({"predictions": predictions})

    def _speech(self, body: dict[str, Any]) -> web.Response:
        text = body["contents"][0]["parts"][0]["text"]
        pcm = bytes(range(256)) * (len(text) * PCM_BYTES_PER_CHARACTER // 256 + 1)
        pcm = pcm[: len(text) * PCM_BYTES_PER_CHARACTER]
        half = len(pcm) // 2 // 2 * 2  # two parts, as the service may send
        parts = [
            {"inlineData": {"mimeType": "audio/L16;codec=pcm;rate=24000",
                            "data": base64.b64encode(piece).decode()}}
            for piece in (pcm[:half], pcm[half:])
        ]  # fmt: skip
        return web.json_response(
            {
                "candidates": [
                    {"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}
                ],
                "usageMetadata": {
                    "promptTokenCount": len(text.split()),
                    "candidatesTokenCount": len(pcm) // 960,  # 25 audio tokens a second
                    "totalTokenCount": len(text.split()) + len(pcm) // 960,
                },
                "modelVersion": "gemini-tts-fake",
            }
        )

    async def rerank(self, request: web.Request) -> web.Response:
        raw, body = await self._record(request)
        if not signature_is_valid(request, raw):
            return _aws_error(403, "InvalidSignatureException", "The signature is invalid.")
        query = {w.lower() for w in _WORD.findall(body["queries"][0]["textQuery"]["text"])}
        scored = []
        for index, source in enumerate(body["sources"]):
            document = source["inlineDocumentSource"]
            text = (
                document["textDocument"]["text"]
                if document["type"] == "TEXT"
                else json.dumps(document["jsonDocument"])
            )
            words = {w.lower() for w in _WORD.findall(text)}
            scored.append((-(len(query & words) / len(query)), index))
        scored.sort()
        wanted = body["rerankingConfiguration"]["bedrockRerankingConfiguration"]["numberOfResults"]
        results = [{"index": index, "relevanceScore": -score} for score, index in scored[:wanted]]
        return web.json_response({"results": results})

    async def invoke(self, request: web.Request) -> web.Response:
        raw, body = await self._record(request)
        if not signature_is_valid(request, raw):
            return _aws_error(403, "InvalidSignatureException", "The signature is invalid.")
        if body.get("taskType") != "TEXT_IMAGE":
            return _aws_error(400, "ValidationException", "Malformed input request.")
        prompt = body["textToImageParams"]["text"]
        if prompt == "filtered":
            return web.json_response(
                {"images": [], "error": "This request has been blocked by our content filters."}
            )
        count = body["imageGenerationConfig"].get("numberOfImages", 1)
        images = [base64.b64encode(image_bytes(prompt, i)).decode() for i in range(count)]
        return web.json_response({"images": images, "error": None})


def _aws_error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(
        {"message": message}, status=status, headers={"x-amzn-ErrorType": kind}
    )
