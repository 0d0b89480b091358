"""proxy/providers/bedrock/sigv4.py: AWS Signature Version 4.

Table-driven from tests/fixtures/sigv4/*.json: vectors of AWS's published SigV4 test suite
(credentials ``AKIDEXAMPLE``, service ``service``, 2015-08-30) and Bedrock requests whose
expected signatures botocore computed. Then a property: for any request, the signature equals
botocore's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import quote

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.providers.bedrock.sigv4 import Credentials, canonical_request, sign_headers, signing_key

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "sigv4"


def load_fixtures() -> list[Any]:
    cases = [
        pytest.param(json.loads(path.read_text(encoding="utf-8")), id=path.stem)
        for path in sorted(FIXTURES.glob("*.json"))
    ]
    assert cases, f"no fixtures in {FIXTURES}"
    return cases


def parse_time(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def sign_case(case: dict[str, Any]) -> dict[str, str]:
    credentials = case["credentials"]
    request = case["request"]
    return sign_headers(
        request["method"],
        request["url"],
        request["headers"],
        request["body"].encode(),
        credentials=Credentials(
            credentials["access_key_id"],
            credentials["secret_access_key"],
            credentials["session_token"],
        ),
        region=case["region"],
        service=case["service"],
        now=parse_time(case["time"]),
    )


@pytest.mark.parametrize("case", load_fixtures())
def test_signature_vectors(case: dict[str, Any]):
    headers = sign_case(case)
    credentials = case["credentials"]
    scope = f"{case['time'][:8]}/{case['region']}/{case['service']}/aws4_request"
    signed_names = sorted(
        {"host", "x-amz-date", *(name.lower() for name in case["request"]["headers"])}
        | ({"x-amz-security-token"} if credentials["session_token"] else set())
    )
    assert headers["authorization"] == (
        f"AWS4-HMAC-SHA256 Credential={credentials['access_key_id']}/{scope}, "
        f"SignedHeaders={';'.join(signed_names)}, Signature={case['expected']['signature']}"
    )
    assert headers["x-amz-date"] == case["time"]
    if credentials["session_token"]:
        assert headers["x-amz-security-token"] == credentials["session_token"]
    else:
        assert "x-amz-security-token" not in headers


@pytest.mark.parametrize(
    "case", [c for c in load_fixtures() if "canonical_request" in c.values[0]["expected"]]
)
def test_canonical_request_vectors(case: dict[str, Any]):
    request = case["request"]
    method, url = request["method"], request["url"]
    path, _, query = url.removeprefix("https://example.amazonaws.com").partition("?")
    headers = {"host": "example.amazonaws.com", "x-amz-date": case["time"]}
    text, _ = canonical_request(method, path, query, headers, request["body"].encode())
    assert text == case["expected"]["canonical_request"]


def test_signing_key_matches_the_aws_documentation_example():
    # AWS's "Examples of how to derive a signing key" (secret wJalrXUtnFEMI/K7MDENG+bPxRfiCY...).
    key = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_input_headers_are_not_modified_and_are_all_sent():
    headers = {"Content-Type": "application/json", "x-trace": "a  b"}
    signed = sign_headers(
        "POST",
        "https://h.example/p",
        headers,
        b"{}",
        credentials=Credentials("AK", "SK"),
        region="eu-west-1",
        service="bedrock",
        now=datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    assert headers == {"Content-Type": "application/json", "x-trace": "a  b"}
    assert signed["Content-Type"] == "application/json"
    assert signed["x-trace"] == "a  b"  # sent as given; whitespace is normalised only when signed
    assert "SignedHeaders=content-type;host;x-amz-date;x-trace," in signed["authorization"]


def test_signing_time_is_converted_to_utc():
    here = datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    signed = sign_headers(
        "GET",
        "https://h.example/",
        {},
        b"",
        credentials=Credentials("AK", "SK"),
        region="r",
        service="s",
        now=here,
    )
    assert signed["x-amz-date"] == "20240102T030405Z"


def test_path_dot_segments_and_double_slashes_are_normalised():
    text, _ = canonical_request("GET", "/a/./b//../c/", "", {"host": "h"}, b"")
    assert text.split("\n")[1] == "/a/c/"


# ---------------------------------------------------------------------------------------------
# Property: the same signature as botocore for any request
# ---------------------------------------------------------------------------------------------

_SEGMENT = st.text(
    alphabet=st.sampled_from("abcXYZ019-._~:@!$'()*+,;="), min_size=1, max_size=8
) | st.sampled_from(["%3A", "%2F", "%20", "%C3%A9", "v1%3A0"])
_QUERY_TEXT = st.text(alphabet=st.sampled_from("abcXYZ019-._~ /:=+&"), max_size=6)
_HEADER_NAME = st.text(alphabet=st.sampled_from("abcdefgh-"), min_size=1, max_size=8).filter(
    lambda name: name.strip("-") == name
)
_HEADER_VALUE = st.text(
    alphabet=st.sampled_from("abc XYZ019-._~/:;=,\"'"), min_size=1, max_size=12
).filter(lambda value: value.strip() != "")


def _quote(text: str) -> str:
    return quote(text, safe="-_.~")


@settings(max_examples=150, deadline=None)
@given(
    method=st.sampled_from(["GET", "POST", "PUT"]),
    segments=st.lists(_SEGMENT, min_size=1, max_size=4),
    query=st.lists(st.tuples(_QUERY_TEXT, _QUERY_TEXT), max_size=3, unique_by=lambda kv: kv[0]),
    headers=st.dictionaries(_HEADER_NAME, _HEADER_VALUE, max_size=3),
    body=st.binary(max_size=64),
    token=st.none() | st.just("FwoGZXIvYXdzEXAMPLE//token=="),
    port=st.sampled_from([None, 443, 8443]),
)
def test_signature_equals_botocores(method, segments, query, headers, body, token, port):
    host = "bedrock-runtime.eu-central-1.amazonaws.com" + (f":{port}" if port else "")
    url = f"https://{host}/" + "/".join(segments)
    if query:
        url += "?" + "&".join(f"{_quote(k)}={_quote(v)}" for k, v in query)
    now = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    ours = sign_headers(
        method,
        url,
        headers,
        body,
        credentials=Credentials("AKIDEXAMPLE", "secret/KEY+example", token),
        region="eu-central-1",
        service="bedrock",
        now=now,
    )
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    with mock.patch("botocore.auth.get_current_datetime", return_value=now.replace(tzinfo=None)):
        credentials = BotoCredentials("AKIDEXAMPLE", "secret/KEY+example", token)
        SigV4Auth(credentials, "bedrock", "eu-central-1").add_auth(request)
    assert ours["authorization"] == request.headers["Authorization"]
