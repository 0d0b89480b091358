"""proxy/governance/ledger/records.py: the record's end user comes from the request (OpenAI
``user``, orq ``identity.id``) before the key's own user, and is None when nothing names one; long
names are bounded."""

from __future__ import annotations

import time

import pytest

from proxy.core.canonical import Call, GatewayOptions, MediaUnits, Message, Params, Principal, Usage
from proxy.core.plugin import FinishedRequest
from proxy.governance.ledger.records import billed_media, spend_record


def finished(call: Call) -> FinishedRequest:
    return FinishedRequest(
        request_id="r", dialect="openai", call=call, principal=call.principal, status=200,
        provider="p", upstream_model="m", usage=None, error_code=None, duration=0.0015,
        ended_at=time.time(), attempts=1,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("user", "metadata", "key_user", "recorded"),
    [
        ("ann", None, "svc", "ann"),
        (None, {"identity": {"id": "c-1"}}, "svc", "c-1"),
        (None, {"thread": {"id": "t"}}, "svc", "svc"),
        (None, None, "svc", "svc"),
        (None, None, None, None),
        ("", None, None, None),
        ("x" * 300, None, None, "x" * 256),
    ],
)
def test_the_end_user_is_the_one_the_request_names_else_the_keys(
    user: str | None, metadata: dict | None, key_user: str | None, recorded: str | None
) -> None:
    call = Call(
        request_id="r",
        dialect="openai",
        model="alias",
        messages=[Message("user", "hi")],
        params=Params(user=user),
        options=GatewayOptions(metadata=metadata),
    )
    call.principal = Principal(key_id="k", user=key_user)
    record = spend_record(finished(call), "id-1")
    assert record.user == recorded
    assert (record.key_id, record.model, record.duration_ms) == ("k", "alias", 1.5)


@pytest.mark.parametrize(
    ("units", "recorded"),
    [
        (MediaUnits(characters=42), {"characters": 42}),
        (MediaUnits(audio_seconds=2.5), {"audio_seconds": 2.5}),
        (
            MediaUnits(images=2, image_size="1024x1024", image_quality="hd"),
            {"images": 2, "image_size": "1024x1024", "image_quality": "hd"},
        ),
        (MediaUnits(images=1), {"images": 1}),
        (MediaUnits(search_units=3), {"search_units": 3}),
        (MediaUnits(image_size="1024x1024"), None),  # no image billed: its size is not kept
        (MediaUnits(images=1, image_size="x" * 100), {"images": 1, "image_size": "x" * 32}),
    ],
)
def test_a_media_call_records_the_units_it_was_billed(
    units: MediaUnits, recorded: dict | None
) -> None:
    call = Call(request_id="r", dialect="openai_speech", model="tts", messages=[])
    request = finished(call)
    request.usage = Usage(media=units)
    record = spend_record(request, "id-1")
    assert billed_media(record) == recorded


def test_a_request_without_media_units_records_none() -> None:
    call = Call(request_id="r", dialect="openai", model="m", messages=[Message("user", "hi")])
    request = finished(call)
    request.usage = Usage(input=3, output=2)
    record = spend_record(request, "id-1")
    assert (record.audio_seconds, record.characters, record.images, record.search_units) == (
        (None,) * 4
    )
    assert billed_media(record) is None
