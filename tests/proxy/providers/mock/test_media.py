"""proxy/providers/mock/media.py: the mock's media answers are deterministic, in the vendors'
shapes, and report the units they bill."""

from __future__ import annotations

import base64
import json
from typing import Any

from proxy.core.canonical import Call, MediaFile, MediaOperation, MediaRequest, MediaUnits
from proxy.providers.mock.media import BYTES_PER_SECOND, media_answer
from proxy.providers.mock.provider import MockConfig, MockProvider


def _call(
    operation: MediaOperation,
    fields: dict[str, Any],
    files: list[MediaFile] | None = None,
    worst: MediaUnits | None = None,
) -> Call:
    media = MediaRequest(operation, fields, files or [], worst=worst)
    return Call(request_id="r1", dialect="d", model="m", messages=[], media=media)


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


def test_a_streamed_transcript_and_streamed_images_are_event_streams() -> None:
    audio = MediaFile("file", "a.wav", "audio/wav", b"x" * 100)
    answer = media_answer(_call("transcription", {"stream": "true"}, [audio]), "whisper")
    assert answer.content_type == "text/event-stream"
    events = [json.loads(line[6:]) for line in answer.body.decode().splitlines() if line]
    assert events[-1] == {
        "type": "transcript.text.done",
        "text": "mock transcript of a.wav (100 bytes)",
    }
    assert "".join(event["delta"] for event in events[:-1]) == events[-1]["text"]
    images = media_answer(_call("image_edit", {"prompt": "p", "stream": True}), "gpt-image-1")
    [event] = [json.loads(line[6:]) for line in images.body.decode().splitlines() if line]
    assert event["type"] == "image_edit.completed"
    assert base64.b64decode(event["b64_json"]).startswith(b"\x89PNG")
