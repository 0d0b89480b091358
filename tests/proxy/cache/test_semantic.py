"""What the semantic cache embeds and the scope that must match exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.cache.semantic import SemanticConfig, query_text, semantic_scope
from proxy.core.canonical import Call, Principal
from proxy.dialects.anthropic import AnthropicDialect
from proxy.dialects.openai_chat import OpenAIChatDialect

CHAT = OpenAIChatDialect()
CONFIG = SemanticConfig(embedding_model="embed")
BASE: dict[str, Any] = {
    "model": "chat",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
}


def call_of(body: dict[str, Any], principal: Principal | None = None) -> Call:
    call = CHAT.decode(json.dumps(body).encode(), {}, "req-1", 0.0)
    if principal is not None:
        call.principal = principal
    return call


def scope_of(body: dict[str, Any], config: SemanticConfig = CONFIG, **kwargs: Any) -> str:
    return semantic_scope(call_of(body, **kwargs), config, "team")


def with_(**fields: Any) -> dict[str, Any]:
    return {**BASE, **fields}


def conversation(*turns: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in turns]


def test_the_last_user_message_is_embedded() -> None:
    body = with_(
        messages=conversation(
            ("system", "Be brief."), ("user", "first"), ("assistant", "ok"), ("user", "second")
        )
    )
    assert query_text(call_of(body), 1, 1000) == "second"
    assert query_text(call_of(body), 2, 1000) == "first\nsecond"
    assert query_text(call_of(body), 5, 1000) == "first\nsecond"


def test_text_parts_are_joined_and_anything_else_means_no_query() -> None:
    parts = [{"type": "text", "text": "What is "}, {"type": "text", "text": "this?"}]
    assert query_text(call_of(with_(messages=[{"role": "user", "content": parts}])), 1, 99) == (
        "What is this?"
    )
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    body = with_(messages=[{"role": "user", "content": [*parts, image]}])
    assert query_text(call_of(body), 1, 99) is None


@pytest.mark.parametrize(
    "messages",
    [
        conversation(("system", "only a system prompt")),
        conversation(("user", "   ")),
        conversation(("user", "x" * 101)),
    ],
)
def test_no_query_text_without_user_text_or_beyond_the_size_bound(messages: Any) -> None:
    assert query_text(call_of(with_(messages=messages)), 1, 100) is None


def test_the_scope_is_a_sha256_and_stable() -> None:
    scope = scope_of(BASE)
    assert len(scope) == 64
    assert scope == scope_of(json.loads(json.dumps(BASE)))


def test_the_question_itself_is_not_in_the_scope() -> None:
    other = with_(messages=[BASE["messages"][0], {"role": "user", "content": "Something else"}])
    assert scope_of(other) == scope_of(BASE)


def test_tenants_never_share_a_scope() -> None:
    alpha = Principal(key_id="k1", team="alpha")
    alpha_too = Principal(key_id="k2", team="alpha")
    beta = Principal(key_id="k3", team="beta")
    assert scope_of(BASE, principal=alpha) == scope_of(BASE, principal=alpha_too)
    assert scope_of(BASE, principal=alpha) != scope_of(BASE, principal=beta)


@pytest.mark.parametrize(
    ("field", "changed"),
    [
        ("model", with_(model="other")),
        (
            "system",
            with_(messages=[{"role": "system", "content": "Be long."}, BASE["messages"][1]]),
        ),
        (
            "tools",
            with_(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]),
        ),
        ("params", with_(temperature=0.2)),
        ("params", with_(vendor_option=True)),
    ],
)
def test_each_scope_by_field_separates_scopes_only_when_named(
    field: str, changed: dict[str, Any]
) -> None:
    assert scope_of(changed) != scope_of(BASE)
    without = SemanticConfig(
        embedding_model="embed",
        scope_by=tuple(f for f in ("model", "system", "tools", "params") if f != field),  # type: ignore[arg-type]
    )
    assert scope_of(changed, without) == scope_of(BASE, without)


def test_user_is_never_in_the_scope() -> None:
    assert scope_of(with_(user="someone")) == scope_of(BASE)


def test_history_is_in_the_scope_only_when_named() -> None:
    earlier = conversation(("user", "Tell me about Europe."), ("assistant", "Europe is..."))
    longer = with_(messages=[BASE["messages"][0], *earlier, BASE["messages"][1]])
    assert scope_of(longer) == scope_of(BASE)
    history = SemanticConfig(embedding_model="embed", scope_by=("model", "history"))
    assert scope_of(longer, history) != scope_of(BASE, history)


def test_the_embedding_model_separates_scopes() -> None:
    assert scope_of(BASE, SemanticConfig(embedding_model="other-embed")) != scope_of(BASE)


def test_another_dialect_asking_the_same_shares_the_scope() -> None:
    anthropic = AnthropicDialect().decode(
        json.dumps(
            {
                "model": "chat",
                "max_tokens": 100,
                "system": "Be brief.",
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
            }
        ).encode(),
        {},
        "req-2",
        0.0,
    )
    config = SemanticConfig(embedding_model="embed", scope_by=("model", "system", "tools"))
    assert semantic_scope(anthropic, config, "team") == semantic_scope(
        call_of(BASE), config, "team"
    )


def test_numbers_beyond_64_bits_or_a_double_have_a_scope() -> None:
    body = (
        json.dumps(
            with_(
                tools=[
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"maximum": 2**70}},
                    }
                ]
            )
        ).encode()[:-1]
        + b', "top_k": 1e400, "vendor": [-1180591620717411303424]}'
    )
    call = CHAT.decode(body, {}, "req-1", 0.0)
    everything = SemanticConfig(
        embedding_model="embed", scope_by=("model", "system", "tools", "params", "history")
    )
    scope = semantic_scope(call, everything, "team")
    assert len(scope) == 64
    assert scope != scope_of(BASE, everything)
