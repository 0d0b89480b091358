"""proxy/dialects/base.py: the nesting bound every request body passes before it is decoded, and
the shared 400 and effort words the dialects use."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import BadRequest
from proxy.dialects.base import (
    MAX_JSON_DEPTH,
    REASONING_EFFORT,
    bad_request,
    check_json_depth,
    invalid,
)

_TEXT = st.text(alphabet='ab[]{}"\\\n', max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=60,
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@settings(max_examples=300, deadline=None)
@given(value=_JSON, limit=st.integers(min_value=3, max_value=8))
def test_only_bodies_nested_deeper_than_the_limit_are_refused(value: Any, limit: int) -> None:
    body = json.dumps(value).encode()
    if _depth(value) > limit:
        with pytest.raises(BadRequest) as refused:
            check_json_depth(body, limit)
        assert refused.value.code == "invalid_json"
    else:
        check_json_depth(body, limit)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,  # never closed
        b"[[]" * 10_000,  # a staircase: no long run of openers
        json.dumps(_nested(MAX_JSON_DEPTH + 1)).encode(),
        json.dumps([_nested(MAX_JSON_DEPTH - 2)] * 50 + [_nested(MAX_JSON_DEPTH + 1)]).encode(),
    ],
    ids=["unclosed", "staircase", "just-too-deep", "deep-after-many-shallow"],
)
def test_deep_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(BadRequest, match="nest deeper than 128 levels"):
        check_json_depth(body)


def test_brackets_inside_strings_do_not_count() -> None:
    text = '\\"[' * (MAX_JSON_DEPTH * 4) + "{" * MAX_JSON_DEPTH
    body = json.dumps({"messages": [{"content": text}] * 3, "deep": _nested(MAX_JSON_DEPTH - 1)})
    check_json_depth(body.encode())


def test_invalid_names_the_field_in_the_words_of_a_decode_failure() -> None:
    class Body(msgspec.Struct):
        max_tokens: int

    try:
        msgspec.json.decode(b'{"max_tokens": "x"}', type=Body)
    except msgspec.ValidationError as exc:
        decoded = bad_request(exc)
    made = invalid("Expected `int`, got `str`", "max_tokens")
    assert (made.message, made.param, made.status) == (decoded.message, decoded.param, 400)
    assert made.message == "Invalid request: Expected `int`, got `str` at 'max_tokens'"


def test_effort_words_above_high_are_high() -> None:
    assert REASONING_EFFORT == {
        "low": "low",
        "medium": "medium",
        "high": "high",
        "xhigh": "high",
        "max": "high",
    }
