"""proxy/core/redact.py (and its use as the first log processor in proxy/core/logs.py)."""

from __future__ import annotations

import io
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import UpstreamError
from proxy.core.logs import make_logger
from proxy.core.redact import (
    KEY_SHAPES,
    MASK,
    MAX_FIELD_CHARS,
    MAX_MESSAGE_CHARS,
    Redactor,
    sanitise_error,
)

CONFIGURED = "prov-key-0123456789-configured"  # no known key shape: only caught as configured
OPENAI_KEY = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx0123"


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([CONFIGURED, OPENAI_KEY])


# ---------------------------------------------------------------------------------------------
# Redactor.text / Redactor.value
# ---------------------------------------------------------------------------------------------


def test_configured_secret_is_replaced(redactor: Redactor):
    assert (
        redactor.text(f"upstream said: bad key {CONFIGURED}!") == f"upstream said: bad key {MASK}!"
    )


def test_every_occurrence_is_replaced(redactor: Redactor):
    assert redactor.text(f"{CONFIGURED}/{CONFIGURED}") == f"{MASK}/{MASK}"


def test_unconfigured_secret_without_a_key_shape_is_kept():
    assert Redactor().text(CONFIGURED) == CONFIGURED


def test_secrets_that_are_too_short_or_empty_are_ignored():
    redactor = Redactor(["", "abc", "12345"])
    assert redactor.text("abc 12345 plain") == "abc 12345 plain"


def test_a_secret_of_six_characters_is_long_enough_to_be_replaced():
    assert Redactor(["123456"]).text("pin 123456") == "pin [REDACTED]"


def test_longer_secret_wins_over_its_prefix():
    redactor = Redactor(["secret-value", "secret-value-longer"])
    assert redactor.text("x secret-value-longer y") == f"x {MASK} y"


def test_special_characters_in_secrets_are_literal():
    redactor = Redactor(["a.b*c+d?(e)"])
    assert redactor.text("see a.b*c+d?(e) here, not aXbbc") == f"see {MASK} here, not aXbbc"


@pytest.mark.parametrize(
    "key",
    [
        "sk-abcdefghijklmnop1234",
        "sk-proj-abc_DEF-ghi_JKL-mno",
        "sk-ant-api03-abcdefghijklmnopqrstuv",
        "sk-or-v1-0123456789abcdef0123",
        "AIzaSyA1234567890abcdefghijklmnopqrstu",
        "gsk_abcdefghijklmnopqrstuvwx",
        "xai-abcdefghijklmnopqrstuvwx",
        "AKIA" + "ABCDEFGHIJKLMNOP",  # split so that secret scanners do not flag the fixture
    ],
)
def test_key_shapes_are_replaced(key: str):
    assert Redactor().text(f"key={key} end") == f"key={MASK} end"
    assert key not in Redactor().text(f"'{key}'")


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer abc.def-ghi_jkl~mno+pqr/stu==",
        "authorization: bearer 0123456789abcdef",
        "header Bearer  eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
    ],
)
def test_bearer_tokens_are_replaced(text: str):
    token = text.split()[-1]
    redacted = Redactor().text(text)
    assert token not in redacted
    assert MASK in redacted


@pytest.mark.parametrize(("needle", "shape"), KEY_SHAPES, ids=[n for n, _ in KEY_SHAPES])
def test_every_key_shape_holds_its_needle_so_the_quick_check_misses_none(needle, shape):
    @given(text=st.from_regex(shape))
    def check(text: str) -> None:
        match = re.search(shape, text)
        assert match is not None
        assert needle in match.group()
        assert re.search(shape, Redactor().text(text)) is None

    check()


def test_ordinary_text_is_untouched():
    text = "sk- is a prefix; AIza too short; bearer of good news; task-force ok"
    assert Redactor().text(text) == text


def test_value_redacts_nested_structures(redactor: Redactor):
    value = {
        "message": f"failed with {CONFIGURED}",
        "attempts": [{"error": f"401 for {OPENAI_KEY}"}, ("tuple", CONFIGURED)],
        "count": 3,
        "ok": None,
    }
    assert redactor.value(value) == {
        "message": f"failed with {MASK}",
        "attempts": [{"error": f"401 for {MASK}"}, ("tuple", MASK)],
        "count": 3,
        "ok": None,
    }


def test_value_keeps_container_types(redactor: Redactor):
    assert isinstance(redactor.value((CONFIGURED,)), tuple)
    assert isinstance(redactor.value([CONFIGURED]), list)


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "API_KEY",
        "apikey",
        "api-key",
        "Authorization",
        "authorization",
        "x-api-key",
        "X-Goog-Api-Key",
        "password",
        "token",
        "access_token",
        "secret",
    ],
)
def test_sensitive_keys_are_masked_whatever_their_value(key: str):
    redacted = Redactor().value({key: "harmless-looking", "other": "kept", "n": {key: 1}})
    assert redacted == {key: MASK, "other": "kept", "n": {key: MASK}}


def test_processor_redacts_the_event_dict(redactor: Redactor):
    event = {
        "event": f"boom {CONFIGURED}",
        "api_key": "whatever",
        "headers": {"Authorization": f"Bearer {OPENAI_KEY}", "x-trace-id": "t1"},
        "n": 5,
    }
    out = redactor(None, "info", event)
    assert out == {
        "event": f"boom {MASK}",
        "api_key": MASK,
        "headers": {"Authorization": MASK, "x-trace-id": "t1"},
        "n": 5,
    }


MIXED_CASE_KEYS = ["Authorization", "AUTHORIZATION", "API_KEY", "Api_Key", "X-Api-Key", "Token"]


@pytest.mark.parametrize("key", MIXED_CASE_KEYS)
def test_processor_masks_mixed_case_sensitive_keys_top_level_and_nested(key: str):
    # Values that match no key shape and no configured secret: only the key's name can mask them.
    event = {"event": "e", key: "harmless-looking", "nested": {key: "also-harmless"}, "n": 1}
    out = Redactor()(None, "info", event)
    assert out == {"event": "e", key: MASK, "nested": {key: MASK}, "n": 1}


@pytest.mark.parametrize("key", MIXED_CASE_KEYS)
def test_mixed_case_sensitive_fields_never_reach_the_log_stream(key: str):
    stream = io.StringIO()
    logger = make_logger(Redactor(), stream=stream)
    logger.info("request", **{key: "plain-value-1"}, headers={key: "plain-value-2"})
    assert "plain-value" not in stream.getvalue()
    (line,) = log_lines(stream)
    assert line[key] == MASK
    assert line["headers"] == {key: MASK}


def test_keys_that_merely_contain_a_sensitive_word_are_kept():
    event = {"event": "e", "tokens": 12, "Token_count": 3, "secretary": "kept"}
    assert Redactor()(None, "info", dict(event)) == event


# ---------------------------------------------------------------------------------------------
# As the first processor of the JSON logger
# ---------------------------------------------------------------------------------------------


def log_lines(stream: io.StringIO) -> list[dict]:
    lines = [line for line in stream.getvalue().splitlines() if line]
    return [json.loads(line) for line in lines]


@pytest.fixture
def logged() -> tuple:
    stream = io.StringIO()
    return make_logger(Redactor([CONFIGURED, OPENAI_KEY]), stream=stream), stream


def test_log_lines_are_json_with_level_timestamp_event(logged):
    logger, stream = logged
    logger.info("started", port=4000)
    logger.warning("careful")
    lines = log_lines(stream)
    assert [line["event"] for line in lines] == ["started", "careful"]
    assert [line["level"] for line in lines] == ["info", "warning"]
    for line in lines:
        assert isinstance(line["timestamp"], str)
        assert line["timestamp"].endswith("Z")
    assert lines[0]["port"] == 4000


def test_lines_below_the_level_are_dropped():
    stream = io.StringIO()
    logger = make_logger(Redactor(), level="warning", stream=stream)
    logger.info("quiet")
    logger.debug("quieter")
    logger.error("loud")
    assert [line["event"] for line in log_lines(stream)] == ["loud"]


def test_key_inside_a_string_never_reaches_the_stream(logged):
    logger, stream = logged
    logger.info(f"event mentions {CONFIGURED}", detail=f"upstream echoed {OPENAI_KEY}")
    output = stream.getvalue()
    assert CONFIGURED not in output
    assert OPENAI_KEY not in output
    (line,) = log_lines(stream)
    assert line["detail"] == f"upstream echoed {MASK}"


def test_key_inside_a_nested_dict_never_reaches_the_stream(logged):
    logger, stream = logged
    logger.info(
        "request",
        upstream={"headers": {"x-custom": CONFIGURED}, "errors": [f"bad {OPENAI_KEY}"]},
        api_key=CONFIGURED,
    )
    output = stream.getvalue()
    assert CONFIGURED not in output
    assert OPENAI_KEY not in output
    (line,) = log_lines(stream)
    assert line["api_key"] == MASK
    assert line["upstream"] == {"headers": {"x-custom": MASK}, "errors": [f"bad {MASK}"]}


def test_key_inside_an_exception_message_never_reaches_the_stream(logged):
    logger, stream = logged
    try:
        raise RuntimeError(f"upstream rejected key {CONFIGURED} and {OPENAI_KEY}")
    except RuntimeError:
        logger.exception("unhandled_error", request_id="r1")
    output = stream.getvalue()
    assert CONFIGURED not in output
    assert OPENAI_KEY not in output
    (line,) = log_lines(stream)
    assert line["level"] == "error"
    assert line["event"] == "unhandled_error"
    assert "RuntimeError" in line["exception"]
    assert MASK in line["exception"]


def test_key_inside_an_exception_object_value_never_reaches_the_stream(logged):
    # A non-string value (here an exception passed as a field) is rendered with repr(); its
    # text must be redacted like any other.
    logger, stream = logged
    try:
        raise ValueError(f"bad key {OPENAI_KEY}")
    except ValueError as exc:
        logger.error("upstream_failed", error=exc)
    output = stream.getvalue()
    assert OPENAI_KEY not in output
    (line,) = log_lines(stream)
    assert line["event"] == "upstream_failed"


def test_key_inside_a_nested_object_never_reaches_the_stream(logged):
    # Objects inside containers are rendered by the JSON encoder's fallback: redacted too.
    logger, stream = logged
    logger.error("reload_failed", errors=[ValueError(f"bad key {OPENAI_KEY}")])
    output = stream.getvalue()
    assert OPENAI_KEY not in output
    (line,) = log_lines(stream)
    assert line["errors"] == [f"ValueError('bad key {MASK}')"]


def test_a_named_tuple_value_is_redacted_not_an_error(logged):
    import collections

    Pair = collections.namedtuple("Pair", "name key")
    logger, stream = logged
    logger.info("pair", pair=Pair("openai", OPENAI_KEY))
    (line,) = log_lines(stream)
    assert line["pair"] == ["openai", MASK]


def test_sanitise_error_cleans_and_caps_every_text_field_of_an_error() -> None:
    key = "sk-live-0123456789abcdefghij"
    error = UpstreamError(
        f"bad key {key} " + "m" * 5000,
        upstream_status=400,
        code=key + "c" * 5000,
        param=f"messages {key}",
    )
    error.details = {key: [key, {"deeper": key + "d" * 5000}]}  # type: ignore[attr-defined]
    sanitise_error(error, Redactor([key]))
    assert error.message.startswith("bad key [REDACTED] ")
    assert len(error.message) == MAX_MESSAGE_CHARS == 1000  # as documented
    assert error.args == (error.message,)
    assert error.code.startswith("[REDACTED]")
    assert len(error.code) == MAX_FIELD_CHARS == 256
    assert error.param == "messages [REDACTED]"
    assert key not in repr(error.details)  # type: ignore[attr-defined]
    deeper = error.details["[REDACTED]"][1]["deeper"]  # type: ignore[attr-defined]
    assert len(deeper) == MAX_FIELD_CHARS
    assert error.type == "api_error"  # the gateway's own constants are left alone
