"""proxy/runtime/plugins.py: loading plugins from config entries — built-ins by name, custom
ones by ``module:Class``, options, the context a plugin may ask for — and checking each loaded
plugin's optional hooks against their protocols (:data:`proxy.core.plugin.HOOKS`), once."""

from __future__ import annotations

import pytest
import structlog

from plugins.headers import HeadersPlugin
from proxy.core.canonical import Call, Deployment, Message
from proxy.core.metrics import Metrics
from proxy.core.plugin import HOOKS, Authenticates, Closes, Finishes, Starts, compose
from proxy.core.reply import Choice, Reply, Response
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
    spec = PluginSpec(ref=f"{__name__}:_WrongParameterName", options={}, path="$.plugins[0]")
    with pytest.raises(PluginLoadError, match=r"\$\.plugins\[0\].*\(call, next\)"):
        load_plugins([spec], {})


# ---------------------------------------------------------------------------------------------
# The optional hooks, checked once at load
# ---------------------------------------------------------------------------------------------


class _Link:
    async def __call__(self, call: Call, next) -> Reply:
        return await next(call)


class EveryHook(_Link):
    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def finished(self, request) -> None:
        pass

    async def authenticate(self, headers):
        raise AssertionError("not called")


class HooksSetInInit(_Link):
    """Hooks as instance attributes (as the auth plugin's ``authenticate``), or None."""

    def __init__(self) -> None:
        self.authenticate = EveryHook().authenticate
        self.close = None


class SyncStart(_Link):
    def start(self) -> None:
        pass


class SyncClose(_Link):
    def close(self) -> None:
        pass


class AsyncFinished(_Link):
    async def finished(self, request) -> None:
        pass


class SyncAuthenticate(_Link):
    def authenticate(self, headers):
        raise AssertionError("never called")


class NotCallableFinished(_Link):
    finished = True


class StartTakingAnArgument(_Link):
    async def start(self, when) -> None:
        pass


class FinishedTakingNothing(_Link):
    def finished(self) -> None:
        pass


class AuthenticateTakingNothing(_Link):
    async def authenticate(self):
        raise AssertionError("never called")


def test_a_plugin_with_every_hook_loads_and_satisfies_every_protocol():
    (plugin,) = load_plugins(specs(f"plugins: [{{plugin: '{__name__}:EveryHook'}}]"), BUILTINS)
    for protocol in (Starts, Closes, Finishes, Authenticates):
        assert isinstance(plugin, protocol)


def test_hooks_set_in_the_constructor_count_and_none_is_no_hook():
    text = f"plugins: [{{plugin: '{__name__}:HooksSetInInit'}}]"
    (plugin,) = load_plugins(specs(text), BUILTINS)
    assert isinstance(plugin, Authenticates)
    assert not isinstance(plugin, Closes)


@pytest.mark.parametrize(
    ("name", "hook"),
    [
        ("SyncStart", "start"),
        ("SyncClose", "close"),
        ("AsyncFinished", "finished"),
        ("SyncAuthenticate", "authenticate"),
        ("NotCallableFinished", "finished"),
        ("StartTakingAnArgument", "start"),
        ("FinishedTakingNothing", "finished"),
        ("AuthenticateTakingNothing", "authenticate"),
    ],
)
def test_an_attribute_named_like_a_hook_without_its_shape_is_a_load_error(name: str, hook: str):
    message = load_error(f"plugins: [{{plugin: '{__name__}:{name}'}}]")
    assert message.startswith(f"$.plugins[0].options: '{__name__}:{name}'.{hook} is not the ")
    assert HOOKS[hook].shape in message


def test_every_plugin_with_a_bad_hook_is_reported_at_once():
    message = load_error(
        "plugins:\n"
        f"  - {{plugin: '{__name__}:SyncStart'}}\n"
        "  - headers\n"
        f"  - {{plugin: '{__name__}:AsyncFinished'}}\n"
    )
    lines = message.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("$.plugins[0]")
    assert lines[1].startswith("$.plugins[2]")


def test_the_built_in_plugins_hooks_have_their_shapes():
    # Every built-in loads (the check would refuse one whose hook drifted from its protocol).
    text = "plugins: [" + ", ".join(sorted(set(BUILTINS) - {"auth"})) + ", auth]"
    plugins = load_plugins(specs(text), BUILTINS)
    assert len(plugins) == len(BUILTINS)
