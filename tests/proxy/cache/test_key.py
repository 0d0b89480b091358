"""Cache keys: scope, what changes an answer, what does not, key order, other dialects."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from proxy.cache.key import PREFIX, cache_key, scope_of
from proxy.core.canonical import ANONYMOUS, Call, GatewayOptions, Principal, WeightedTarget
from proxy.dialects.anthropic import AnthropicDialect
from proxy.dialects.openai_chat import OpenAIChatDialect

CHAT = OpenAIChatDialect()
BASE: dict[str, Any] = {
    "model": "chat",
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
}


def chat_call(body: dict[str, Any], headers: dict[str, str] | None = None) -> Call:
    return CHAT.decode(json.dumps(body).encode(), headers or {}, "req-1", 0.0)


def key_of(body: dict[str, Any], scope: str = "team") -> str:
    return cache_key(chat_call(body), scope)  # type: ignore[arg-type]


def test_a_key_is_the_prefix_and_a_256_bit_blake2b_digest() -> None:
    key = key_of(BASE)
    assert key.startswith(PREFIX)
    assert len(key) == len(PREFIX) + 64
    int(key[len(PREFIX) :], 16)  # hex digits


def test_json_key_order_does_not_change_the_key() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": {"type": "object", "properties": {"a": {}, "b": {}}},
            },
        }
    ]
    one = {**BASE, "temperature": 0.5, "tools": tools, "top_k": {"x": 1, "y": 2}}
    reordered = json.loads(json.dumps(one))
    reordered = dict(reversed(list(reordered.items())))
    parameters = reordered["tools"][0]["function"]["parameters"]
    parameters["properties"] = dict(reversed(list(parameters["properties"].items())))
    reordered["tools"][0]["function"] = dict(
        reversed(list(reordered["tools"][0]["function"].items()))
    )
    reordered["top_k"] = {"y": 2, "x": 1}
    assert json.dumps(one) != json.dumps(reordered)
    assert key_of(one) == key_of(reordered)


@pytest.mark.parametrize(
    "change",
    [
        {"stream": True},
        {"stream": True, "stream_options": {"include_usage": True}},
        {"user": "someone-else"},
        {"fallbacks": ["other"]},
    ],
)
def test_what_does_not_change_the_answer_is_not_in_the_key(change: dict[str, Any]) -> None:
    assert key_of({**BASE, **change}) == key_of(BASE)


def test_request_ids_headers_and_metadata_are_not_in_the_key() -> None:
    first = chat_call(BASE)
    second = CHAT.decode(json.dumps(BASE).encode(), {"x-trace-id": "t"}, "req-2", 5.0)
    second.options = GatewayOptions(metadata={"thread": {"id": "th"}}, timeout=3.0)
    assert cache_key(first, "team") == cache_key(second, "team")


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other"},
        {"messages": [{"role": "user", "content": "Hi"}]},
        {"messages": [*BASE["messages"], {"role": "assistant", "content": "Hello"}]},
        {"temperature": 0.3},
        {"top_p": 0.5},
        {"max_tokens": 10},
        {"max_completion_tokens": 10},
        {"stop": ["\n"]},
        {"seed": 7},
        {"n": 2},
        {"presence_penalty": 0.5},
        {"frequency_penalty": 0.5},
        {"logit_bias": {"50256": -100}},
        {"logprobs": True},
        {"reasoning_effort": "high"},
        {"response_format": {"type": "json_object"}},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "required"},
        {"parallel_tool_calls": False},
        {"top_k": 3},
    ],
)
def test_everything_that_changes_an_answer_is_in_the_key(change: dict[str, Any]) -> None:
    assert key_of({**BASE, **change}) != key_of(BASE)


def test_routing_choices_a_client_made_are_in_the_key() -> None:
    plain = chat_call(BASE)
    pinned = chat_call(BASE)
    pinned.options = GatewayOptions(provider="openai")
    balanced = chat_call(BASE)
    balanced.options = GatewayOptions(load_balancer=[WeightedTarget(model="a")])
    keys = {cache_key(c, "team") for c in (plain, pinned, balanced)}
    assert len(keys) == 3


def test_scopes_separate_teams_keys_and_nobody() -> None:
    team_a_key_1 = Principal(key_id="k1", team="a")
    team_a_key_2 = Principal(key_id="k2", team="a")
    team_b = Principal(key_id="k3", team="b")
    teamless_1 = Principal(key_id="k4")
    teamless_2 = Principal(key_id="k5")

    def key(principal: Principal, scope: str) -> str:
        call = chat_call(BASE)
        call.principal = principal
        return cache_key(call, scope)  # type: ignore[arg-type]

    assert key(team_a_key_1, "team") == key(team_a_key_2, "team")
    assert key(team_a_key_1, "team") != key(team_b, "team")
    assert key(teamless_1, "team") != key(teamless_2, "team"), "teamless keys never share"
    assert key(team_a_key_1, "key") != key(team_a_key_2, "key")
    assert key(team_a_key_1, "global") == key(team_b, "global") == key(ANONYMOUS, "global")
    assert key(ANONYMOUS, "team") == key(ANONYMOUS, "key")
    assert key(ANONYMOUS, "team") != key(ANONYMOUS, "global")


def test_a_team_named_like_a_key_id_is_still_another_scope() -> None:
    assert scope_of(Principal(team="x"), "team") != scope_of(Principal(key_id="x"), "team")


def test_the_same_request_in_another_dialect_hits_the_same_entry() -> None:
    anthropic = AnthropicDialect().decode(
        json.dumps(
            {
                "model": "chat",
                "max_tokens": 64,
                "system": "Be brief.",
                "messages": [{"role": "user", "content": "Hi"}],
                "metadata": {"user_id": "u-1"},
            }
        ).encode(),
        {},
        "req-3",
        0.0,
    )
    assert cache_key(anthropic, "team") == key_of({**BASE, "max_tokens": 64})


def test_the_key_does_not_change_the_call() -> None:
    call = chat_call({**BASE, "user": "u"})
    before = msgspec.json.encode(call.params)
    cache_key(call, "team")
    assert msgspec.json.encode(call.params) == before


def raw_chat_call(body: bytes) -> Call:
    return CHAT.decode(body, {}, "req-1", 0.0)


HEAD = b'{"model": "chat", "messages": [{"role": "user", "content": "Hi"}]'


@pytest.mark.parametrize(
    "fields",
    [
        b'"top_k": 1180591620717411303424',  # 2**70, passed through
        b'"top_k": -1180591620717411303424',
        b'"top_k": 1e400',  # beyond a double, passed through as written
        b'"top_k": [1e400, -1e400, 1e-400]',
        b'"tool_choice": {"type": "function", "n": 1180591620717411303424}',
        b'"response_format": {"type": "json_schema", "json_schema": {"schema": '
        b'{"type": "integer", "maximum": 1180591620717411303424}}}',
        b'"tools": [{"type": "function", "function": {"name": "f", "parameters": '
        b'{"type": "integer", "minimum": -1180591620717411303424}}}]',
        b'"seed": 9223372036854775807',  # int64's largest: a seed
        b'"seed": -9223372036854775808',
    ],
)
def test_numbers_beyond_64_bits_or_a_double_have_a_key(fields: bytes) -> None:
    key = cache_key(raw_chat_call(HEAD + b", " + fields + b"}"), "team")
    assert key.startswith(PREFIX)
    assert key != cache_key(raw_chat_call(HEAD + b"}"), "team")


def test_huge_numbers_are_told_apart_and_from_the_strings_that_spell_them() -> None:
    def key(value: bytes) -> str:
        return cache_key(raw_chat_call(HEAD + b', "top_k": ' + value + b"}"), "team")

    assert key(b"1e400") == key(b"1E+400"), "the same number, spelled alike"
    spelled = [b"1e400", b"-1e400", b"2e400", b'"1E+400"', b"1180591620717411303424"]
    assert len({key(value) for value in spelled}) == len(spelled)
    assert key(b"1180591620717411303424") != key(b"1180591620717411303425")
