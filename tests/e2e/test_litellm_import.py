"""Every LiteLLM fixture config (tests/fixtures/litellm) imported with ``crossway import
litellm``, validated, and served end to end: each provider of the imported config points at a
fake upstream of its type (tests/proxy/providers/fakes), and every ``model_name`` of the
LiteLLM config, asked for with the openai SDK, must reach one of the upstream models LiteLLM
would have called for it — worked out here from the LiteLLM file alone, not by the importer."""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from aiohttp import web

from proxy.server.app import create_app
from proxy.server.cli import main
from tests.e2e.conftest import start_site
from tests.proxy.providers.fakes import FAKES, ProviderFake

FIXTURES = sorted((Path(__file__).parents[1] / "fixtures" / "litellm").glob("*.yaml"))
MASTER = "sk-litellm-master-" + "0123456789abcdef" * 2
INCOMPLETE = {"09_priority_order", "10_kitchen_sink"}
# LiteLLM provider prefix → the fake that speaks its wire format (the test's own table).
WIRE = {
    "openai": "openai",
    "azure": "azure",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "bedrock": "bedrock",
    "groq": "openai",
    "mistral": "openai",
    "deepseek": "openai",
    "openrouter": "openai",
    "hosted_vllm": "openai",
    "ollama": "openai",
}
TIMEOUTS = {"connect": 2, "first_byte": 5, "idle": 5, "total": 10}
HI = [{"role": "user", "content": "Hi"}]


def expected_routes(source: dict[str, Any]) -> dict[str, set[str]]:
    """model_name → the upstream model names LiteLLM calls for it (its lowest ``order``)."""
    chosen: dict[str, list[tuple[float, str]]] = {}
    for entry in source.get("model_list", []):
        if (entry.get("model_info") or {}).get("mode", "chat") != "chat":
            continue
        params = entry["litellm_params"]
        prefix, _, model = params["model"].partition("/")
        if prefix not in WIRE:
            continue
        model = model.removeprefix("converse/")
        order = float(params.get("order", "inf"))  # LiteLLM tries the unordered last
        chosen.setdefault(entry["model_name"], []).append((order, model))
    routes = {
        name: {model for order, model in pairs if order == min(o for o, _ in pairs)}
        for name, pairs in chosen.items()
    }
    aliases = (source.get("router_settings") or {}).get("model_group_alias") or {}
    for alias, target in aliases.items():
        routes[alias] = routes[target]
    return routes


def upstream_model(fake: ProviderFake, received: Any) -> str:
    """The model an upstream request named, wherever its wire format puts it."""
    if fake.type == "azure":
        return received.path.split("/")[3]
    if fake.type == "gemini":
        return received.path.rsplit("/", 1)[1].partition(":")[0]
    if fake.type == "bedrock":
        return received.path.split("/")[2]
    return received.body["model"]


class Served:
    def __init__(self, url: str, fakes: dict[str, ProviderFake], config: dict[str, Any]) -> None:
        self.url = url
        self.fakes = fakes
        self.config = config

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=MASTER, max_retries=0)

    def take_requests(self) -> list[tuple[str, str]]:
        """(provider, upstream model) of every upstream request since the last call."""
        seen = []
        for name, fake in self.fakes.items():
            seen += [(name, upstream_model(fake, r)) for r in fake.requests]
            fake.requests.clear()
        return seen


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def imported(source: Path, output: Path) -> tuple[int, dict[str, Any]]:
    """Run ``crossway import litellm`` and read the config it wrote."""
    status = main(["import", "litellm", str(source), "-o", str(output)])
    return status, read_yaml(output)


@contextlib.asynccontextmanager
async def serve(
    config: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    broken: frozenset[str] = frozenset(),
) -> AsyncIterator[Served]:
    """Serve ``config`` with every provider rewired to a fake of its type (the providers in
    ``broken`` with a key the fake refuses)."""
    runners: list[web.AppRunner] = []
    fakes: dict[str, ProviderFake] = {}
    for name, provider in config["providers"].items():
        fake = type(FAKES[provider["type"]])()
        runner, url = await start_site(fake.app())
        runners.append(runner)
        fakes[name] = fake
        wiring = {k: v for k, v in fake.config(url).items() if k != "deployments"}
        if name in broken:
            wiring = {k: ("wrong-key" if "key" in k else v) for k, v in wiring.items()}
        for field in ("api_key", "base_url", "endpoint", "region", "endpoint_url"):
            provider.pop(field, None)
        provider.update(wiring)
        provider["timeouts"] = TIMEOUTS
    config["server"] = {"access_log": False}
    monkeypatch.setenv("LITELLM_MASTER_KEY", MASTER)
    monkeypatch.setenv("CROSSWAY_MASTER_KEY", MASTER)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path}/crossway.db")
    host, _, port = redis_url.removeprefix("redis://").partition("/")[0].partition(":")
    monkeypatch.setenv("REDIS_HOST", host)
    monkeypatch.setenv("REDIS_PORT", port)
    monkeypatch.setenv("REDIS_PASSWORD", "")
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(config))
    runner, url = await start_site(create_app(path, log_stream=io.StringIO()))
    runners.append(runner)
    try:
        yield Served(url, fakes, config)
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
async def test_fixture_is_imported_and_served(
    fixture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    source = read_yaml(fixture)
    status, config = imported(fixture, tmp_path / "crossway.yaml")
    assert status == (3 if fixture.stem in INCOMPLETE else 0)
    routes = expected_routes(source)
    assert routes, "every fixture names models"
    async with serve(config, tmp_path, monkeypatch, redis_url) as served:
        client = served.client()
        for model_name, upstreams in routes.items():
            for stream in (False, True):
                # a fresh question each time: the imported cache must not answer it
                question = [{"role": "user", "content": f"Hi {model_name} {stream}"}]
                raw = await client.chat.completions.with_raw_response.create(
                    model=model_name, messages=question, stream=stream
                )
                if stream:
                    async for _ in raw.parse():
                        pass
                else:
                    assert raw.parse().choices[0].message.content.startswith("Hello from")
                calls = served.take_requests()
                assert len(calls) == 1, (model_name, calls)
                provider, model = calls[0]
                assert model in upstreams, (model_name, calls, upstreams)
                assert raw.headers["x-litellm-model-id"].startswith(f"{provider}/")


def test_fixture_set_covers_what_migrations_need() -> None:
    """At least ten configs, covering the shapes the issue lists."""
    assert len(FIXTURES) >= 10
    text = "\n".join(f.read_text() for f in FIXTURES)
    for needle in (
        "azure/",
        "bedrock/",
        "aws_access_key_id: os.environ/",
        "context_window_fallbacks",
        "content_policy_fallbacks",
        "default_fallbacks",
        "type: redis\n",
        "type: redis-semantic",
        "master_key",
        "database_url",
        "order: 2",
    ):
        assert needle in text, needle


FALLBACKS = next(f for f in FIXTURES if f.stem == "04_fallbacks")


@pytest.mark.parametrize(
    ("failure", "served_by"),
    [("fail-auth", "anthropic"), ("fail-context", "openai"), ("fail-policy", "gemini")],
)
async def test_each_kind_of_fallback_acts(
    failure: str,
    served_by: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
) -> None:
    """LiteLLM's fallbacks, context_window_fallbacks and content_policy_fallbacks, imported:
    gpt-4o's failure of each kind is answered by the model LiteLLM would have fallen back to."""
    _, config = imported(FALLBACKS, tmp_path / "crossway.yaml")
    config["models"]["gpt-4o"] = [{"target": f"openai/{failure}"}]
    async with serve(config, tmp_path, monkeypatch, redis_url) as served:
        raw = await served.client().chat.completions.with_raw_response.create(
            model="gpt-4o", messages=HI
        )
        calls = served.take_requests()
        assert calls[0] == ("openai", failure)
        assert calls[-1][0] == served_by
        expected = {"fail-auth": "claude-sonnet", "fail-context": "gpt-4o-long"}
        assert raw.headers["x-crossway-fallback"] == expected.get(failure, "gemini-flash")
        assert raw.headers["x-litellm-attempted-fallbacks"] == "1"


async def test_order_two_serves_when_order_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """LiteLLM's deployment ``order``: the order-2 deployment answers when order 1 cannot."""
    fixture = next(f for f in FIXTURES if f.stem == "09_priority_order")
    _, config = imported(fixture, tmp_path / "crossway.yaml")
    async with serve(config, tmp_path, monkeypatch, redis_url, frozenset({"azure"})) as served:
        answer = await served.client().chat.completions.create(model="gpt-4o", messages=HI)
        assert answer.choices[0].message.content == "Hello from openai"
        assert served.take_requests() == [("azure", "gpt-4o-ptu"), ("openai", "gpt-4o")]


async def test_the_presidio_guardrail_masks_before_the_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    """LiteLLM's Presidio guardrail, imported as the masking plugin: the upstream never sees the
    e-mail address, the client gets it back (output_parse_pii), a card number is refused."""
    fixture = next(f for f in FIXTURES if f.stem == "12_presidio_guardrail")
    _, config = imported(fixture, tmp_path / "crossway.yaml")
    async with serve(config, tmp_path, monkeypatch, redis_url) as served:
        client = served.client()
        question = [{"role": "user", "content": "Write to alice@example.com please"}]
        await client.chat.completions.create(model="gpt-4o", messages=question)
        (received,) = served.fakes["openai"].requests
        assert received.body["messages"][-1]["content"] == "Write to <EMAIL_1> please"
        card = [{"role": "user", "content": "My card is 4111 1111 1111 1111"}]
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="gpt-4o", messages=card)
        assert refused.value.code == "pii_blocked"
