"""A webhook service's answers, in the gateway's shape and LiteLLM's, and what is not one."""

from __future__ import annotations

import json

from proxy.core.canonical import Call, Message, Principal
from proxy.guardrails.webhook import _finding, _request


def test_both_shapes_of_verdicts() -> None:
    assert _finding(b'{"verdict": "allow"}', 1).flagged is False
    assert _finding(b'{"action": "NONE"}', 1) == _finding(b'{"verdict": "allow"}', 1)
    blocked = _finding(b'{"verdict": "block", "reason": "r"}', 1)
    assert blocked.flagged
    assert blocked.reason == "r"
    assert _finding(b'{"action": "BLOCKED", "blocked_reason": "r"}', 1) == blocked
    assert _finding(b'{"verdict": "modify", "texts": ["a", "b"]}', 2).replacement == ["a", "b"]
    litellm = _finding(b'{"action": "GUARDRAIL_INTERVENED", "texts": ["x"]}', 1)
    assert litellm.replacement == ["x"]


def test_what_is_not_a_verdict_fails() -> None:
    for body in (
        b"<html>",
        b"{}",
        b'{"verdict": "maybe"}',
        b'{"action": "BLOCKED", "texts": 3}',
        b'{"verdict": "modify", "texts": ["only one"]}',
        b'{"action": "GUARDRAIL_INTERVENED"}',
    ):
        assert _finding(body, 2).failed, body


def test_the_request_carries_both_shapes() -> None:
    principal = Principal(key_id="k", key_alias="bot", team="support", user="u")
    call = Call(
        request_id="req-1",
        dialect="openai",
        model="gpt",
        messages=[Message(role="user", content="hi")],
        principal=principal,
    )
    body = json.loads(json.dumps(_request("house", ["hi"], call, "output")))
    assert body["check"] == "house"
    assert body["phase"] == "output"
    assert body["texts"] == ["hi"]
    assert (body["model"], body["key_alias"], body["team"]) == ("gpt", "bot", "support")
    assert body["input_type"] == "response"
    assert body["litellm_call_id"] == "req-1"
    assert body["request_data"] == {
        "user_api_key_alias": "bot",
        "user_api_key_team_id": "support",
        "user_api_key_user_id": "u",
    }
