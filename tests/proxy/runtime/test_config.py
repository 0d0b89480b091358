"""proxy/runtime/config.py: loading, environment expansion, validation and error reporting."""

from pathlib import Path

import pytest

from proxy.providers import PROVIDER_TYPES
from proxy.providers.base import Timeouts
from proxy.providers.mock.provider import MockConfig
from proxy.providers.openai.provider import OpenAIConfig
from proxy.runtime.config import (
    ConfigError,
    DeploymentConfig,
    GatewayConfig,
    MetricsConfig,
    PluginSpec,
    ResponsesConfig,
    ServerConfig,
    load_config,
    parse_config,
)

GOOD = """
server:
  host: 0.0.0.0
  port: 8080
  workers: 2
  log_level: debug
metrics:
  max_model_labels: 10
providers:
  mock:
    type: mock
    latency_ms: 5
  openai:
    type: openai
    base_url: https://example.invalid/v1
    api_key: sk-literal-key
    timeouts: {connect: 2, total: 30}
models:
  default:
    - {target: mock/default}
  fast:
    - {target: openai/gpt-4o-mini, weight: 3}
    - {target: mock/fast}
  single: {target: mock/one}
plugins:
  - headers
  - headers: {forward: [x-trace-id]}
  - plugin: mymod:MyPlugin
    options: {level: 3}
"""


def errors_of(text: str, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, environ or {})
    return info.value.errors


# ---------------------------------------------------------------------------------------------
# A good file
# ---------------------------------------------------------------------------------------------


def test_good_config_decodes_every_section():
    config = parse_config(GOOD, {})
    assert isinstance(config, GatewayConfig)
    assert config.server == ServerConfig(host="0.0.0.0", port=8080, workers=2, log_level="debug")
    assert config.metrics == MetricsConfig(max_model_labels=10)
    assert config.providers["mock"] == MockConfig(latency_ms=5.0)
    openai = config.providers["openai"]
    assert isinstance(openai, OpenAIConfig)
    assert openai.api_key == "sk-literal-key"
    assert openai.base_url == "https://example.invalid/v1"
    assert openai.timeouts == Timeouts(connect=2.0, total=30.0)
    assert config.models["default"] == (DeploymentConfig(target="mock/default"),)
    assert config.models["fast"] == (
        DeploymentConfig(target="openai/gpt-4o-mini", weight=3.0),
        DeploymentConfig(target="mock/fast"),
    )
    # A single mapping is accepted as a one-deployment list.
    assert config.models["single"] == (DeploymentConfig(target="mock/one"),)
    assert [p.ref for p in config.plugins] == ["headers", "headers", "mymod:MyPlugin"]


def test_empty_text_is_the_default_config():
    assert parse_config("", {}) == GatewayConfig()
    assert parse_config("# only a comment\n", {}) == GatewayConfig()


@pytest.mark.parametrize("text", ["", "\n  \n", "# only a comment\n", "---\n"])
def test_an_empty_file_is_an_error(tmp_path: Path, text: str):
    # What an interrupted or truncated write leaves is never a config: loaded at start or on a
    # reload, it would wipe every provider, alias, plugin and the admin API.
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.errors == ["$: the config is empty (no YAML document)"]


def test_the_responses_section_defaults_and_bounds():
    assert parse_config("", {}).responses == ResponsesConfig(
        ttl=30 * 24 * 3600,
        max_entries=10_000,
        max_bytes=64 * 1024 * 1024,
        max_entries_per_owner=1_000,
        max_bytes_per_owner=8 * 1024 * 1024,
    )
    config = parse_config("responses: {ttl: 60, max_entries: 5, max_bytes: 4096}", {})
    assert config.responses == ResponsesConfig(ttl=60, max_entries=5, max_bytes=4096)
    assert errors_of("responses: {ttl: 0}")[0].startswith("$.responses.ttl: ")
    assert errors_of("responses: {max_entries: 0}")[0].startswith("$.responses.max_entries: ")
    assert errors_of("responses: {max_bytes: 10}")[0].startswith("$.responses.max_bytes: ")
    per_owner = "responses: {max_entries_per_owner: 0}"
    assert errors_of(per_owner)[0].startswith("$.responses.max_entries_per_owner: ")
    per_owner = "responses: {max_bytes_per_owner: 10}"
    assert errors_of(per_owner)[0].startswith("$.responses.max_bytes_per_owner: ")
    assert "tll" in errors_of("responses: {tll: 5}")[0]


def test_load_config_reads_a_file(tmp_path: Path):
    path = tmp_path / "gateway.yaml"
    path.write_text(GOOD, encoding="utf-8")
    assert load_config(path, {}) == parse_config(GOOD, {})
    assert load_config(str(path), {}) == parse_config(GOOD, {})


def test_load_config_on_a_missing_file(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, {})
    assert len(info.value.errors) == 1
    assert str(missing) in info.value.errors[0]
    assert "cannot read" in info.value.errors[0]


def test_the_shipped_default_config_is_valid():
    path = Path(__file__).resolve().parents[3] / "config" / "gateway.yaml"
    config = load_config(path, {})
    assert "mock" in config.providers


def test_not_yaml_and_not_a_mapping():
    assert "not valid YAML" in errors_of("server: [unclosed")[0]
    assert errors_of("- a\n- b\n") == ["$: the config must be a mapping"]


# ---------------------------------------------------------------------------------------------
# Environment expansion
# ---------------------------------------------------------------------------------------------


def test_env_var_is_expanded():
    config = parse_config(
        "server: {host: '${HOST}', port: '${PORT}'}", {"HOST": "10.0.0.1", "PORT": "9000"}
    )
    assert config.server.host == "10.0.0.1"
    assert config.server.port == 9000  # a string from the environment, converted


def test_env_var_inside_a_longer_string():
    text = "providers: {o: {type: openai, base_url: 'https://${HOST}:${PORT}/v1'}}"
    config = parse_config(text, {"HOST": "h", "PORT": "1"})
    assert config.providers["o"].base_url == "https://h:1/v1"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"H": "set.example"}, "set.example"),  # set: the value
        ({}, "fallback"),  # unset: the default
        ({"H": ""}, "fallback"),  # set but empty: the default
    ],
)
def test_env_var_with_default(environ, expected):
    config = parse_config("server: {host: '${H:-fallback}'}", environ)
    assert config.server.host == expected


def test_env_var_with_empty_default():
    text = "providers: {o: {type: openai, api_key: '${KEY:-}'}}"
    assert parse_config(text, {}).providers["o"].api_key == ""
    assert parse_config(text, {"KEY": "sk-x"}).providers["o"].api_key == "sk-x"


def test_env_var_set_to_empty_without_default_is_empty():
    text = "providers: {o: {type: openai, api_key: '${KEY}'}}"
    assert parse_config(text, {"KEY": ""}).providers["o"].api_key == ""


def test_unset_env_var_without_default_is_an_error_with_its_path():
    text = "providers: {o: {type: openai, api_key: '${MISSING_KEY}'}}"
    errors = errors_of(text, {})
    assert errors == ["$.providers.o.api_key: environment variable MISSING_KEY is not set"]


def test_unset_env_var_in_a_list_names_the_index():
    errors = errors_of("plugins: [headers, '${NOPE}']", {})
    assert errors == ["$.plugins[1]: environment variable NOPE is not set"]


def test_environ_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CROSSWAY_TEST_HOST", "from-os-environ")
    config = parse_config("server: {host: '${CROSSWAY_TEST_HOST}'}")
    assert config.server.host == "from-os-environ"


def test_keys_are_not_expanded():
    # Only string values are expanded; a key that looks like a reference stays as written.
    errors = errors_of("'${X}': 1", {"X": "server"})
    assert errors == [
        "$.${X}: unknown key (expected one of auth, batches, compat, database, guardrails, mcp, "
        "media, metrics, models, plugins, pricing, providers, responses, server, state, telemetry)"
    ]


# ---------------------------------------------------------------------------------------------
# Validation errors, each with its path
# ---------------------------------------------------------------------------------------------


def test_unknown_top_level_key():
    errors = errors_of("servr: {}")
    assert len(errors) == 1
    assert errors[0].startswith("$.servr: unknown key")


def test_unknown_nested_key():
    errors = errors_of("server: {prot: 1}")
    assert len(errors) == 1
    assert errors[0].startswith("$.server")
    assert "prot" in errors[0]


def test_unknown_provider_field():
    errors = errors_of("providers: {x: {type: openai, api_kee: k}}")
    assert len(errors) == 1
    assert errors[0].startswith("$.providers.x")
    assert "unknown field" in errors[0]
    assert "api_kee" in errors[0]


def test_unknown_field_deep_inside_a_provider():
    errors = errors_of("providers: {x: {type: openai, timeouts: {conect: 1}}}")
    assert len(errors) == 1
    assert errors[0].startswith("$.providers.x.timeouts")
    assert "conect" in errors[0]


def test_wrong_type_names_the_field():
    assert errors_of("server: {port: many}") == ["$.server.port: Expected `int`, got `str`"]
    errors = errors_of("providers: {x: {type: openai, timeouts: {connect: soon}}}")
    assert errors == ["$.providers.x.timeouts.connect: Expected `float`, got `str`"]


def test_cors_is_off_by_default_and_needs_origins_when_given():
    assert parse_config("", {}).server.cors is None
    cors = parse_config("server: {cors: {allow_origins: ['https://a.example']}}", {}).server.cors
    assert cors is not None
    assert (cors.allow_origins, cors.allow_headers, cors.allow_credentials) == (
        ("https://a.example",),
        ("*",),
        False,
    )
    assert errors_of("server: {cors: {}}") == [
        "$.server.cors: Object missing required field `allow_origins`"
    ]
    assert errors_of("server: {cors: {allow_origins: []}}")[0].startswith(
        "$.server.cors.allow_origins: "
    )


def test_out_of_range_value():
    errors = errors_of("server: {port: 70000}")
    assert len(errors) == 1
    assert errors[0].startswith("$.server.port: ")


def test_section_of_the_wrong_shape():
    assert errors_of("providers: [a, b]") == ["$.providers: expected a mapping"]
    assert errors_of("plugins: {a: 1}") == ["$.plugins: expected a list"]
    assert errors_of("models: {a: []}") == ["$.models.a: expected a non-empty list of deployments"]


@pytest.mark.parametrize("spec", ["{type: nosuch}", "{base_url: x}", "'openai'"])
def test_bad_provider_type(spec):
    errors = errors_of(f"providers: {{p: {spec}}}")
    assert errors == [f"$.providers.p.type: expected one of {', '.join(PROVIDER_TYPES)}"]


def test_provider_name_with_a_slash():
    errors = errors_of("providers: {'a/b': {type: mock}}")
    assert len(errors) == 1
    assert errors[0].startswith("$.providers.a/b: ")


def test_deployment_naming_an_unknown_provider():
    errors = errors_of("providers: {mock: {type: mock}}\nmodels: {m: [{target: nope/x}]}")
    assert errors == ["$.models.m[0].target: unknown provider 'nope'"]


def test_deployment_target_without_slash():
    errors = errors_of("providers: {mock: {type: mock}}\nmodels: {m: [{target: mock}]}")
    assert errors == ["$.models.m[0].target: expected 'provider/model'"]


def test_deployment_with_bad_weight_and_unknown_field():
    errors = errors_of(
        "providers: {mock: {type: mock}}\n"
        "models: {m: [{target: mock/a, weight: 0}, {target: mock/b, wieght: 1}]}"
    )
    assert len(errors) == 2
    assert errors[0].startswith("$.models.m[0].weight: ")
    assert errors[1].startswith("$.models.m[1]")
    assert "wieght" in errors[1]


def test_several_errors_are_reported_at_once():
    text = """
bogus: 1
server: {port: not-a-port}
metrics: {max_model_labels: 0}
providers:
  a: {type: nonsense}
  b: {type: openai, api_kee: x}
models:
  m: [{target: nowhere/x}, {target: noslash}]
plugins: [42]
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, {"UNUSED": "x"})
    errors = info.value.errors
    expected_prefixes = [
        "$.bogus: ",
        "$.server.port: ",
        "$.metrics.max_model_labels: ",
        "$.providers.a.type: ",
        "$.providers.b",
        "$.models.m[0].target: ",
        "$.models.m[1].target: ",
        "$.plugins[0]: ",
    ]
    assert len(errors) == len(expected_prefixes), errors
    for prefix in expected_prefixes:
        assert any(e.startswith(prefix) for e in errors), (prefix, errors)
    for error in errors:
        assert error.startswith("$."), error
        assert f"  - {error}" in str(info.value)


def test_config_error_keeps_the_plugin_entries_that_parsed():
    with pytest.raises(ConfigError) as info:
        parse_config("server: {port: x}\nplugins: [headers, 42, {headers: {add: {x-a: b}}}]", {})
    assert [spec.ref for spec in info.value.plugins] == ["headers", "headers"]
    assert info.value.plugins[1].path == "$.plugins[2].headers"


def test_config_error_message_lists_every_error():
    error = ConfigError(["$.a: one", "$.b: two"])
    assert str(error) == "invalid configuration:\n  - $.a: one\n  - $.b: two"
    assert error.errors == ["$.a: one", "$.b: two"]


# ---------------------------------------------------------------------------------------------
# Plugin entry shapes
# ---------------------------------------------------------------------------------------------


def plugins_of(text: str) -> tuple[PluginSpec, ...]:
    return parse_config(text, {}).plugins


def test_plugin_entry_as_a_name():
    assert plugins_of("plugins: [headers]") == (
        PluginSpec(ref="headers", options={}, path="$.plugins[0]"),
    )


def test_plugin_entry_as_name_with_options():
    assert plugins_of("plugins: [{headers: {forward: [x-a]}}]") == (
        PluginSpec(ref="headers", options={"forward": ["x-a"]}, path="$.plugins[0].headers"),
    )


def test_plugin_entry_as_name_with_null_options():
    assert plugins_of("plugins: [{headers: null}]") == (
        PluginSpec(ref="headers", options={}, path="$.plugins[0].headers"),
    )


def test_plugin_entry_as_custom_class():
    text = "plugins:\n  - {plugin: 'pkg.mod:Class', options: {a: 1}}\n  - {plugin: 'x:Y'}"
    assert plugins_of(text) == (
        PluginSpec(ref="pkg.mod:Class", options={"a": 1}, path="$.plugins[0].options"),
        PluginSpec(ref="x:Y", options={}, path="$.plugins[1].options"),
    )


def test_plugin_options_are_env_expanded():
    config = parse_config("plugins: [{headers: {add: {x-team: '${TEAM}'}}}]", {"TEAM": "core"})
    assert config.plugins[0].options == {"add": {"x-team": "core"}}


@pytest.mark.parametrize(
    ("entry", "prefix"),
    [
        ("42", "$.plugins[0]: "),
        ("[headers]", "$.plugins[0]: "),
        ("{a: {}, b: {}}", "$.plugins[0]: "),
        ("{headers: [x]}", "$.plugins[0].headers: "),
        ("{headers: 3}", "$.plugins[0].headers: "),
        ("{plugin: 42}", "$.plugins[0]: "),
        ("{plugin: 'm:C', options: [1]}", "$.plugins[0]: "),
        ("{plugin: 'm:C', opts: {}}", "$.plugins[0]: unknown key 'opts'"),
    ],
)
def test_bad_plugin_entry_shapes(entry, prefix):
    errors = errors_of(f"plugins: [{entry}]")
    assert len(errors) == 1, errors
    assert errors[0].startswith(prefix), errors


# ---------------------------------------------------------------------------------------------
# Secrets never appear in errors
# ---------------------------------------------------------------------------------------------

FAKE_KEY = "sk-test-FAKE0123456789abcdefghijkl"


@pytest.mark.parametrize(
    "text",
    [
        "server: {port: '${SECRET}'}",
        "server: {workers: '${SECRET}'}",
        "metrics: {max_model_labels: '${SECRET}'}",
        "server: {log_level: '${SECRET}'}",
        "providers: {p: {type: '${SECRET}'}}",
        "providers: {p: {type: openai, stream_usage: '${SECRET}'}}",
        "providers: {p: {type: openai, timeouts: {connect: '${SECRET}'}}}",
        "providers: {p: {type: mock}}\nmodels: {m: [{target: '${SECRET}'}]}",
        "providers: {p: {type: mock}}\nmodels: {m: [{target: '${SECRET}/model'}]}",
        "providers: {p: {type: mock}}\nmodels: {m: [{target: p/m, weight: '${SECRET}'}]}",
        "models: {m: '${SECRET}'}",
        "plugins: [{plugin: '${SECRET}', options: [1]}]",
    ],
)
def test_expanded_secrets_never_appear_in_errors(text):
    with pytest.raises(ConfigError) as info:
        parse_config(text, {"SECRET": FAKE_KEY})
    assert FAKE_KEY not in str(info.value)
    for error in info.value.errors:
        assert FAKE_KEY not in error
