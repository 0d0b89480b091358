"""A real media upstream on 127.0.0.1: OpenAI's audio, image and moderation routes (also behind
Azure's deployment URLs) and Cohere's ``/v2/rerank``.

Every answer is derived from what was sent, so that a test can tell the gateway relayed the
request (the model it names, the fields, the file bytes) and the answer (audio bytes, JSON)
unchanged. Each request is recorded: its path and query, headers, JSON body or form fields, and
files as ``(field, filename, content type, bytes)``. The model ``fail-<status>`` fails with that
status and an error message that echoes the key the upstream was sent (as some upstreams do).

Streamed answers come as OpenAI streams them, a piece per write: speech's audio in two pieces
(or, with ``stream_format: sse``, two ``speech.audio.delta`` events and ``speech.audio.done``),
a transcription with ``stream`` as a ``transcript.text.delta`` a word and
``transcript.text.done`` with token usage, images with ``stream`` as ``partial_images`` partial
events and a completed event per image (``image_edit.*`` for edits). While :attr:`FakeMedia.hold`
is set to an unset event, a stream waits on it before its last piece, so a test can see what
reached the client while the upstream had not finished (:attr:`FakeMedia.finished` lists the
paths of streams that sent their last piece, :attr:`FakeMedia.dropped` those whose reader went
away first). The model ``drop-<anything>`` sends its first piece, then drops the connection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import io
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web

from proxy.server.app import create_app
from tests.e2e.conftest import start_site

TRANSCRIPT_SECONDS = 7
STREAMED_TOKENS = (40, 9)
"""The input and output tokens a streamed transcription reports."""
IMAGE_SIZE, IMAGE_QUALITY = "1024x1024", "high"
"""What the streamed images' events say they are."""


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
        self.hold: asyncio.Event | None = None
        self.finished: list[str] = []
        self.dropped: list[str] = []

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
        audio = fake_audio(recorded.fields["input"])
        halves = [audio[: len(audio) // 2], audio[len(audio) // 2 :]]
        if recorded.fields.get("stream_format") == "sse":
            tokens = {"input_tokens": 5, "output_tokens": 20, "total_tokens": 25}
            events = [
                *(
                    {"type": "speech.audio.delta", "audio": base64.b64encode(half).decode()}
                    for half in halves
                ),
                {"type": "speech.audio.done", "usage": tokens},
            ]
            return await self._stream(request, recorded, "text/event-stream", _frames(events))
        kind = "audio/wav" if recorded.fields.get("response_format") == "wav" else "audio/mpeg"
        return await self._stream(request, recorded, kind, halves)

    async def _stream(
        self, request: web.Request, recorded: Recorded, content_type: str, pieces: list[bytes]
    ) -> web.StreamResponse:
        """``pieces`` written one at a time (see the module docstring)."""
        response = web.StreamResponse(headers={"content-type": content_type})
        await response.prepare(request)
        try:
            for index, piece in enumerate(pieces):
                if index and str(recorded.fields.get("model", "")).startswith("drop-"):
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if index == len(pieces) - 1 and self.hold is not None:
                    await self.hold.wait()
                await response.write(piece)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.dropped.append(request.path)
            raise
        self.finished.append(request.path)
        return response

    async def transcription(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        failed = self._failure(recorded)
        if failed is not None:
            return failed
        _, filename, _, data = recorded.files[0]
        text = f"heard {filename}: {len(data)} bytes"
        if recorded.fields.get("stream") == "true":
            words = text.split(" ")
            heard, said = STREAMED_TOKENS
            usage = {
                "type": "tokens",
                "input_tokens": heard,
                "output_tokens": said,
                "total_tokens": heard + said,
            }
            events = [
                *(
                    {"type": "transcript.text.delta", "delta": word if not index else f" {word}"}
                    for index, word in enumerate(words)
                ),
                {"type": "transcript.text.done", "text": text, "usage": usage},
            ]
            return await self._stream(request, recorded, "text/event-stream", _frames(events))
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

    async def images(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        failed = self._failure(recorded)
        if failed is not None:
            return failed
        count = int(recorded.fields.get("n", 1))
        prompt = recorded.fields["prompt"]
        if recorded.fields.get("stream") in (True, "true"):
            kind = "image_edit" if request.path.endswith("/edits") else "image_generation"
            partials = int(recorded.fields.get("partial_images") or 0)
            events: list[dict[str, Any]] = []
            for index in range(count):
                image = fake_png(f"{prompt}#{index}")
                events.extend(
                    {**_image_event(f"{kind}.partial_image", image), "partial_image_index": step}
                    for step in range(partials)
                )
                usage = {
                    "input_tokens": 10,
                    "output_tokens": 100,
                    "total_tokens": 110,
                    "input_tokens_details": {"text_tokens": 10, "image_tokens": 0},
                }
                events.append({**_image_event(f"{kind}.completed", image), "usage": usage})
            return await self._stream(request, recorded, "text/event-stream", _frames(events))
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


@contextlib.asynccontextmanager
async def media_gateway(
    tmp_path: Path, config_text: Callable[[Path, str], str]
) -> AsyncIterator[tuple[str, FakeMedia, io.StringIO]]:
    """A gateway serving ``config_text(tmp_path, upstream URL)`` in front of a fake media
    upstream: the gateway's URL, the fake, and the gateway's log stream. A stream the fake
    still holds is let go before both stop."""
    fake = FakeMedia()
    upstream_runner, upstream_url = await start_site(fake.app())
    config = tmp_path / "gateway.yaml"
    config.write_text(config_text(tmp_path, upstream_url))
    logs = io.StringIO()
    runner, url = await start_site(create_app(config, log_stream=logs))
    try:
        yield url, fake, logs
    finally:
        if fake.hold is not None:
            fake.hold.set()
        await runner.cleanup()
        await upstream_runner.cleanup()


def _frames(events: list[dict[str, Any]]) -> list[bytes]:
    """One SSE frame an event."""
    return [f"data: {json.dumps(event)}\n\n".encode() for event in events]


def _image_event(kind: str, image: str) -> dict[str, Any]:
    return {
        "type": kind,
        "b64_json": image,
        "created_at": 1_700_000_000,
        "size": IMAGE_SIZE,
        "quality": IMAGE_QUALITY,
        "background": "opaque",
        "output_format": "png",
    }


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
