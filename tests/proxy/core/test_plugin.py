"""proxy/core/plugin.py: composing the plugin chain and loading plugins from config entries."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
import structlog

from plugins.headers import HeadersPlugin
from proxy.core.canonical import Call, Deployment, Message
from proxy.core.errors import UpstreamOverloaded
from proxy.core.metrics import Metrics
from proxy.core.plugin import compose
from proxy.core.reply import Choice, Chunk, ChunkChoice, Delta, Reply, Response
from proxy.runtime.config import PluginSpec, parse_config
from proxy.runtime.plugins import BUILTINS, PluginContext, PluginLoadError, load_plugins
from tests.proxy import plugin_fixtures as fx


def make_call(**fields) -> Call:
    return Call(
        request_id="r",
        dialect="openai",
        model="m",
        messages=[Message(role="user", content="hi")],
        **fields,
    )


def text_reply(text: str = "ok") -> Reply:
    message = Message(role="assistant", content=text)
    response = Response(id="x", model="m", choices=[Choice(index=0, message=message)])
    return Reply(provider="p", model="m", response=response)


class Recorder:
    """A plugin that records entry and exit in a shared log."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def __call__(self, call: Call, next) -> Reply:
        self.log.append(f"{self.name}>")
        reply = await next(call)
        self.log.append(f"<{self.name}")
        return reply


# ---------------------------------------------------------------------------------------------
# compose
# ---------------------------------------------------------------------------------------------


async def test_compose_runs_plugins_outermost_first():
    log: list[str] = []

    async def upstream(call: Call) -> Reply:
        log.append("upstream")
        return text_reply(",".join(entry for entry in log if entry.endswith(">")))

    chain = compose([Recorder("a", log), Recorder("b", log), Recorder("c", log)], upstream)
    reply = await chain(make_call())
    assert log == ["a>", "b>", "c>", "upstream", "<c", "<b", "<a"]
    assert reply.response.choices[0].message.content == "a>,b>,c>"


def test_empty_chain_is_the_upstream_itself():
    async def upstream(call: Call) -> Reply:
        return text_reply()

    assert compose([], upstream) is upstream


async def test_a_chain_can_be_called_many_times():
    calls = 0

    async def upstream(call: Call) -> Reply:
        nonlocal calls
        calls += 1
        return text_reply()

    chain = compose([Recorder("a", [])], upstream)
    for _ in range(3):
        await chain(make_call())
    assert calls == 3


async def test_plugin_that_short_circuits():
    log: list[str] = []

    class Cache:
        async def __call__(self, call: Call, next) -> Reply:
            log.append("cache hit")
            return text_reply("cached")

    async def upstream(call: Call) -> Reply:
        raise AssertionError("the upstream must not be called")

    chain = compose([Recorder("outer", log), Cache(), Recorder("inner", log)], upstream)
    reply = await chain(make_call())
    assert reply.response.choices[0].message.content == "cached"
    assert log == ["outer>", "cache hit", "<outer"]


async def test_plugin_that_calls_next_twice():
    attempts: list[str] = []

    class NaiveRetry:
        async def __call__(self, call: Call, next) -> Reply:
            try:
                return await next(call)
            except UpstreamOverloaded:
                return await next(call)

    async def upstream(call: Call) -> Reply:
        attempts.append(call.model)
        if len(attempts) == 1:
            raise UpstreamOverloaded("busy", upstream_status=503)
        return text_reply("second time lucky")

    log: list[str] = []
    chain = compose([NaiveRetry(), Recorder("inner", log)], upstream)
    reply = await chain(make_call())
    assert reply.response.choices[0].message.content == "second time lucky"
    assert attempts == ["m", "m"]
    assert log == ["inner>", "inner>", "<inner"]  # the inner link ran once per attempt


async def test_errors_propagate_through_the_chain():
    async def upstream(call: Call) -> Reply:
        raise UpstreamOverloaded("busy", upstream_status=503)

    chain = compose([Recorder("a", [])], upstream)
    with pytest.raises(UpstreamOverloaded):
        await chain(make_call())


async def test_plugin_that_wraps_a_stream():
    async def chunks() -> AsyncIterator[Chunk]:
        for text in ["hello", " ", "world"]:
            yield Chunk(
                id="c", model="m", choices=[ChunkChoice(index=0, delta=Delta(content=text))]
            )
        yield Chunk(
            id="c",
            model="m",
            choices=[ChunkChoice(index=0, delta=Delta(), finish_reason="stop")],
        )

    class Shout:
        async def __call__(self, call: Call, next) -> Reply:
            reply = await next(call)
            assert reply.stream is not None
            inner = reply.stream

            async def wrapped() -> AsyncIterator[Chunk]:
                async for chunk in inner:
                    for choice in chunk.choices:
                        if isinstance(choice.delta.content, str):
                            choice.delta.content = choice.delta.content.upper()
                    yield chunk

            return msgspec.structs.replace(reply, stream=wrapped())

    async def upstream(call: Call) -> Reply:
        return Reply(provider="p", model="m", stream=chunks())

    reply = await compose([Shout()], upstream)(make_call(stream=True))
    texts = []
    finish = []
    async for chunk in reply.stream:
        texts += [c.delta.content for c in chunk.choices if isinstance(c.delta.content, str)]
        finish += [c.finish_reason for c in chunk.choices if c.finish_reason]
    assert "".join(texts) == "HELLO WORLD"
    assert finish == ["stop"]


# ---------------------------------------------------------------------------------------------
# load_plugins
# ---------------------------------------------------------------------------------------------


def specs(yaml_text: str) -> tuple[PluginSpec, ...]:
    return parse_config(yaml_text, {}).plugins


def load_error(yaml_text: str) -> str:
    with pytest.raises(PluginLoadError) as info:
        load_plugins(specs(yaml_text), BUILTINS)
    return str(info.value)


def test_builtin_by_name():
    (plugin,) = load_plugins(specs("plugins: [headers]"), BUILTINS)
    assert isinstance(plugin, HeadersPlugin)


def test_builtin_with_options():
    plugins = load_plugins(specs("plugins: [{headers: {forward: [X-Trace-Id]}}]"), BUILTINS)
    assert isinstance(plugins[0], HeadersPlugin)


def test_custom_plugin_by_module_and_class():
    text = f"plugins: [{{plugin: '{fx.MODULE}:TaggingPlugin', options: {{tag: t, times: 2}}}}]"
    (plugin,) = load_plugins(specs(text), BUILTINS)
    assert isinstance(plugin, fx.TaggingPlugin)
    assert plugin.options == fx.TaggingOptions(tag="t", times=2)


def test_custom_plugin_options_are_converted_from_strings():
    # Options come from YAML with environment expansion: strings convert where unambiguous.
    text = f"plugins: [{{plugin: '{fx.MODULE}:TaggingPlugin', options: {{tag: t, times: '3'}}}}]"
    (plugin,) = load_plugins(specs(text), BUILTINS)
    assert plugin.options.times == 3


def test_custom_plugin_without_options():
    text = f"plugins: [{{plugin: '{fx.MODULE}:PlainPlugin'}}]"
    (plugin,) = load_plugins(specs(text), BUILTINS)
    assert isinstance(plugin, fx.PlainPlugin)


def test_custom_plugin_by_name_form_with_a_module_reference():
    (plugin,) = load_plugins(specs(f"plugins: ['{fx.MODULE}:PlainPlugin']"), BUILTINS)
    assert isinstance(plugin, fx.PlainPlugin)


async def test_loaded_plugins_compose_in_config_order():
    text = (
        "plugins:\n"
        f"  - {{plugin: '{fx.MODULE}:TaggingPlugin', options: {{tag: first}}}}\n"
        f"  - {{plugin: '{fx.MODULE}:TaggingPlugin', options: {{tag: second}}}}\n"
    )
    seen: list[list[str]] = []

    async def upstream(call: Call) -> Reply:
        seen.append(call.upstream_headers["x-tags"].split(","))
        return text_reply()

    await compose(load_plugins(specs(text), BUILTINS), upstream)(make_call())
    assert seen == [["first", "second"]]


def test_unknown_option_names_the_entry_path():
    message = load_error(
        "plugins:\n  - headers\n"
        f"  - {{plugin: '{fx.MODULE}:TaggingPlugin', options: {{tag: t, colour: red}}}}\n"
    )
    assert message.startswith("$.plugins[1].options: ")
    assert "colour" in message


def test_unknown_builtin_option_names_the_entry_path():
    message = load_error("plugins: [{headers: {forwrd: [x-a]}}]")
    assert message.startswith("$.plugins[0].headers: ")
    assert "forwrd" in message


def test_missing_or_mistyped_option():
    message = load_error(f"plugins: [{{plugin: '{fx.MODULE}:TaggingPlugin'}}]")
    assert message.startswith("$.plugins[0].options: ")
    assert "tag" in message
    message = load_error(
        f"plugins: [{{plugin: '{fx.MODULE}:TaggingPlugin', options: {{tag: t, times: many}}}}]"
    )
    assert message.startswith("$.plugins[0].options: ")
    assert "times" in message


def test_constructor_value_error_becomes_a_load_error():
    message = load_error(
        f"plugins: [{{plugin: '{fx.MODULE}:TaggingPlugin', options: {{tag: t, times: -1}}}}]"
    )
    assert message == "$.plugins[0].options: times must not be negative"


def test_builtin_refusing_its_options_becomes_a_load_error():
    message = load_error("plugins: [{headers: {add: {Authorization: x}}}]")
    assert message.startswith("$.plugins[0].headers: ")
    assert "authorization" in message


def test_plugin_without_options_given_options():
    message = load_error(f"plugins: [{{plugin: '{fx.MODULE}:PlainPlugin', options: {{a: 1}}}}]")
    assert message.startswith("$.plugins[0].options: ")
    assert "takes no options" in message


@pytest.mark.parametrize(
    "reference",
    [
        "no_such_module_xyz:Plugin",
        f"{fx.MODULE}:NoSuchClass",
        "tests.proxy.no_such_module:Plugin",
    ],
)
def test_bad_import_path(reference):
    message = load_error(f"plugins: [{{plugin: '{reference}'}}]")
    assert message.startswith("$.plugins[0].options: cannot import ")
    assert reference in message


def test_unknown_builtin_name():
    message = load_error("plugins: [no-such-plugin]")
    assert message.startswith("$.plugins[0]: unknown plugin 'no-such-plugin'")
    assert "headers" in message  # lists the built-ins


@pytest.mark.parametrize("name", ["NotAPlugin", "SyncCallable"])
def test_non_plugin_class(name):
    message = load_error(f"plugins: [{{plugin: '{fx.MODULE}:{name}'}}]")
    assert message.startswith("$.plugins[0].options: ")
    assert "is not a plugin" in message


def test_every_bad_entry_is_reported():
    message = load_error(
        "plugins:\n"
        "  - headers\n"
        "  - nope\n"
        f"  - {{plugin: '{fx.MODULE}:PlainPlugin', options: {{a: 1}}}}\n"
        "  - {plugin: 'missing_mod_q:X'}\n"
    )
    lines = message.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("$.plugins[1]: ")
    assert lines[1].startswith("$.plugins[2].options: ")
    assert lines[2].startswith("$.plugins[3].options: ")


def test_no_plugins():
    assert load_plugins((), BUILTINS) == []


def test_plugin_asking_for_context_receives_the_given_one():
    def resolve(model: str, provider: str | None = None) -> list[Deployment]:
        return [Deployment(provider="p", model=model)]

    context = PluginContext(resolve, Metrics(), structlog.get_logger())
    (plugin,) = load_plugins(
        specs(f"plugins: [{{plugin: '{fx.MODULE}:ContextPlugin'}}]"), BUILTINS, context
    )
    assert isinstance(plugin, fx.ContextPlugin)
    assert plugin.context is context


def test_plugin_asking_for_context_gets_a_validation_context_when_none_is_given():
    (plugin,) = load_plugins(specs(f"plugins: [{{plugin: '{fx.MODULE}:ContextPlugin'}}]"), BUILTINS)
    assert isinstance(plugin.context, PluginContext)
    assert plugin.context.resolve("anything") == []


class NeedsAnArgument:
    """A plugin whose constructor wants an argument the loader cannot give (a TypeError)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    async def __call__(self, call: Call, next) -> Reply:
        return await next(call)


class BrokenConstructor:
    """A plugin whose constructor fails with something other than ValueError."""

    def __init__(self) -> None:
        raise KeyError("missing-setting")

    async def __call__(self, call: Call, next) -> Reply:
        return await next(call)


@pytest.mark.parametrize(
    ("name", "detail"),
    [("NeedsAnArgument", "threshold"), ("BrokenConstructor", "missing-setting")],
)
def test_any_constructor_failure_becomes_a_load_error(name: str, detail: str):
    # A reload (SIGHUP) and `crossway check` only report PluginLoadError cleanly; anything else
    # would escape as a traceback.
    message = load_error(f"plugins: [{{plugin: '{__name__}:{name}'}}]")
    assert message.startswith("$.plugins[0].options: ")
    assert detail in message


def test_a_module_failing_at_import_becomes_a_load_error(tmp_path, monkeypatch):
    (tmp_path / "crossway_broken_plugin_mod.py").write_text(
        "raise RuntimeError('boom at import')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    message = load_error("plugins: [{plugin: 'crossway_broken_plugin_mod:Plugin'}]")
    assert message.startswith("$.plugins[0].options: cannot import ")
    assert "boom at import" in message


class _WrongParameterName:
    async def __call__(self, call, following):
        return await following(call)


def test_a_plugin_whose_next_parameter_has_another_name_is_refused():
    spec = PluginSpec(
        ref="tests.proxy.core.test_plugin:_WrongParameterName", options={}, path="$.plugins[0]"
    )
    with pytest.raises(PluginLoadError, match=r"\$\.plugins\[0\].*\(call, next\)"):
        load_plugins([spec], {})
