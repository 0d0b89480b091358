"""plugins/guardrails.py: loaded from a config by name, its lists checked against the config's
checks when it loads, its chain link a no-op for a request with no check, and its clients
closed with it."""

from __future__ import annotations

import pytest

from plugins.guardrails import GuardrailsOptions, GuardrailsPlugin
from proxy.core.canonical import Call, Message
from proxy.core.metrics import Metrics
from proxy.core.reply import Reply
from proxy.guardrails.config import parse_checks
from proxy.runtime.config import ConfigError, parse_config
from proxy.runtime.plugins import BUILTINS, PluginContext, PluginLoadError, load_plugins


class _Logger:
    def info(self, *args: object, **kwargs: object) -> None:
        return None


def context(section: dict[str, object]) -> PluginContext:
    return PluginContext(
        lambda *a, **k: [],
        Metrics(),
        _Logger(),
        guardrails=parse_checks(section, "$.guardrails", []),
    )


def test_the_config_section_reaches_the_plugin_by_name() -> None:
    config = parse_config(
        """
guardrails:
  no-secrets: {type: secrets, on: input}
plugins:
  - guardrails: {default: [no-secrets], teams: {support: [no-secrets]}}
"""
    )
    assert list(config.guardrails) == ["no-secrets"]
    plugins = load_plugins(config.plugins, BUILTINS, context({"no-secrets": {"type": "secrets"}}))
    assert isinstance(plugins[0], GuardrailsPlugin)


def test_a_list_naming_an_undefined_check_fails_the_load() -> None:
    config = parse_config("plugins:\n  - guardrails: {default: [ghost]}\n")
    with pytest.raises(PluginLoadError, match="default: no check 'ghost'"):
        load_plugins(config.plugins, BUILTINS, context({}))


def test_a_bad_check_fails_the_config() -> None:
    with pytest.raises(ConfigError, match=r"\$.guardrails.x: max_tokens_in runs on input only"):
        parse_config("guardrails:\n  x: {type: max_tokens_in, max: 3, on: both}\n")


async def test_no_check_is_a_plain_pass_through() -> None:
    plugin = GuardrailsPlugin(GuardrailsOptions(), context({}))
    call = Call(request_id="r", dialect="openai", model="m", messages=[Message(role="user")])
    reply = Reply(provider="p", model="m")

    async def upstream(given: Call) -> Reply:
        assert given is call
        return reply

    assert await plugin(call, upstream) is reply
    await plugin.close()


async def test_its_span_names_the_verdicts_of_the_request() -> None:
    plugin = GuardrailsPlugin(
        GuardrailsOptions(default=["words"]),
        context({"words": {"type": "keywords", "words": ["globex"], "on": "input"}}),
    )
    call = Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content="hello")],
    )

    async def upstream(given: Call) -> Reply:
        return Reply(provider="p", model="m")

    assert plugin.span_attributes(call) == {}  # nothing decided yet
    await plugin(call, upstream)
    assert plugin.span_attributes(call) == {"crossway.guardrails": ["words:input:allow"]}
    await plugin.close()
