"""proxy/providers/mock/media.py: the mock's media answers are deterministic, in the vendors'
shapes, and report the units they bill."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from proxy.core.canonical import (
    Call,
    MediaFile,
    MediaOperation,
    MediaRequest,
    MediaUnits,
    Usage,
)
from proxy.core.errors import UpstreamUnavailable
from proxy.core.reply import MediaAnswer, MediaStream
from proxy.providers.mock.media import BYTES_PER_SECOND, media_answer
from proxy.providers.mock.provider import MockConfig, MockProvider


def _call(
    operation: MediaOperation,
    fields: dict[str, Any],
    files: list[MediaFile] | None = None,
    worst: MediaUnits | None = None,
    *,
    stream: bool = False,
) -> Call:
    media = MediaRequest(operation, fields, files or [], worst=worst)
    return Call(request_id="r1", dialect="d", model="m", messages=[], media=media, stream=stream)


def test_speech_is_the_same_bytes_for_the_same_text() -> None:
    call = _call("speech", {"input": "hello", "voice": "alloy", "response_format": "opus"})
    first, second = media_answer(call, "tts"), media_answer(call, "tts")
    assert first.body == second.body
    assert first.body.startswith(b"crossway-mock-audio:opus:")
    assert first.content_type == "audio/opus"
    assert first.usage is not None
    assert first.usage.media == MediaUnits(characters=5)
    other = media_answer(_call("speech", {"input": "bye", "voice": "alloy"}), "tts")
    assert other.body != first.body


def test_a_transcript_of_audio_other_than_wav_is_timed_by_its_size() -> None:
    audio = MediaFile("file", "a.mp3", "audio/mpeg", b"x" * (BYTES_PER_SECOND * 2))
    answer = media_answer(_call("transcription", {}, [audio]), "whisper")
    assert json.loads(answer.body) == {
        "text": f"mock transcript of a.mp3 ({BYTES_PER_SECOND * 2} bytes)",
        "usage": {"type": "duration", "seconds": 2},
    }
    assert answer.usage is not None
    assert answer.usage.media == MediaUnits(audio_seconds=2.0)


def test_images_as_data_urls_and_base64() -> None:
    fields = {"prompt": "sun", "n": "2", "response_format": "url"}
    answer = media_answer(_call("image_generation", fields, worst=MediaUnits(images=2)), "dall")
    urls = [item["url"] for item in json.loads(answer.body)["data"]]
    assert len(urls) == 2
    assert all(url.startswith("data:image/png;base64,") for url in urls)
    b64 = media_answer(_call("image_generation", {"prompt": "sun"}), "dall")
    [item] = json.loads(b64.body)["data"]
    assert base64.b64decode(item["b64_json"]).startswith(b"\x89PNG")


def test_moderation_flags_the_categories_named() -> None:
    answer = media_answer(_call("moderation", {"input": ["fine", "pure hate"]}), "omni")
    results = json.loads(answer.body)["results"]
    assert [result["flagged"] for result in results] == [False, True]
    assert results[1]["categories"]["hate"] is True
    assert results[1]["categories"]["violence"] is False


def test_rerank_scores_by_shared_words() -> None:
    fields = {
        "query": "red apple",
        "documents": ["green pear", "red apple pie", {"text": "a red car"}],
        "top_n": 2,
        "return_documents": True,
    }
    answer = json.loads(media_answer(_call("rerank", fields), "ranker").body)
    assert answer["results"] == [
        {"index": 1, "relevance_score": 1.0, "document": {"text": "red apple pie"}},
        {"index": 2, "relevance_score": 0.5, "document": {"text": "a red car"}},
    ]
    assert answer["meta"]["billed_units"] == {"search_units": 1}


async def test_the_provider_serves_every_operation_under_its_faults() -> None:
    provider = MockProvider("mock", MockConfig(faults=True))
    assert "rerank" in provider.media_operations
    answer = await provider.media(_call("moderation", {"input": "x"}), "omni")
    assert json.loads(answer.body)["model"] == "omni"


async def _pieces(
    answer: MediaAnswer | MediaStream, call: Call
) -> tuple[list[bytes], Usage | None]:
    """The streamed ``answer``'s pieces to ``call``, in order, and the usage its last chunk
    carries."""
    assert isinstance(answer, MediaStream)
    chunks = [chunk async for chunk in answer.pieces]
    # The first carries the request's worst case, what a stream left early is charged
    media = call.media
    assert media is not None
    assert chunks[0].usage == (None if media.worst is None else Usage(media=media.worst))
    assert all(chunk.usage is None for chunk in chunks[1:-1])
    assert chunks[-1].media == b""
    return [chunk.media or b"" for chunk in chunks[:-1]], chunks[-1].usage


def _events(pieces: list[bytes]) -> list[dict[str, Any]]:
    """One event a piece: each piece is exactly one ``data:`` frame."""
    assert all(piece.startswith(b"data: ") and piece.endswith(b"\n\n") for piece in pieces)
    return [json.loads(piece[6:]) for piece in pieces]


async def test_streamed_speech_is_the_whole_answers_bytes_in_pieces() -> None:
    fields = {"input": "hello", "voice": "alloy"}
    whole = media_answer(_call("speech", fields), "tts")
    assert isinstance(whole, MediaAnswer)
    call = _call("speech", fields, stream=True)
    streamed = media_answer(call, "tts")
    assert isinstance(streamed, MediaStream)
    assert streamed.content_type == "audio/mpeg"
    pieces, usage = await _pieces(streamed, call)
    assert len(pieces) == 2
    assert b"".join(pieces) == whole.body
    assert usage == Usage(media=MediaUnits(characters=5))


async def test_speech_as_events_deltas_then_done_with_tokens() -> None:
    fields = {"input": "hello there", "voice": "alloy", "stream_format": "sse"}
    call = _call("speech", fields, stream=True)
    answer = media_answer(call, "tts")
    assert answer.content_type == "text/event-stream"
    pieces, usage = await _pieces(answer, call)
    events = _events(pieces)
    assert [event["type"] for event in events] == [
        "speech.audio.delta",
        "speech.audio.delta",
        "speech.audio.done",
    ]
    audio = b"".join(base64.b64decode(event["audio"]) for event in events[:2])
    assert audio.startswith(b"crossway-mock-audio:mp3:")
    assert events[-1]["usage"] == {"input_tokens": 3, "output_tokens": 0, "total_tokens": 3}
    assert usage == Usage(input=3, media=MediaUnits(characters=11))


async def test_a_streamed_transcript_is_a_delta_a_word_then_done_with_tokens() -> None:
    audio = MediaFile("file", "a.wav", "audio/wav", b"x" * 100)
    call = _call("transcription", {"stream": "true"}, [audio], stream=True)
    pieces, usage = await _pieces(media_answer(call, "whisper"), call)
    events = _events(pieces)
    text = "mock transcript of a.wav (100 bytes)"
    assert [event["delta"] for event in events[:-1]] == text.split(" ")[:1] + [
        f" {word}" for word in text.split(" ")[1:]
    ]
    done = events[-1]
    assert done["type"] == "transcript.text.done"
    assert done["text"] == text
    assert done["usage"]["type"] == "tokens"
    assert done["usage"]["output_tokens"] == len(events) - 1
    assert usage is not None
    assert (usage.input, usage.output) == (done["usage"]["input_tokens"], len(events) - 1)


async def test_streamed_images_send_their_partial_images_then_each_completed() -> None:
    fields = {"prompt": "p", "n": 2, "stream": True, "partial_images": 2}
    call = _call("image_generation", fields, worst=MediaUnits(images=2), stream=True)
    pieces, usage = await _pieces(media_answer(call, "gpt-image-1"), call)
    events = _events(pieces)
    partial, completed = "image_generation.partial_image", "image_generation.completed"
    assert [event["type"] for event in events] == [partial, partial, completed] * 2
    assert [event.get("partial_image_index") for event in events] == [0, 1, None] * 2
    assert base64.b64decode(events[2]["b64_json"]).startswith(b"\x89PNG")
    assert events[2]["b64_json"] != events[5]["b64_json"]  # two images
    assert usage is not None
    assert usage.media is not None
    assert usage.media.images == 2


async def test_a_streamed_image_edit_names_its_events_for_edits() -> None:
    call = _call("image_edit", {"prompt": "p", "stream": "true"}, stream=True)
    pieces, _ = await _pieces(media_answer(call, "gpt-image-1"), call)
    [event] = _events(pieces)
    assert event["type"] == "image_edit.completed"


async def test_a_streamed_answer_is_cut_after_n_pieces_by_a_cut_model() -> None:
    provider = MockProvider("mock", MockConfig(faults=True))
    call = _call("speech", {"input": "hello", "voice": "a", "stream_format": "sse"}, stream=True)
    answer = await provider.media(call, "cut-1")
    assert isinstance(answer, MediaStream)
    pieces = answer.pieces
    first = await anext(pieces)
    assert first.media is not None
    assert first.media.startswith(b"data: ")
    with pytest.raises(UpstreamUnavailable):
        await anext(pieces)
    whole = _call("speech", {"input": "hello", "voice": "a"})
    with pytest.raises(UpstreamUnavailable):
        await provider.media(whole, "cut-1")
