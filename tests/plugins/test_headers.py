"""plugins/headers.py: which client headers reach the upstream, and which never do."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from plugins.headers import HeadersOptions, HeadersPlugin
from proxy.core.canonical import Call, Message
from proxy.core.plugin import compose
from proxy.core.reply import Choice, Reply, Response
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider

PROVIDER_KEY = "sk-provider-real-0123456789abcdef"


def make_call(client_headers=None, upstream_headers=None) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content="hi")],
        client_headers=client_headers if client_headers is not None else {},
        upstream_headers=upstream_headers if upstream_headers is not None else {},
    )


def client_headers(**pairs: str) -> CIMultiDictProxy:
    """Client headers as aiohttp gives them (case-insensitive); ``_`` in names become ``-``."""
    return CIMultiDictProxy(CIMultiDict({k.replace("_", "-"): v for k, v in pairs.items()}))


async def run(plugin: HeadersPlugin, call: Call) -> dict[str, str]:
    """Run ``call`` through ``plugin`` and return the upstream headers the upstream received."""
    seen: dict[str, str] = {}

    async def upstream(call: Call) -> Reply:
        seen.update(call.upstream_headers)
        message = Message(role="assistant", content="ok")
        response = Response(id="x", model="m", choices=[Choice(index=0, message=message)])
        return Reply(provider="p", model="m", response=response)

    await compose([plugin], upstream)(call)
    return seen


def plugin(**options) -> HeadersPlugin:
    return HeadersPlugin(HeadersOptions(**options))


async def test_forward_copies_only_allowlisted_headers():
    call = make_call(client_headers(x_trace_id="t-1", x_other="no", user_agent="sdk"))
    assert await run(plugin(forward=("x-trace-id",)), call) == {"x-trace-id": "t-1"}


@pytest.mark.parametrize(
    ("configured", "sent"),
    [("X-Trace-Id", "x-trace-id"), ("x-trace-id", "X-TRACE-ID"), ("X-TRACE-ID", "X-Trace-Id")],
)
async def test_forward_is_case_insensitive(configured: str, sent: str):
    call = make_call(CIMultiDictProxy(CIMultiDict({sent: "t-1"})))
    assert await run(plugin(forward=(configured,)), call) == {"x-trace-id": "t-1"}


async def test_forward_skips_headers_the_client_did_not_send():
    call = make_call(client_headers(x_a="1"))
    assert await run(plugin(forward=("x-a", "x-b")), call) == {"x-a": "1"}


async def test_add_sets_fixed_headers():
    call = make_call(client_headers(x_team="client-value"))
    headers = await run(plugin(add={"X-Team": "platform", "x-env": "prod"}), call)
    assert headers == {"x-team": "platform", "x-env": "prod"}


async def test_add_wins_over_a_forwarded_value():
    call = make_call(client_headers(x_team="client-value"))
    headers = await run(plugin(forward=("x-team",), add={"x-team": "fixed"}), call)
    assert headers == {"x-team": "fixed"}


async def test_remove_drops_headers_an_earlier_plugin_set():
    call = make_call(upstream_headers={"x-internal": "secret", "x-keep": "1"})
    assert await run(plugin(remove=("X-Internal",)), call) == {"x-keep": "1"}


async def test_remove_is_case_insensitive():
    # Header names are case-insensitive (RFC 9110): an earlier plugin's capitalised name must
    # not slip past ``remove``.
    call = make_call(upstream_headers={"X-Internal": "secret", "x-keep": "1"})
    headers = await run(plugin(remove=("x-internal",)), call)
    assert {name.lower() for name in headers} == {"x-keep"}


async def test_remove_of_an_absent_header_is_fine():
    assert await run(plugin(remove=("x-nope",)), make_call()) == {}


async def test_no_options_changes_nothing():
    call = make_call(client_headers(x_a="1"), {"x-b": "2"})
    assert await run(plugin(), call) == {"x-b": "2"}


@pytest.mark.parametrize(
    "name",
    [
        "authorization",
        "Authorization",
        "x-api-key",
        "X-Api-Key",
        "api-key",
        "x-goog-api-key",
        "proxy-authorization",
        "cookie",
        "host",
        "content-length",
        "content-type",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "x-amz-security-token",
        "X-Amz-Date",
        "x-amz-content-sha256",
        "content-encoding",
    ],
)
@pytest.mark.parametrize("option", ["forward", "add"])
def test_credentials_and_hop_by_hop_headers_are_refused(name: str, option: str):
    options = {"forward": (name,)} if option == "forward" else {"add": {name: "v"}}
    with pytest.raises(ValueError, match=name.lower()):
        plugin(**options)


def test_refusal_lists_every_refused_header():
    with pytest.raises(ValueError, match="cannot be sent upstream") as info:
        plugin(forward=("Authorization", "x-ok"), add={"Cookie": "c"})
    assert "authorization" in str(info.value)
    assert "cookie" in str(info.value)
    assert "x-ok" not in str(info.value)


def test_options_forbid_unknown_fields():
    import msgspec

    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"forwrd": ["x"]}, HeadersOptions)


# ---------------------------------------------------------------------------------------------
# The provider's own headers always win
# ---------------------------------------------------------------------------------------------


def provider(**config) -> OpenAIProvider:
    config.setdefault("api_key", PROVIDER_KEY)
    return OpenAIProvider("openai", OpenAIConfig(**config))


def sent_values(headers: dict[str, str], name: str) -> list[str]:
    """Every value aiohttp would send for ``name`` (header names are case-insensitive)."""
    return CIMultiDict(headers).getall(name, [])


async def test_forwarded_and_added_headers_reach_the_upstream_request():
    call = make_call(client_headers(x_trace_id="t-1"))
    headers = await run(plugin(forward=("x-trace-id",), add={"x-team": "a"}), call)
    request = provider().build_request(make_call(upstream_headers=headers), "gpt")
    assert request.headers["x-trace-id"] == "t-1"
    assert request.headers["x-team"] == "a"
    assert sent_values(request.headers, "authorization") == [f"Bearer {PROVIDER_KEY}"]


@pytest.mark.parametrize("name", ["authorization", "Authorization", "AUTHORIZATION"])
def test_a_plugin_set_authorization_cannot_override_the_provider_key(name: str):
    # A plugin other than ``headers`` (which refuses it) may still put a credential in
    # ``upstream_headers``: the provider's key must be the only one the upstream receives.
    call = make_call(upstream_headers={name: "Bearer sk-client-attacker-000000000000"})
    request = provider().build_request(call, "gpt")
    assert sent_values(request.headers, "authorization") == [f"Bearer {PROVIDER_KEY}"]


@pytest.mark.parametrize("name", ["content-type", "Content-Type"])
def test_a_plugin_set_content_type_cannot_override_the_provider(name: str):
    call = make_call(upstream_headers={name: "text/plain"})
    request = provider().build_request(call, "gpt")
    assert sent_values(request.headers, "content-type") == ["application/json"]


def test_configured_provider_headers_win_over_plugin_headers():
    call = make_call(upstream_headers={"x-org": "from-plugin", "x-extra": "kept"})
    request = provider(headers={"x-org": "from-config"}).build_request(call, "gpt")
    assert sent_values(request.headers, "x-org") == ["from-config"]
    assert request.headers["x-extra"] == "kept"
