"""Request log records: metadata from a finished request, trace ids, payload text redacted and
bounded."""

from __future__ import annotations

import json

import pytest

from proxy.core.canonical import Call, Message, Principal, Timings, Usage
from proxy.core.plugin import FinishedRequest
from proxy.core.redact import Redactor
from proxy.request_logs.records import (
    metadata_record,
    payload_text,
    redact_secrets,
    trace_id_of,
)

PROVIDER_KEY = "prov-secret-0123456789"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def finished(call: Call | None, **fields: object) -> FinishedRequest:
    values: dict[str, object] = dict(
        request_id="req-1",
        dialect="openai",
        call=call,
        principal=Principal(key_id="key_a", key_alias="alpha", team="eng"),
        status=200,
        provider="up",
        upstream_model="echo",
        usage=Usage(input=3, output=2),
        error_code=None,
        duration=0.050,
        ended_at=1_800_000_000.0,
        attempts=1,
    )
    values.update(fields)
    return FinishedRequest(**values)  # type: ignore[arg-type]


def test_metadata_splits_the_time_into_upstream_and_overhead() -> None:
    call = Call(
        request_id="req-1",
        dialect="openai",
        model="chat",
        messages=[Message(role="user", content="hi")],
        stream=True,
        client_headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01", "authorization": "x"},
        timings=Timings(start=0.0, upstream_wait=0.030, first_token=0.020),
    )
    call.accounting.cost_nanos = 9000
    record = metadata_record(finished(call), "id-1", "metadata")
    assert record.duration_ms == 50.0
    assert record.upstream_ms == 30.0
    assert record.overhead_ms == 20.0
    assert record.ttft_ms == 20.0
    assert record.trace_id == TRACE
    assert record.cost_nanos == 9000
    assert record.stream is True
    assert (record.input_tokens, record.output_tokens) == (3, 2)
    assert record.request is None
    assert record.response is None
    assert record.key_alias == "alpha"


def test_a_request_whose_body_never_decoded_is_all_overhead() -> None:
    record = metadata_record(finished(None, status=400, usage=None), "id-2", "payloads")
    assert record.overhead_ms == record.duration_ms == 50.0
    assert record.upstream_ms is None
    assert record.model is None
    assert record.input_tokens is None


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"00-{TRACE}-00f067aa0ba902b7-01", TRACE),
        (f" 00-{TRACE.upper()}-00f067aa0ba902b7-00 ", TRACE),
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", None),
        ("garbage", None),
        ("", None),
        (None, None),
    ],
)
def test_trace_ids_come_from_a_valid_traceparent_only(header: str | None, expected: str) -> None:
    assert trace_id_of(header) == expected


def test_every_secret_is_redacted_from_payloads() -> None:
    redactor = Redactor([PROVIDER_KEY])
    value = {
        "messages": [
            {"role": "user", "content": f"my key is {PROVIDER_KEY} and sk-abcdefghijklmnop1234"},
            {"role": "user", "content": "token=Zx9qLm2Vb7Nc4Rt8Yw3Kp6Hd1Gf5Js0A"},
        ],
        "api_key": "anything at all",
    }
    text = json.dumps(redact_secrets(value, redactor))
    assert PROVIDER_KEY not in text
    assert "sk-abcdefghijklmnop1234" not in text
    assert "Zx9qLm2Vb7Nc4Rt8Yw3Kp6Hd1Gf5Js0A" not in text
    assert "anything at all" not in text
    assert text.count("[REDACTED]") == 4


def test_a_payload_is_cut_at_its_bound_and_says_so() -> None:
    redactor = Redactor()
    whole, cut = payload_text({"text": "é" * 10}, redactor, 1000)
    assert json.loads(whole) == {"text": "é" * 10}
    assert cut is False
    short, cut = payload_text({"text": "é" * 1000}, redactor, 101)
    assert cut is True
    assert len(short.encode()) <= 101  # never half a character


def test_payload_text_redacts_in_the_json_and_keeps_it_valid() -> None:
    redactor = Redactor([PROVIDER_KEY])
    value = {
        "messages": [
            {"role": "user", "content": f'key "{PROVIDER_KEY}" and Bearer abcdefgh12345678'},
            {"role": "user", "content": "token=Zx9qLm2Vb7Nc4Rt8Yw3Kp6Hd1Gf5Js0A ok"},
        ]
    }
    text, cut = payload_text(value, redactor, 10_000)
    assert cut is False
    decoded = json.loads(text)
    assert decoded["messages"][0]["content"] == 'key "[REDACTED]" and [REDACTED]'
    assert decoded["messages"][1]["content"] == "token=[REDACTED] ok"


def test_a_secret_that_would_break_the_json_is_redacted_string_by_string() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7" + "x" * 64 + "\n"  # no END line
    value = {"messages": [{"content": pem}, {"content": "after"}]}
    text, _ = payload_text(value, Redactor(), 10_000)
    decoded = json.loads(text)  # still valid JSON
    assert "MIIEowIBAAKCAQEA7" not in text
    assert decoded["messages"][1]["content"] == "after"
