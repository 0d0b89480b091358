"""LiteLLM's response headers, from what a reply says about itself."""

from __future__ import annotations

from proxy.core.reply import Reply
from proxy.http.compat_headers import add_litellm_headers


def test_a_first_try_answer() -> None:
    reply = Reply(provider="up", model="gpt-4o", headers={"x-crossway-cost-usd": "0.000245"})
    add_litellm_headers(reply)
    assert reply.headers["x-litellm-response-cost"] == "0.000245"
    assert reply.headers["x-litellm-model-id"] == "up/gpt-4o"
    assert reply.headers["x-litellm-attempted-retries"] == "0"
    assert reply.headers["x-litellm-attempted-fallbacks"] == "0"


def test_retries_and_a_fallback() -> None:
    reply = Reply(provider="b", model="m", attempts=4, headers={"x-crossway-fallback": "other"})
    add_litellm_headers(reply)
    assert "x-litellm-response-cost" not in reply.headers
    assert reply.headers["x-litellm-attempted-fallbacks"] == "1"
    assert reply.headers["x-litellm-attempted-retries"] == "2"


def test_a_reply_without_an_upstream_call_and_one_after_many_retries() -> None:
    cached = Reply(provider="up", model="m", attempts=0)  # a cache hit made no call
    add_litellm_headers(cached)
    assert cached.headers["x-litellm-attempted-retries"] == "0"
    persistent = Reply(provider="up", model="m", attempts=13)
    add_litellm_headers(persistent)
    assert persistent.headers["x-litellm-attempted-retries"] == "12"
