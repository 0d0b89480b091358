"""The guardrails plugin through the HTTP server: the openai and anthropic SDKs, whole and
streamed, every dialect, each built-in check, a webhook service and a moderation endpoint (real
aiohttp servers, :mod:`tests.e2e.guardrails_services`), per-team and per-key policies (YAML and
the admin API), requests that add checks or try to drop one, and no matched text in any error
body, log line or metric."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from proxy.server.app import create_app
from tests.e2e.conftest import start_site
from tests.e2e.guardrails_services import Services
from tests.proxy.dialects.adapters import load_adapters
from tests.proxy.dialects.adapters.gateway import post

MASTER = "master-key-" + "0123456789abcdef" * 2
PLAIN = "sk-cw-plain-" + "abcdefghij" * 4
AGENT = "sk-cw-agent-" + "klmnopqrst" * 4
STRICT = "sk-cw-strict-" + "uvwxyzabcd" * 4
UPSTREAM_KEY = "prov-key-upstream-0123456789abcdefXYZ"
SECRET = "sk-proj-" + "abc123DEF456ghi789JKL012mno345"  # split: secret scanners flag keys
EMAIL = "jane.doe@example.com"
FILLER = "lorem ipsum dolor sit amet " * 12  # longer than the stream window: released early
CHAT = "/v1/chat/completions"
ADAPTERS = load_adapters()


def config(tmp_path: Path, up: str) -> str:
    return f"""
server: {{access_log: true}}
database: {{url: "sqlite:///{tmp_path}/data/crossway.db"}}
auth:
  master_key: "{MASTER}"
  cache_ttl: 0
  keys:
    - {{key: "{PLAIN}", alias: plain}}
    - {{key: "{AGENT}", alias: agent, team: support}}
    - {{key: "{STRICT}", alias: strict}}
  teams:
    support: {{}}
providers:
  openai:
    type: openai
    base_url: "{up}/v1"
    api_key: "{UPSTREAM_KEY}"
    timeouts: {{first_byte: 5, idle: 5, total: 15}}
guardrails:
  no-secrets: {{type: secrets, on: input, action: block}}
  competitors: {{type: keywords, words: [acme, globex], on: output, action: block}}
  mentions: {{type: keywords, words: [nightjar], on: both, action: warn}}
  no-pii: {{type: pii, entities: [email, credit_card], on: input}}
  ticket: {{type: regex, pattern: "TICKET-[0-9]+", mode: require, on: input}}
  no-internal: {{type: regex, pattern: "INTERNAL-[0-9]{{4}}", on: output}}
  small: {{type: max_tokens_in, max: 200}}
  schema: {{type: json_schema, on: output, action: retry}}
  schema-end: {{type: json_schema, on: output, action: block, stream: end}}
  support-mod: {{type: moderation, provider: openai, model: omni-moderation-latest,
                 categories: [harassment, self-harm], threshold: 0.5, on: both, action: block}}
  house: {{type: webhook, url: "{up}/guard/native", timeout_ms: 2000, on: both}}
  house-litellm: {{type: webhook, url: "{up}/guard/litellm", on: both}}
  slow-open: {{type: webhook, url: "{up}/guard/slow", timeout_ms: 100, on_error: allow}}
  slow-closed: {{type: webhook, url: "{up}/guard/slow", timeout_ms: 100, on_error: block}}
  garbage-open: {{type: webhook, url: "{up}/guard/garbage", on_error: allow}}
  garbage-closed: {{type: webhook, url: "{up}/guard/garbage", on_error: block}}
  broken-closed: {{type: webhook, url: "{up}/guard/broken"}}
plugins:
  - auth: {{}}
  - guardrails:
      default: [no-secrets, competitors, mentions]
      teams: {{support: [support-mod]}}
      keys: {{strict: [small, no-pii]}}
  - cost: {{}}
"""


class Gateway:
    def __init__(self, url: str, services: Services, logs: io.StringIO) -> None:
        self.url = url
        self.services = services
        self.logs = logs

    def openai(self, key: str = PLAIN, **headers: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=f"{self.url}/v1", api_key=key, max_retries=0, default_headers=headers
        )

    def anthropic(self, key: str = PLAIN) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.url, api_key=key, max_retries=0)

    def upstream_calls(self) -> list[dict[str, Any]]:
        return self.services.bodies(CHAT)

    async def get(self, path: str, key: str = MASTER) -> Any:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, headers={"authorization": f"Bearer {key}"}) as answer,
        ):
            text = await answer.text()
            return json.loads(text) if path.startswith("/admin") else text

    async def admin(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, self.url + path, json=body, headers={"authorization": f"Bearer {MASTER}"}
            ) as answer,
        ):
            return answer.status, await answer.json()


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    services = Services()
    services_runner, up = await start_site(services.app())
    path = tmp_path / "gateway.yaml"
    path.write_text(config(tmp_path, up))
    logs = io.StringIO()
    runner, url = await start_site(create_app(path, log_stream=logs))
    try:
        yield Gateway(url, services, logs)
    finally:
        await runner.cleanup()
        await services_runner.cleanup()


def user(text: str) -> Any:
    return [{"role": "user", "content": text}]


async def openai_stream(client: openai.AsyncOpenAI, text: str, **kwargs: Any) -> tuple[str, str]:
    """The streamed text, and the in-band error's message ("" when none)."""
    pieces: list[str] = []
    try:
        stream = await client.chat.completions.create(
            model="openai/echo", messages=user(text), stream=True, **kwargs
        )
        async for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
    except openai.APIError as error:
        return "".join(pieces), error.message
    return "".join(pieces), ""


def assert_blocked(error: openai.APIStatusError | anthropic.APIStatusError, check: str) -> None:
    assert error.status_code == 400
    body: Any = error.body
    if isinstance(body, dict) and "error" in body:
        body = body["error"]
    assert f"guardrail {check!r}" in str(body)
    if isinstance(error, openai.APIStatusError):
        assert error.code == "content_policy_violation"


# -- the openai and anthropic SDKs -----------------------------------------------------------


async def test_openai_sdk_input_block_sends_nothing_upstream(gateway: Gateway) -> None:
    client = gateway.openai()
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="openai/echo", messages=user(f"my key is {SECRET}"), stream=stream
            )
        assert_blocked(caught.value, "no-secrets")
        assert SECRET not in json.dumps(caught.value.body)
    assert gateway.upstream_calls() == []


async def test_openai_sdk_output_block_whole_and_a_word_split_across_chunks(
    gateway: Gateway,
) -> None:
    client = gateway.openai()
    prompt = FILLER + "we love acme products"
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="openai/echo", messages=user(prompt))
    assert_blocked(caught.value, "competitors")
    assert "acme" not in json.dumps(caught.value.body)
    # Streamed, "acme" arrives as "a" + "cme": what went out before the error is filler only.
    text, error = await openai_stream(client, prompt)
    assert "guardrail 'competitors'" in error
    assert FILLER.startswith(text)


async def test_openai_sdk_passes_whole_and_streamed(gateway: Gateway) -> None:
    client = gateway.openai()
    whole = await client.chat.completions.create(
        model="openai/echo", messages=user("hello there, friend")
    )
    assert whole.choices[0].message.content == "hello there, friend"
    text, error = await openai_stream(client, FILLER + "and goodbye")
    assert (text, error) == (FILLER + "and goodbye", "")


async def test_anthropic_sdk_whole_and_streamed(gateway: Gateway) -> None:
    client = gateway.anthropic()
    messages: Any = user("hello there")
    answer = await client.messages.create(model="openai/echo", max_tokens=64, messages=messages)
    assert answer.content[0].text == "hello there"  # type: ignore[union-attr]
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(
            model="openai/echo", max_tokens=64, messages=user(f"key {SECRET}")
        )
    assert_blocked(caught.value, "no-secrets")
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(
            model="openai/echo", max_tokens=64, messages=user("buy globex shares")
        )
    assert_blocked(caught.value, "competitors")
    text, error = await anthropic_stream(client, FILLER + "buy globex shares")
    assert "guardrail 'competitors'" in error
    assert FILLER.startswith(text)
    assert await anthropic_stream(client, FILLER) == (FILLER, "")


async def anthropic_stream(client: anthropic.AsyncAnthropic, text: str) -> tuple[str, str]:
    """The streamed text, and the in-band error's message ("" when none)."""
    pieces: list[str] = []
    try:
        async with client.messages.stream(
            model="openai/echo", max_tokens=64, messages=user(text)
        ) as stream:
            async for piece in stream.text_stream:
                pieces.append(piece)
    except anthropic.APIStatusError as error:
        return "".join(pieces), str(error)
    return "".join(pieces), ""


@pytest.mark.parametrize("dialect", sorted(ADAPTERS))
async def test_every_dialect_blocks_and_passes(gateway: Gateway, dialect: str) -> None:
    adapter = ADAPTERS[dialect]
    headers = {"authorization": f"Bearer {PLAIN}", "x-api-key": PLAIN}
    for stream in (False, True):
        path, body = adapter.request("openai/echo", "plain words only", stream=stream)
        answer = await post(gateway.url, path, body, headers)
        assert answer.status == 200, answer.body
        read = adapter.read_stream(answer.body) if stream else adapter.read_response(answer.json())
        assert read.text.endswith("plain words only")
        path, body = adapter.request("openai/echo", f"key {SECRET}", stream=stream)
        answer = await post(gateway.url, path, body, headers)
        assert answer.status == 400, answer.body
        assert "guardrail 'no-secrets'" in adapter.read_error(400, answer.json())
        assert SECRET not in answer.body.decode()
    path, body = adapter.request("openai/echo", FILLER + "about acme", stream=True)
    answer = await post(gateway.url, path, body, headers)
    assert answer.status == 200  # the headers went out before the answer's text
    outcome = adapter.read_stream(answer.body)
    assert outcome.error is not None
    assert "guardrail 'competitors'" in outcome.error
    assert "acme" not in outcome.text
    path, body = adapter.request("openai/echo", "about acme", stream=False)
    answer = await post(gateway.url, path, body, headers)
    assert answer.status == 400
    assert "guardrail 'competitors'" in adapter.read_error(400, answer.json())


# -- actions and the built-in checks -----------------------------------------------------------


async def test_warn_serves_with_the_header_and_counts(gateway: Gateway) -> None:
    client = gateway.openai()
    raw = await client.chat.completions.with_raw_response.create(
        model="openai/echo", messages=user("the nightjar sings")
    )
    assert raw.headers["x-crossway-guardrails"] == "warned=mentions"
    assert raw.parse().choices[0].message.content == "the nightjar sings"
    streamed = await client.chat.completions.with_raw_response.create(
        model="openai/echo", messages=user("the nightjar sings"), stream=True
    )
    assert streamed.headers["x-crossway-guardrails"] == "warned=mentions"  # the input's warning
    metrics = await gateway.get("/metrics")
    assert (
        'crossway_guardrail_checks_total{check="mentions",phase="input",verdict="warn"} 2.0'
        in metrics
    )


async def test_per_key_checks_pii_and_prompt_size(gateway: Gateway) -> None:
    prompt = user(f"write to {EMAIL}")
    plain = await gateway.openai(PLAIN).chat.completions.create(
        model="openai/echo", messages=prompt
    )
    assert plain.choices[0].message.content == f"write to {EMAIL}"
    strict = gateway.openai(STRICT)
    with pytest.raises(openai.BadRequestError) as caught:
        await strict.chat.completions.create(model="openai/echo", messages=prompt)
    assert_blocked(caught.value, "no-pii")
    assert EMAIL not in json.dumps(caught.value.body)
    with pytest.raises(openai.BadRequestError) as caught:
        await strict.chat.completions.create(model="openai/echo", messages=user("word " * 400))
    assert_blocked(caught.value, "small")
    assert len(gateway.upstream_calls()) == 1


async def test_regex_require_and_deny(gateway: Gateway) -> None:
    client = gateway.openai(**{"x-crossway-guardrails": "ticket, no-internal"})
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="openai/echo", messages=user("no ticket"))
    assert_blocked(caught.value, "ticket")
    answer = await client.chat.completions.create(
        model="openai/echo", messages=user("TICKET-12 is fine")
    )
    assert answer.choices[0].message.content == "TICKET-12 is fine"
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="openai/echo", messages=user("TICKET-12 see INTERNAL-4242")
        )
    assert_blocked(caught.value, "no-internal")
    text, error = await openai_stream(client, "TICKET-9 " + FILLER + "INTERNAL-4242")
    assert "guardrail 'no-internal'" in error
    assert "INTERNAL" not in text


async def test_per_team_moderation_through_the_providers_config(gateway: Gateway) -> None:
    agent = gateway.openai(AGENT)
    with pytest.raises(openai.BadRequestError) as caught:
        await agent.chat.completions.create(model="openai/echo", messages=user("HATEFUL words"))
    assert_blocked(caught.value, "support-mod")
    assert gateway.upstream_calls() == []
    # violence is not among the check's categories
    calm = await agent.chat.completions.create(model="openai/echo", messages=user("VIOLENT"))
    assert calm.choices[0].message.content == "VIOLENT"
    moderated = gateway.services.bodies("/v1/moderations")
    assert moderated[0] == {"model": "omni-moderation-latest", "input": ["HATEFUL words"]}
    assert len(moderated) == 3  # input and output of the second request
    plain = await gateway.openai(PLAIN).chat.completions.create(
        model="openai/echo", messages=user("HATEFUL words")
    )
    assert plain.choices[0].message.content == "HATEFUL words"  # not the plain key's policy


# -- json_schema -------------------------------------------------------------------------------

SCHEMA_FORMAT: Any = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
    },
}


async def test_json_schema_retry_then_pass_and_retry_then_fail(gateway: Gateway) -> None:
    client = gateway.openai(**{"x-crossway-guardrails": "schema"})
    gateway.services.answers[:] = ["not json", '{"a": 1}']
    answer = await client.chat.completions.create(
        model="openai/scripted", messages=user("json please"), response_format=SCHEMA_FORMAT
    )
    assert answer.choices[0].message.content == '{"a": 1}'
    assert len(gateway.upstream_calls()) == 2
    gateway.services.answers[:] = ['{"a": "x"}', "nope"]
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="openai/scripted", messages=user("json please"), response_format=SCHEMA_FORMAT
        )
    assert_blocked(caught.value, "schema")
    assert len(gateway.upstream_calls()) == 4
    # Streamed, the check holds the stream: the retry happens before the first byte.
    gateway.services.answers[:] = ["nope", '{"a": 2}']
    pieces = [
        chunk.choices[0].delta.content or ""
        async for chunk in await client.chat.completions.create(
            model="openai/scripted",
            messages=user("json please"),
            response_format=SCHEMA_FORMAT,
            stream=True,
        )
        if chunk.choices
    ]
    assert "".join(pieces) == '{"a": 2}'
    gateway.services.answers[:] = ["nope", "nope"]
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="openai/scripted",
            messages=user("json please"),
            response_format=SCHEMA_FORMAT,
            stream=True,
        )
    assert_blocked(caught.value, "schema")


async def test_json_schema_at_the_end_of_a_stream(gateway: Gateway) -> None:
    client = gateway.openai(**{"x-crossway-guardrails": "schema-end"})
    gateway.services.answers[:] = ["not json at all"]
    stream = await client.chat.completions.create(
        model="openai/scripted",
        messages=user("json please"),
        response_format=SCHEMA_FORMAT,
        stream=True,
    )
    with pytest.raises(openai.APIError) as caught:
        async for _ in stream:
            pass
    assert "guardrail 'schema-end'" in caught.value.message


# -- the webhook -------------------------------------------------------------------------------


async def test_webhook_allows_blocks_and_modifies(gateway: Gateway) -> None:
    client = gateway.openai()
    extra: Any = {"guardrails": ["house"]}
    answer = await client.chat.completions.create(
        model="openai/echo", messages=user("all good"), extra_body=extra
    )
    assert answer.choices[0].message.content == "all good"
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="openai/echo", messages=user("FORBIDDEN plan"), extra_body=extra
        )
    assert_blocked(caught.value, "house")
    assert "reason-from-service" not in json.dumps(caught.value.body)  # it stays inside
    modified = await client.chat.completions.create(
        model="openai/echo", messages=user("please REWRITE me"), extra_body=extra
    )
    assert modified.choices[0].message.content == "please rewritten me"
    sent = gateway.upstream_calls()
    assert sent[-1]["messages"] == [{"role": "user", "content": "please rewritten me"}]
    assert all("guardrails" not in body for body in sent)  # the body field stays here
    asked = gateway.services.bodies("/guard/native")[0]
    assert asked["phase"] == "input"
    assert asked["texts"] == ["all good"]
    assert asked["key_alias"] == "plain"
    assert asked["model"] == "openai/echo"


async def test_litellm_shaped_webhook(gateway: Gateway) -> None:
    client = gateway.openai(**{"x-crossway-guardrails": "house-litellm"})
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="openai/echo", messages=user("FORBIDDEN"))
    assert_blocked(caught.value, "house-litellm")
    modified = await client.chat.completions.create(
        model="openai/echo", messages=user("REWRITE this")
    )
    assert modified.choices[0].message.content == "rewritten this"
    asked = gateway.services.bodies("/guard/litellm")
    assert asked[0]["input_type"] == "request"
    assert asked[0]["texts"] == ["FORBIDDEN"]
    assert asked[0]["request_data"]["user_api_key_alias"] == "plain"
    assert asked[0]["litellm_call_id"]
    assert asked[-1]["input_type"] == "response"  # the answer was checked too


@pytest.mark.parametrize(
    ("check", "served"),
    [
        ("slow-open", True),
        ("slow-closed", False),
        ("garbage-open", True),
        ("garbage-closed", False),
        ("broken-closed", False),
    ],
)
async def test_webhook_failures_follow_on_error(gateway: Gateway, check: str, served: bool) -> None:
    client = gateway.openai(**{"x-crossway-guardrails": check})
    if served:
        answer = await client.chat.completions.create(model="openai/echo", messages=user("hi"))
        assert answer.choices[0].message.content == "hi"
        verdict = "error_allow"
    else:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="openai/echo", messages=user("hi"))
        assert_blocked(caught.value, check)
        assert gateway.upstream_calls() == []
        verdict = "error_block"
    metrics = await gateway.get("/metrics")
    assert f'check="{check}",phase="input",verdict="{verdict}"' in metrics


# -- who runs which ----------------------------------------------------------------------------


async def test_a_request_adds_checks_but_cannot_drop_mandatory_ones(gateway: Gateway) -> None:
    client = gateway.openai()
    for body in ({"guardrails": []}, {"guardrails": ["house"]}):
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="openai/echo", messages=user(f"key {SECRET}"), extra_body=body
            )
        assert_blocked(caught.value, "no-secrets")
    with pytest.raises(openai.PermissionDeniedError) as denied:
        await client.chat.completions.create(
            model="openai/echo", messages=user("hi"), extra_body={"guardrails": ["-no-secrets"]}
        )
    assert denied.value.code == "guardrail_mandatory"
    dropping = gateway.openai(**{"x-crossway-guardrails": "!competitors"})
    with pytest.raises(openai.PermissionDeniedError):
        await dropping.chat.completions.create(model="openai/echo", messages=user("hi"))
    with pytest.raises(openai.BadRequestError) as unknown:
        await client.chat.completions.create(
            model="openai/echo", messages=user("hi"), extra_body={"guardrails": ["nope"]}
        )
    assert unknown.value.code == "guardrail_unknown"
    assert gateway.upstream_calls() == []


async def test_admin_api_key_and_team_lists(gateway: Gateway) -> None:
    status, key = await gateway.admin(
        "POST", "/admin/keys", {"alias": "minted", "metadata": {"guardrails": ["house"]}}
    )
    assert status == 201, key
    client = gateway.openai(key["key"])
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="openai/echo", messages=user("FORBIDDEN"))
    assert_blocked(caught.value, "house")
    status, team = await gateway.admin(
        "POST", "/admin/teams", {"id": "legal", "metadata": {"guardrails": ["ticket"]}}
    )
    assert status == 201, team
    status, member = await gateway.admin("POST", "/admin/keys", {"team": "legal"})
    assert status == 201, member
    with pytest.raises(openai.BadRequestError) as caught:
        await gateway.openai(member["key"]).chat.completions.create(
            model="openai/echo", messages=user("no number")
        )
    assert_blocked(caught.value, "ticket")
    status, refused = await gateway.admin(
        "PATCH", f"/admin/keys/{key['id']}", {"metadata": {"guardrails": "house"}}
    )
    assert status == 400
    assert refused["error"]["param"] == "metadata.guardrails"


async def test_orq_pii_redaction_maps_onto_an_input_check(gateway: Gateway) -> None:
    body = {
        "model": "openai/echo",
        "prompt": f"mail {EMAIL}",
        "plugins": [{"id": "pii_redaction", "entities": ["EMAIL_ADDRESS"]}],
    }
    headers = {"authorization": f"Bearer {PLAIN}"}
    answer = await post(gateway.url, "/v2/router/completions", body, headers)
    assert answer.status == 200, answer.body
    assert answer.json()["choices"][0]["text"] == "mail <EMAIL_ADDRESS>"
    assert EMAIL not in json.dumps(gateway.upstream_calls())
    unknown = {**body, "plugins": [{"id": "pii_redaction", "entities": ["PERSON"]}]}
    refused = await post(gateway.url, "/v2/router/completions", unknown, headers)
    assert refused.status == 400
    assert refused.json()["error"]["code"] == "pii_entity_unsupported"


# -- accounting ----------------------------------------------------------------------------------


async def test_no_matched_text_in_logs_metrics_or_errors_and_the_ledger_has_verdicts(
    gateway: Gateway,
) -> None:
    client = gateway.openai(**{"x-crossway-guardrails": "house"})
    for text in (f"key {SECRET}", "about acme", "FORBIDDEN REWRITE"):
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="openai/echo", messages=user(text))
        assert text not in json.dumps(caught.value.body)
    await client.chat.completions.create(model="openai/echo", messages=user("nightjar"))
    await openai_stream(client, FILLER + "about acme")
    logs = gateway.logs.getvalue()
    metrics = await gateway.get("/metrics")
    assert '"event":"guardrail_verdicts"' in logs
    for leaked in (SECRET, "about acme", "FORBIDDEN", "reason-from-service"):
        assert leaked not in logs
        assert leaked not in metrics
    spend = await gateway.get("/admin/spend/logs?limit=20")
    verdicts = [record["guardrails"] or [] for record in spend["data"]]
    assert len(verdicts) == 5
    for expected in (
        {"check": "no-secrets", "phase": "input", "verdict": "block"},
        {"check": "competitors", "phase": "output", "verdict": "block"},
        {"check": "house", "phase": "input", "verdict": "block"},
        {"check": "mentions", "phase": "output", "verdict": "warn"},
    ):
        assert any(expected in found for found in verdicts), expected
