"""A real media upstream on 127.0.0.1: OpenAI's audio, image and moderation routes (also behind
Azure's deployment URLs) and Cohere's ``/v2/rerank``.

Every answer is derived from what was sent, so that a test can tell the gateway relayed the
request (the model it names, the fields, the file bytes) and the answer (audio bytes, JSON)
unchanged. Each request is recorded: its path and query, headers, JSON body or form fields, and
files as ``(field, filename, content type, bytes)``. The model ``fail-<status>`` fails with that
status and an error message that echoes the key the upstream was sent (as some upstreams do).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from aiohttp import BodyPartReader, web

TRANSCRIPT_SECONDS = 7


class Recorded:
    """One request the fake upstream received."""

    def __init__(self, path: str, headers: dict[str, str]) -> None:
        self.path = path
        self.headers = headers
        self.fields: dict[str, Any] = {}
        self.files: list[tuple[str, str, str, bytes]] = []


def fake_audio(text: str) -> bytes:
    """The audio bytes the fake answers for ``text``."""
    return b"ID3-fake-audio-" + hashlib.sha256(text.encode()).digest()


def fake_png(prompt: str) -> str:
    """The base64 image the fake answers for ``prompt``."""
    return base64.b64encode(b"\x89PNG-fake-" + prompt.encode()).decode()


class FakeMedia:
    """State and handlers of the fake upstream."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []

    def app(self) -> web.Application:
        app = web.Application()
        for prefix in ("/v1", "/openai/deployments/{deployment}"):
            app.router.add_post(f"{prefix}/audio/speech", self.speech)
            app.router.add_post(f"{prefix}/audio/transcriptions", self.transcription)
            app.router.add_post(f"{prefix}/audio/translations", self.transcription)
            app.router.add_post(f"{prefix}/images/generations", self.images)
            app.router.add_post(f"{prefix}/images/edits", self.images)
            app.router.add_post(f"{prefix}/moderations", self.moderation)
        app.router.add_post("/v2/rerank", self.rerank)
        return app

    async def _record(self, request: web.Request) -> Recorded:
        recorded = Recorded(request.path_qs, dict(request.headers))
        if request.content_type == "multipart/form-data":
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                assert isinstance(part, BodyPartReader)
                data = await part.read()
                if part.filename is not None:
                    kind = part.headers.get("content-type", "")
                    recorded.files.append((part.name or "", part.filename, kind, bytes(data)))
                    continue
                value = data.decode()
                given = recorded.fields.get(part.name or "")
                if given is None:
                    recorded.fields[part.name or ""] = value
                else:
                    recorded.fields[part.name or ""] = [
                        *(given if isinstance(given, list) else [given]),
                        value,
                    ]
        else:
            recorded.fields = await request.json()
        self.requests.append(recorded)
        return recorded

    def _failure(self, recorded: Recorded) -> web.Response | None:
        model = str(recorded.fields.get("model", ""))
        if not model.startswith("fail-"):
            return None
        key = recorded.headers.get("Authorization", recorded.headers.get("api-key", ""))
        body = {"error": {"message": f"bad things for {key}", "type": "server_error"}}
        return web.json_response(body, status=int(model.removeprefix("fail-")))

    async def speech(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        failed = self._failure(recorded)
        if failed is not None:
            return failed
        kind = "audio/wav" if recorded.fields.get("response_format") == "wav" else "audio/mpeg"
        return web.Response(body=fake_audio(recorded.fields["input"]), content_type=kind)

    async def transcription(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        failed = self._failure(recorded)
        if failed is not None:
            return failed
        _, filename, _, data = recorded.files[0]
        text = f"heard {filename}: {len(data)} bytes"
        answer_format = recorded.fields.get("response_format", "json")
        if answer_format == "text":
            return web.Response(text=text)
        if answer_format == "srt":
            return web.Response(
                text=f"1\n00:00:00,000 --> 00:00:0{TRANSCRIPT_SECONDS},250\n{text}\n"
            )
        answer: dict[str, Any] = {"text": text}
        if "transcriptions" in request.path:
            answer["usage"] = {"type": "duration", "seconds": TRANSCRIPT_SECONDS}
        return web.json_response(answer)

    async def images(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        failed = self._failure(recorded)
        if failed is not None:
            return failed
        count = int(recorded.fields.get("n", 1))
        prompt = recorded.fields["prompt"]
        data = [{"b64_json": fake_png(f"{prompt}#{index}")} for index in range(count)]
        return web.json_response({"created": 1_700_000_000, "data": data})

    async def moderation(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        categories = CATEGORIES
        result = {
            "flagged": False,
            "categories": dict.fromkeys(categories, False),
            "category_scores": dict.fromkeys(categories, 0.0001),
            "category_applied_input_types": {name: ["text"] for name in categories},
        }
        return web.json_response(
            {"id": "modr-fake", "model": recorded.fields["model"], "results": [result]}
        )

    async def rerank(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        documents = recorded.fields["documents"]
        results = [
            {"index": index, "relevance_score": round(1 - index / len(documents), 4)}
            for index in range(len(documents))
        ][: recorded.fields.get("top_n") or len(documents)]
        return web.json_response(
            {
                "id": "rerank-fake",
                "results": results,
                "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 3}},
            }
        )


CATEGORIES = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
