"""The LiteLLM → Crossway translation, as pure trees: what each LiteLLM setting becomes, and
that whatever cannot be translated is reported with its path, never dropped."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from proxy.admin.migrate.litellm import translate
from proxy.admin.migrate.result import Translation
from proxy.runtime.config import parse_config


def run(text: str) -> Translation:
    return translate(yaml.safe_load(text))


def plugin(result: Translation, name: str) -> dict[str, Any]:
    found = [entry[name] for entry in result.config["plugins"] if name in entry]
    assert found, f"no {name} plugin in {result.config['plugins']}"
    return found[0]


def skipped(result: Translation) -> dict[str, str]:
    return {item.path: item.reason for item in result.untranslated}


def one(model: str, **params: Any) -> str:
    return yaml.safe_dump(
        {"model_list": [{"model_name": "m", "litellm_params": {"model": model, **params}}]}
    )


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("openai/gpt-4o", {"type": "openai", "api_key": "${OPENAI_API_KEY:-}"}),
        ("gpt-4o", {"type": "openai", "api_key": "${OPENAI_API_KEY:-}"}),
        ("anthropic/claude-3", {"type": "anthropic", "api_key": "${ANTHROPIC_API_KEY:-}"}),
        ("claude-3-haiku", {"type": "anthropic", "api_key": "${ANTHROPIC_API_KEY:-}"}),
        ("gemini/gemini-2.0-flash", {"type": "gemini", "api_key": "${GEMINI_API_KEY:-}"}),
        ("groq/llama", {"type": "openai", "preset": "groq", "api_key": "${GROQ_API_KEY:-}"}),
        ("mistral/x", {"type": "openai", "preset": "mistral", "api_key": "${MISTRAL_API_KEY:-}"}),
        (
            "openrouter/a/b",
            {"type": "openai", "preset": "openrouter", "api_key": "${OPENROUTER_API_KEY:-}"},
        ),
        ("hosted_vllm/q", {"type": "openai", "preset": "vllm"}),
        ("ollama/llama3", {"type": "openai", "preset": "ollama"}),
        ("bedrock/anthropic.claude-v2:1", {"type": "bedrock"}),
    ],
)
def test_each_provider_prefix_becomes_its_type_or_preset(
    model: str, provider: dict[str, Any]
) -> None:
    result = run(one(model))
    assert list(result.config["providers"].values()) == [provider]
    assert result.complete, result.untranslated


def test_targets_keep_the_upstream_model_name() -> None:
    result = run(one("openrouter/anthropic/claude-3.5-sonnet"))
    assert result.config["models"] == {"m": [{"target": "openrouter/anthropic/claude-3.5-sonnet"}]}
    result = run(one("bedrock/converse/meta.llama3-70b"))
    assert result.config["models"]["m"] == [{"target": "bedrock/meta.llama3-70b"}]


def test_environment_references_and_credentials() -> None:
    result = run(
        one(
            "azure/prod-gpt4o",
            api_base="os.environ/AZURE_BASE",
            api_key="os.environ/AZURE_KEY",
            api_version="2024-08-01-preview",
        )
    )
    assert result.config["providers"]["azure"] == {
        "type": "azure",
        "endpoint": "${AZURE_BASE}",
        "api_key": "${AZURE_KEY:-}",
        "api_version": "2024-08-01-preview",
    }
    assert result.config["models"]["m"] == [{"target": "azure/prod-gpt4o"}]


def test_azure_defaults_are_litellms_variables_and_an_unquoted_version_is_text() -> None:
    result = run(
        "model_list: [{model_name: m, litellm_params: {model: azure/d, api_version: 2024-10-21}}]"
    )
    provider = result.config["providers"]["azure"]
    assert provider["endpoint"] == "${AZURE_API_BASE}"
    assert provider["api_key"] == "${AZURE_API_KEY:-}"
    assert provider["api_version"] == "2024-10-21"


def test_azure_base_model_is_the_target_mapped_to_the_deployment() -> None:
    text = yaml.safe_dump(
        {
            "model_list": [
                {
                    "model_name": "gpt-4o",
                    "litellm_params": {"model": "azure/my-dep", "api_base": "https://a"},
                    "model_info": {"base_model": "azure/gpt-4o"},
                }
            ]
        }
    )
    result = run(text)
    assert result.config["providers"]["azure"]["deployments"] == {"gpt-4o": "my-dep"}
    assert result.config["models"]["gpt-4o"] == [{"target": "azure/gpt-4o"}]


def test_bedrock_aws_fields() -> None:
    result = run(
        one(
            "bedrock/x",
            aws_access_key_id="os.environ/AWS_ACCESS_KEY_ID",
            aws_secret_access_key="os.environ/AWS_SECRET_ACCESS_KEY",
            aws_session_token="os.environ/AWS_SESSION_TOKEN",
            aws_region_name="eu-west-1",
            aws_bedrock_runtime_endpoint="https://vpce",
            aws_role_name="arn:role",
        )
    )
    assert result.config["providers"]["bedrock"] == {
        "type": "bedrock",
        "region": "eu-west-1",
        "access_key_id": "${AWS_ACCESS_KEY_ID}",
        "secret_access_key": "${AWS_SECRET_ACCESS_KEY}",
        "session_token": "${AWS_SESSION_TOKEN}",
        "endpoint_url": "https://vpce",
    }
    assert "$.model_list[0].litellm_params.aws_role_name" in skipped(result)


def test_several_entries_one_alias_and_identical_credentials_one_provider() -> None:
    text = """
    model_list:
      - {model_name: fast, litellm_params: {model: openai/gpt-4o-mini, api_key: os.environ/K,
                                            rpm: 300}}
      - {model_name: fast, litellm_params: {model: groq/llama, rpm: 100}}
      - {model_name: big, litellm_params: {model: openai/gpt-4o, api_key: os.environ/K, tpm: 9000}}
      - {model_name: big, litellm_params: {model: openai/gpt-4o, api_key: os.environ/OTHER}}
    """
    result = run(text)
    assert list(result.config["providers"]) == ["openai", "groq", "openai-2"]
    assert result.config["models"]["fast"] == [
        {"target": "openai/gpt-4o-mini", "weight": 300},
        {"target": "groq/llama", "weight": 100},
    ]
    # without a weight on each, LiteLLM's shuffle weighs by rpm only when all have one
    assert result.config["models"]["big"] == [
        {"target": "openai/gpt-4o", "weight": 1},
        {"target": "openai-2/gpt-4o", "weight": 1},
    ]
    assert plugin(result, "balance")["limits"] == {
        "openai/gpt-4o-mini": {"rpm": 300},
        "groq/llama": {"rpm": 100},
        "openai/gpt-4o": {"tpm": 9000},
    }


def test_explicit_weights_win_and_the_same_target_twice_is_one_deployment() -> None:
    text = """
    model_list:
      - {model_name: m, litellm_params: {model: openai/a, weight: 3, rpm: 10}}
      - {model_name: m, litellm_params: {model: openai/a, weight: 1, rpm: 5}}
      - {model_name: m, litellm_params: {model: anthropic/b}}
    """
    result = run(text)
    assert result.config["models"]["m"] == [
        {"target": "openai/a", "weight": 4},
        {"target": "anthropic/b", "weight": 1},
    ]
    assert plugin(result, "balance")["limits"] == {"openai/a": {"rpm": 15}}


def test_order_becomes_fallback_aliases() -> None:
    text = """
    model_list:
      - {model_name: m, litellm_params: {model: openai/a, order: 2}}
      - {model_name: m, litellm_params: {model: anthropic/b, order: 1}}
      - {model_name: m, litellm_params: {model: gemini/c, order: 3}}
    """
    result = run(text)
    assert plugin(result, "fallback")["chains"] == {"m": ["m--order-2", "m--order-3"]}
    models = result.config["models"]
    assert models["m"] == [{"target": "anthropic/b"}]
    assert models["m--order-2"] == [{"target": "openai/a"}]
    assert models["m--order-3"] == [{"target": "gemini/c"}]


def test_order_chain_comes_before_configured_fallbacks() -> None:
    text = """
    model_list:
      - {model_name: m, litellm_params: {model: openai/a, order: 1}}
      - {model_name: m, litellm_params: {model: anthropic/b, order: 2}}
      - {model_name: n, litellm_params: {model: groq/d}}
    router_settings: {fallbacks: [{m: [n]}]}
    """
    result = run(text)
    assert plugin(result, "fallback")["chains"] == {"m": ["m--order-2", "n"]}


def test_timeouts_become_clocks_with_litellm_defaults() -> None:
    text = """
    model_list:
      - {model_name: a, litellm_params: {model: openai/a, timeout: 30, stream_timeout: 5}}
      - {model_name: b, litellm_params: {model: anthropic/b}}
    litellm_settings: {request_timeout: 600}
    """
    providers = run(text).config["providers"]
    assert providers["openai"]["timeouts"] == {"total": 30, "first_byte": 30, "idle": 5}
    assert providers["anthropic"]["timeouts"] == {"total": 600}


def test_prices_per_token_become_prices_per_million() -> None:
    text = yaml.safe_dump(
        {
            "model_list": [
                {
                    "model_name": "m",
                    "litellm_params": {"model": "openai/x"},
                    "model_info": {
                        "input_cost_per_token": 0.0000025,
                        "output_cost_per_token": 1e-05,
                        "cache_read_input_token_cost": 1.25e-06,
                        "max_tokens": 128000,
                    },
                }
            ]
        }
    )
    result = run(text)
    deployment = result.config["models"]["m"][0]
    assert deployment["prices"] == {"input": 2.5, "output": 10.0, "cache_read": 1.25}
    assert result.complete
    assert any("max_tokens" in note for note in result.notes)


def test_a_half_price_is_reported() -> None:
    result = run(
        "model_list: [{model_name: m, litellm_params: {model: openai/x}, "
        "model_info: {input_cost_per_token: 0.000001}}]"
    )
    assert "prices" not in result.config["models"]["m"][0]
    assert "$.model_list[0].model_info" in skipped(result)


def test_router_settings() -> None:
    text = """
    model_list:
      - {model_name: a, litellm_params: {model: openai/a}}
      - {model_name: b, litellm_params: {model: anthropic/b}}
      - {model_name: c, litellm_params: {model: gemini/c}}
    router_settings:
      routing_strategy: latency-based-routing
      num_retries: 4
      allowed_fails: 2
      cooldown_time: 600
      fallbacks: [{a: [b, c]}]
      context_window_fallbacks: [{a: [c, b]}]
      content_policy_fallbacks: [{b: [c]}]
      redis_host: os.environ/REDIS_HOST
      redis_port: 6380
      redis_password: os.environ/REDIS_PASSWORD
    """
    result = run(text)
    assert plugin(result, "balance") == {
        "strategy": "latency",
        "health": {"failures": 2, "cooldown": 600, "max_cooldown": 600},
    }
    assert plugin(result, "retry") == {"retries": 4, "max_retries": 5}
    assert plugin(result, "fallback") == {
        "chains": {"a": ["b", "c"]},
        "on_context_window": {"a": "c"},
        "on_content_policy": {"b": "c"},
    }
    assert result.config["state"] == {
        "backend": "redis",
        "redis": {"url": "redis://:${REDIS_PASSWORD}@${REDIS_HOST}:6380/0"},
    }
    assert "$.router_settings.context_window_fallbacks.a" in skipped(result)


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("simple-shuffle", "weighted"), ("least-busy", "least-busy"), ("cost-based-routing", "cost")],
)
def test_routing_strategies(strategy: str, expected: str) -> None:
    result = run(one("openai/a") + f"router_settings: {{routing_strategy: {strategy}}}\n")
    assert plugin(result, "balance")["strategy"] == expected


def test_usage_based_routing_is_reported() -> None:
    result = run(one("openai/a") + "router_settings: {routing_strategy: usage-based-routing-v2}\n")
    assert "strategy" not in plugin(result, "balance")
    assert "$.router_settings.routing_strategy" in skipped(result)


def test_retry_policy() -> None:
    text = one("openai/a") + (
        "router_settings: {retry_policy: {RateLimitErrorRetries: 3, TimeoutErrorRetries: 0, "
        "InternalServerErrorRetries: 1, AuthenticationErrorRetries: 2}}\n"
    )
    result = run(text)
    assert plugin(result, "retry") == {
        "on_timeout": False,
        "on_status": [429, 500, 502, 503, 504],
        "retries": 3,
        "max_retries": 5,
    }
    assert set(skipped(result)) == {
        "$.router_settings.retry_policy.AuthenticationErrorRetries",
        "$.router_settings.retry_policy",
    }


def test_litellm_settings_fallbacks_and_retries_when_the_router_has_none() -> None:
    text = """
    model_list:
      - {model_name: a, litellm_params: {model: openai/a}}
      - {model_name: b, litellm_params: {model: anthropic/b}}
    litellm_settings: {num_retries: 2, fallbacks: [{a: [b]}], default_fallbacks: [b]}
    """
    result = run(text)
    assert plugin(result, "retry")["retries"] == 2
    assert plugin(result, "fallback")["chains"] == {"a": ["b"]}


def test_unknown_fallback_models_are_reported() -> None:
    result = run(one("openai/a") + "router_settings: {fallbacks: [{m: [nowhere]}]}\n")
    assert "$.router_settings.fallbacks.m" in skipped(result)
    assert not any("fallback" in entry for entry in result.config["plugins"])


@pytest.mark.parametrize(
    ("params", "cache", "complete"),
    [
        ("{type: local, ttl: 60}", {"backend": "memory", "ttl": 60}, True),
        ("{type: redis, host: h, port: 1}", {"backend": "store"}, True),
        ("{type: redis, host: h, mode: default_off}", {"backend": "store", "mode": "opt_in"}, True),
        ("{type: redis-semantic, host: h}", {"backend": "store"}, False),
        ("{type: s3, s3_bucket_name: b}", {"backend": "memory"}, False),
    ],
)
def test_cache_types(params: str, cache: dict[str, Any], complete: bool) -> None:
    result = run(one("openai/a") + f"litellm_settings: {{cache: true, cache_params: {params}}}\n")
    assert plugin(result, "cache") == cache
    assert result.complete is complete, result.untranslated
    assert any("scoped by team" in note for note in result.notes)


def test_redis_cache_brings_its_redis() -> None:
    result = run(one("openai/a") + "litellm_settings: {cache: true, cache_params: {host: r}}\n")
    assert result.config["state"]["redis"]["url"] == "redis://r:6379/0"


def test_general_settings() -> None:
    text = one("openai/a") + (
        "general_settings: {master_key: os.environ/LITELLM_MASTER_KEY, "
        "database_url: os.environ/DATABASE_URL, disable_spend_logs: true}\n"
    )
    result = run(text)
    assert result.config["auth"] == {"master_key": "${LITELLM_MASTER_KEY}"}
    assert result.config["database"] == {"url": "${DATABASE_URL}"}
    names = [next(iter(entry)) for entry in result.config["plugins"]]
    assert names == ["auth", "limits", "cost", "balance"]
    assert plugin(result, "cost") == {"ledger": False}


def test_a_short_literal_master_key_is_replaced_and_reported() -> None:
    result = run(one("openai/a") + "general_settings: {master_key: sk-1234}\n")
    assert result.config["auth"] == {"master_key": "${CROSSWAY_MASTER_KEY}"}
    assert "$.general_settings.master_key" in skipped(result)


def test_what_has_no_equivalent_is_listed_with_its_path() -> None:
    text = """
    model_list:
      - model_name: m
        litellm_params: {model: vertex_ai/gemini-pro, vertex_project: p}
      - model_name: e
        litellm_params: {model: openai/sora-2}
        model_info: {mode: video_generation}
      - model_name: t
        litellm_params: {model: openai/a, temperature: 0.1}
    litellm_settings: {success_callback: [langfuse, prometheus], max_budget: 10}
    general_settings: {alerting: [slack]}
    guardrails: [{guardrail_name: g}]
    environment_variables: {A: b}
    something_new: 1
    """
    result = run(text)
    assert set(skipped(result)) == {
        "$.model_list[0].litellm_params.model",
        "$.model_list[1]",
        "$.model_list[2].litellm_params.temperature",
        "$.litellm_settings.success_callback",
        "$.litellm_settings.max_budget",
        "$.general_settings.alerting",
        "$.guardrails[0]",
        "$.environment_variables",
        "$.something_new",
    }
    assert any("prometheus" in note for note in result.notes)


def test_media_models_are_aliases_like_any_other() -> None:
    text = """
    model_list:
      - model_name: painter
        litellm_params: {model: openai/dall-e-3}
        model_info: {mode: image_generation}
      - model_name: listener
        litellm_params: {model: azure/whisper, api_base: "https://x.openai.azure.com"}
        model_info: {mode: audio_transcription}
    """
    result = run(text)
    assert set(result.config["models"]) == {"painter", "listener"}
    assert not any(path.startswith("$.model_list[0]") for path in skipped(result))


def test_wildcards() -> None:
    text = """
    model_list:
      - {model_name: "openai/*", litellm_params: {model: "openai/*"}}
      - {model_name: "*", litellm_params: {model: "anthropic/*"}}
    """
    result = run(text)
    assert set(result.config["providers"]) == {"openai", "anthropic"}
    assert result.config["models"] == {}
    assert list(skipped(result)) == ["$.model_list[1]"]


def test_credential_list_and_model_group_alias() -> None:
    text = """
    credential_list:
      - {credential_name: prod, credential_values: {api_key: os.environ/ANT}}
    model_list:
      - {model_name: claude, litellm_params: {model: anthropic/c, litellm_credential_name: prod}}
    router_settings: {model_group_alias: {claude-latest: claude}}
    """
    result = run(text)
    assert result.config["providers"]["anthropic"]["api_key"] == "${ANT:-}"
    assert result.config["models"]["claude-latest"] == result.config["models"]["claude"]
    assert result.complete


def test_not_a_mapping() -> None:
    assert skipped(translate(["x"])) == {"$": "a LiteLLM config is a mapping"}
    assert "$.model_list" in skipped(translate({"model_list": "x"}))


def test_a_translated_tree_is_a_valid_crossway_config() -> None:
    text = """
    model_list:
      - {model_name: a, litellm_params: {model: azure/d, api_base: https://x, api_key: k, rpm: 5}}
      - {model_name: a, litellm_params: {model: openai/gpt-4o, api_key: k2, order: 2}}
    router_settings: {routing_strategy: least-busy, num_retries: 2, allowed_fails: 1}
    litellm_settings: {cache: true, cache_params: {type: local}}
    """
    result = run(text)
    config = parse_config(yaml.safe_dump(result.config), {})
    assert set(config.models) == {"a", "a--unordered"}
    assert [spec.ref for spec in config.plugins] == ["cache", "fallback", "retry", "balance"]


def test_a_presidio_guardrail_becomes_the_masking_plugin() -> None:
    text = (
        one("openai/a")
        + """
guardrails:
  - guardrail_name: pii
    litellm_params:
      guardrail: presidio
      mode: during_call
      output_parse_pii: true
      pii_entities_config: {EMAIL_ADDRESS: MASK, CREDIT_CARD: BLOCK, PERSON: MASK}
  - guardrail_name: other
    litellm_params: {guardrail: aporia, mode: post_call}
"""
    )
    result = run(text)
    assert plugin(result, "masking") == {
        "entities": {"email": "mask", "credit_card": "block"},
        "output": "restore",
    }
    assert set(skipped(result)) == {
        "$.guardrails[0].litellm_params.pii_entities_config.PERSON",
        "$.guardrails[1]",
    }


def test_presidio_without_entities_masks_everything_and_keeps_placeholders() -> None:
    result = run(
        one("openai/a")
        + "guardrails: [{guardrail_name: p, litellm_params: {guardrail: presidio}}]\n"
    )
    masking = plugin(result, "masking")
    assert masking["output"] == "none"
    assert set(masking["entities"]) == {
        "email",
        "phone",
        "credit_card",
        "iban",
        "us_ssn",
        "ip_address",
    }
    assert set(masking["entities"].values()) == {"mask"}


def test_presidio_after_the_call_is_reported() -> None:
    result = run(
        one("openai/a")
        + "guardrails: [{guardrail_name: p,\n"
        + "              litellm_params: {guardrail: presidio, mode: logging_only}}]\n"
    )
    assert not any("masking" in entry for entry in result.config["plugins"])
    assert "$.guardrails[0].litellm_params.mode" in skipped(result)


def test_semantic_caches_become_the_semantic_cache_over_an_embedding_model() -> None:
    text = """
    model_list:
      - {model_name: chat, litellm_params: {model: openai/gpt-4o}}
      - model_name: embed
        litellm_params: {model: openai/text-embedding-3-small}
        model_info: {mode: embedding}
    litellm_settings:
      cache: true
      cache_params:
        type: redis-semantic
        host: r
        similarity_threshold: 0.8
        redis_semantic_cache_embedding_model: embed
    """
    result = run(text)
    assert result.config["models"]["embed"] == [{"target": "openai/text-embedding-3-small"}]
    assert plugin(result, "cache") == {
        "backend": "store",
        "semantic": {"embedding_model": "embed", "threshold": 0.8},
    }
    assert result.complete, result.untranslated
    qdrant = run(
        text.replace("redis-semantic", "qdrant-semantic").replace(
            "redis_semantic_cache_embedding_model", "qdrant_semantic_cache_embedding_model"
        )
    )
    assert plugin(qdrant, "cache")["semantic"] == {"embedding_model": "embed", "threshold": 0.8}
    assert any("Qdrant" in note for note in qdrant.notes)
