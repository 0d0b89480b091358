"""proxy/providers/presets.py: OpenAI-compatible vendors behind ``type: openai`` + ``preset``.

Table-driven from tests/fixtures/presets/*.json (a preset, a canonical call and the upstream
model in; the URL and JSON body the OpenAI provider sends out), then the preset table's
invariants, readiness, and one call through the gateway to an OpenAI-speaking fake configured
with a preset.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, get_args

import msgspec
import openai
import pytest
import yaml

from proxy.core.canonical import Call, Message, Params
from proxy.providers.openai.provider import OpenAIConfig, OpenAIProvider
from proxy.providers.presets import PRESETS, PresetName, adapt, rejected_fields
from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.proxy.providers.fakes.base import answer
from tests.proxy.providers.fakes.openai import OpenAIFake

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "presets"
KEY = "sk-preset-test-key-0123456789"
LOCAL = {"vllm", "ollama", "lmstudio"}


def load_fixtures() -> list[Any]:
    cases = [
        pytest.param(json.loads(path.read_text(encoding="utf-8")), id=path.stem)
        for path in sorted(FIXTURES.glob("*.json"))
    ]
    assert cases, f"no fixtures in {FIXTURES}"
    return cases


def call_from(spec: dict[str, Any]) -> Call:
    return Call(
        request_id="req-1",
        dialect="openai",
        model=spec["model"],
        messages=msgspec.convert(spec["messages"], list[Message]),
        stream=spec.get("stream", False),
        include_usage=spec.get("include_usage", False),
        params=msgspec.convert(spec.get("params", {}), Params),
        extra={k: msgspec.Raw(json.dumps(v).encode()) for k, v in spec.get("extra", {}).items()},
    )


def provider(preset: str | None, **config: Any) -> OpenAIProvider:
    return OpenAIProvider("p", OpenAIConfig(preset=preset, **config))  # type: ignore[arg-type]


@pytest.mark.parametrize("fixture", load_fixtures())
def test_request_adaptation(fixture: dict[str, Any]):
    p = provider(fixture["preset"], api_key=KEY, base_url=fixture.get("base_url"))
    request = p.build_request(call_from(fixture["call"]), fixture["upstream_model"])
    assert request.url == fixture["expected_url"]
    assert json.loads(request.body) == fixture["expected_body"]
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_every_preset_name_has_a_preset():
    assert set(get_args(PresetName)) == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_table_invariants(name: str):
    preset = PRESETS[name]
    if name in LOCAL:
        assert preset.base_url.startswith("http://localhost:")
        assert preset.key_required is False
    else:
        assert preset.base_url.startswith("https://")
        assert preset.key_required is True
    assert not preset.base_url.endswith("/")
    request = provider(name, api_key=KEY).build_request(
        Call(request_id="r", dialect="openai", model="m", messages=[]), "m"
    )
    assert request.url == preset.base_url + "/chat/completions"


@pytest.mark.parametrize(
    ("preset", "api_key", "ready"),
    [
        (None, None, True),  # plain openai type: an absent key means a keyless server
        ("openai", None, False),
        ("groq", None, False),
        ("groq", "", False),
        ("groq", KEY, True),
        ("ollama", None, True),
        ("vllm", "", False),
        ("lmstudio", "lm-studio", True),
    ],
)
def test_readiness(preset, api_key, ready):
    assert provider(preset, api_key=api_key).ready is ready


def test_unknown_preset_is_a_config_error():
    with pytest.raises(msgspec.ValidationError, match="preset"):
        msgspec.convert({"type": "openai", "preset": "acme"}, OpenAIConfig)


def test_rejected_fields_depend_on_the_model():
    xai = PRESETS["xai"]
    assert rejected_fields(xai, "grok-2-latest") == frozenset()
    assert rejected_fields(xai, "grok-4-0709") == {"stop", "presence_penalty", "frequency_penalty"}
    assert rejected_fields(PRESETS["groq"], "any") == {"logprobs", "logit_bias", "top_logprobs"}


def test_adapt_leaves_the_call_alone_and_reuses_unchanged_parts():
    call = call_from(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x", "name": "n"}],
            "params": {"seed": 1, "user": "u"},
            "extra": {"x": 1},
        }
    )
    before = msgspec.json.encode(call.messages), msgspec.json.encode(call.params), dict(call.extra)
    adapted = adapt(PRESETS["mistral"], call, "mistral-small")
    assert adapted.messages[0].name is msgspec.UNSET
    assert bytes(adapted.extra["random_seed"]) == b"1"
    after = msgspec.json.encode(call.messages), msgspec.json.encode(call.params), dict(call.extra)
    assert before == after
    untouched = adapt(PRESETS["groq"], call_from({"model": "m", "messages": []}), "llama")
    assert untouched.extra == {}
    plain = call_from({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    same = adapt(PRESETS["groq"], plain, "llama")
    assert same.messages is plain.messages
    assert same.params is plain.params
    assert same.extra is plain.extra


def test_a_renamed_field_given_raw_is_renamed_too():
    call = call_from({"model": "m", "messages": [], "extra": {"seed": 5}})
    body = json.loads(provider("mistral", api_key=KEY).build_request(call, "m").body)
    assert body == {"model": "m", "messages": [], "random_seed": 5}


def test_openrouter_cost_is_kept_as_the_authoritative_cost():
    body = {
        "id": "gen-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "cost": 0.00042},
    }
    response = provider("openrouter", api_key=KEY).parse_response(json.dumps(body).encode(), "m")
    assert response.usage is not None
    assert response.usage.cost_usd == pytest.approx(0.00042)


# ---------------------------------------------------------------------------------------------
# Through the gateway: a preset pointed at an OpenAI-speaking fake
# ---------------------------------------------------------------------------------------------


async def test_a_mistral_preset_through_the_gateway(tmp_path: Path):
    fake = OpenAIFake()
    upstream, upstream_url = await start_site(fake.app())
    config = {
        "server": {"access_log": False},
        "providers": {
            "mistral": {
                "type": "openai",
                "preset": "mistral",
                "base_url": f"{upstream_url}/v1",
                "api_key": KEY,
            }
        },
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    gateway, url = await start_site(create_app(path, log_stream=io.StringIO()))
    try:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        async with client:
            stream = await client.chat.completions.create(
                model="mistral/text",
                messages=[{"role": "user", "content": "Hi", "name": "dana"}],
                stream=True,
                seed=11,
                user="end-user-1",
                stream_options={"include_usage": True},
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == answer("openai")
        (received,) = fake.requests
        assert received.headers["Authorization"] == f"Bearer {KEY}"
        assert received.body == {
            "model": "text",
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": True,
            "random_seed": 11,
        }
    finally:
        await gateway.cleanup()
        await upstream.cleanup()
