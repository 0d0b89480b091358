"""What the Open Responses compliance suite's HTTP checks ask of ``POST /v1/responses``, proven
without the suite (``make compliance`` runs the suite itself; it needs the network).

The checks send ``model: mock/tools`` with: a user message; a system and a user message; a
conversation with an assistant turn; text with an image (a data URL); text with a file
(``input_file`` with ``filename`` and ``file_data``); a function tool; a stream; two turns joined
by ``previous_response_id``; and a forced ``tool_choice`` whose call is answered by a
``function_call_output`` on the next turn. Each must come back ``completed`` with output, as a
response object carrying every field Open Responses' ``ResponseResource`` requires (with the
types it gives them, where they are stricter than OpenAI's) and valid against OpenAI's schema;
a streamed one must be made of valid events and end in such a response. The request bodies here
are written for this test, not taken from the suite.
"""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.dialects.adapters.gateway import post, serve
from tests.proxy.dialects.adapters.responses import stream_payloads
from tests.schemas import validate_in

SPEC = "openai-responses.openapi.json"
MODEL = "mock/tools"
CONFIG = """\
server: {access_log: false}
providers:
  mock: {type: mock}
"""
# Open Responses' ResponseResource: every field it requires (its OpenAPI document, 2026-04-24).
REQUIRED = (
    "id",
    "object",
    "created_at",
    "completed_at",
    "status",
    "incomplete_details",
    "model",
    "previous_response_id",
    "instructions",
    "output",
    "error",
    "tools",
    "tool_choice",
    "truncation",
    "parallel_tool_calls",
    "text",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "temperature",
    "reasoning",
    "usage",
    "max_output_tokens",
    "max_tool_calls",
    "store",
    "background",
    "service_tier",
    "metadata",
    "safety_identifier",
    "prompt_cache_key",
)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string"}},
        "required": ["location"],
    },
}


def png_data_url() -> str:
    """A 1x1 red PNG as a data URL."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
    png += chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def pdf_data_url() -> str:
    """A tiny PDF as a data URL."""
    pdf = b"%PDF-1.1\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF"
    return "data:application/pdf;base64," + base64.b64encode(pdf).decode()


def message(role: str, content: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


SINGLE_TURNS = {
    "a user message": [message("user", "Say hello in three words.")],
    "a system and a user message": [
        message("system", "Answer like a pirate."),
        message("user", "Say hello."),
    ],
    "a conversation with an assistant turn": [
        message("user", "My name is Ada."),
        message("assistant", "Hello Ada!"),
        message("user", "What is my name?"),
    ],
    "text with an image": [
        message(
            "user",
            [
                {"type": "input_text", "text": "What is in this image?"},
                {"type": "input_image", "image_url": png_data_url()},
            ],
        )
    ],
    "text with a file": [
        message(
            "user",
            [
                {"type": "input_text", "text": "What is this file's title?"},
                {"type": "input_file", "filename": "tiny.pdf", "file_data": pdf_data_url()},
            ],
        )
    ],
}


def check_response(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` is a completed response with output, whole for Open Responses and for OpenAI."""
    validate_in(SPEC, "Response", body)
    assert [field for field in REQUIRED if field not in body] == []
    assert (body["status"], body["object"]) == ("completed", "response")
    assert body["output"], "a completed response has output"
    assert isinstance(body["completed_at"], int)
    for number in ("top_p", "temperature", "presence_penalty", "frequency_penalty"):
        assert isinstance(body[number], int | float), f"{number} is a number"
    assert isinstance(body["top_logprobs"], int)
    assert isinstance(body["service_tier"], str)
    assert isinstance(body["background"], bool)
    for item in body["output"]:
        for part in item.get("content", []):
            if part["type"] == "output_text":
                assert part["logprobs"] == [], "output_text carries its logprobs array"
    return body


async def create(url: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await post(url, "/v1/responses", {"model": MODEL, **body})
    assert answer.status == 200, answer.body
    return check_response(answer.json())


@pytest.mark.parametrize("case", sorted(SINGLE_TURNS))
async def test_a_single_turn_completes_with_output(tmp_path: Path, case: str) -> None:
    async with serve(tmp_path, CONFIG) as url:
        body = await create(url, {"input": SINGLE_TURNS[case]})
    assert body["output"][0]["type"] == "message"


async def test_a_function_tool_is_called(tmp_path: Path) -> None:
    async with serve(tmp_path, CONFIG) as url:
        body = await create(
            url, {"input": [message("user", "Weather in Paris?")], "tools": [WEATHER]}
        )
    assert [item["type"] for item in body["output"]] == ["function_call"]
    assert body["tools"][0]["name"] == "get_weather"


async def test_a_stream_is_valid_events_ending_in_the_whole_response(tmp_path: Path) -> None:
    async with serve(tmp_path, CONFIG) as url:
        answer = await post(
            url,
            "/v1/responses",
            {"model": MODEL, "input": [message("user", "Count to five.")], "stream": True},
        )
    assert answer.status == 200
    events = stream_payloads(answer.body)
    assert events[-1]["type"] == "response.completed"
    for event in events:
        if "response" in event:
            assert [field for field in REQUIRED if field not in event["response"]] == []
    check_response(events[-1]["response"])


async def test_previous_response_id_continues_the_conversation(tmp_path: Path) -> None:
    async with serve(tmp_path, CONFIG) as url:
        first = await create(url, {"input": "Remember the word papaya. Reply OK."})
        second = await create(
            url,
            {"input": "Which word did I ask you to remember?", "previous_response_id": first["id"]},
        )
    assert second["previous_response_id"] == first["id"]


async def test_a_forced_call_answered_by_its_output_on_the_next_turn(tmp_path: Path) -> None:
    async with serve(tmp_path, CONFIG) as url:
        first = await create(
            url,
            {
                "input": "Use the weather tool for Paris.",
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "name": "get_weather"},
            },
        )
        assert first["tool_choice"] == {"type": "function", "name": "get_weather"}
        (call,) = [item for item in first["output"] if item["type"] == "function_call"]
        second = await create(
            url,
            {
                "previous_response_id": first["id"],
                "input": [
                    {"type": "function_call_output", "call_id": call["call_id"], "output": "18C"}
                ],
            },
        )
    (answer,) = second["output"]
    assert answer["content"][0]["text"] == "The tool said: 18C"
