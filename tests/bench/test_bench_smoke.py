"""Smoke test of the benchmark harness: mock upstream, passthrough and driver, no timings."""

import io
import json
from contextlib import ExitStack
from pathlib import Path

import yaml

from bench import aio
from bench.driver import request_body
from bench.matrix import DIRECT, CellResult, Settings, _comparable_groups, plan, run_matrix
from bench.targets import (
    AUTH_KEY,
    KEYED_VARIANTS,
    REPO_ROOT,
    gateway_config_yaml,
    start_passthrough,
    start_upstream,
)
from proxy.core.metrics import Metrics
from proxy.runtime.config import load_config
from proxy.runtime.plugins import BUILTINS
from proxy.runtime.snapshot import Loader

_SETTINGS = Settings(
    duration_s=0.6, warmup_s=0.1, max_requests=20_000, request_timeout_s=5.0, rounds=2
)


async def _measure_passthrough(stack: ExitStack, scratch: Path) -> list[CellResult]:
    upstream = await start_upstream(stack, scratch)
    passthrough = await start_passthrough(stack, scratch, upstream)
    cells = plan(("passthrough",), (False, True), (0,), (1, 2))
    servers = {DIRECT: upstream, "passthrough": passthrough}
    return await run_matrix(cells, servers, upstream, _SETTINGS, lambda result: None)


def test_passthrough_serves_both_modes_without_errors_in_interleaved_rounds(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        results = aio.run(_measure_passthrough(stack, tmp_path))
    assert [(r.cell.target, r.cell.stream, r.cell.concurrency) for r in results] == [
        (DIRECT, False, 1),
        ("passthrough", False, 1),
        ("passthrough", False, 2),
        (DIRECT, True, 1),
        ("passthrough", True, 1),
        ("passthrough", True, 2),
    ]
    for result in results:
        assert result.errors == {}, result.cell
        assert result.requests > 0, result.cell
        assert result.cpu_ms_per_request is not None
        assert result.wall_s > 0.4, "two slices of 0.3 s each"
    assert results[-1].ttfb_p50_ms is not None


def test_cells_that_differ_only_by_target_are_measured_together() -> None:
    cells = plan(("passthrough", "gateway"), (False,), (0,), (1, 64))
    groups = _comparable_groups(cells)
    assert [[(c.target, c.concurrency) for c in group] for group in groups] == [
        [(DIRECT, 1), ("passthrough", 1), ("gateway", 1)],
        [("passthrough", 64), ("gateway", 64)],
    ]


def test_gateway_config_is_valid_yaml() -> None:
    assert yaml.safe_load(gateway_config_yaml(8080, 9090)) == {
        "server": {"host": "127.0.0.1", "port": 8080, "workers": 1, "access_log": False},
        "providers": {
            "upstream": {
                "type": "openai",
                "base_url": "http://127.0.0.1:9090/v1",
                "api_key": "bench-key",
            }
        },
        "plugins": [],
    }


def test_the_shipped_variant_runs_the_default_config_s_chain(tmp_path: Path) -> None:
    config_path = tmp_path / "gateway-default.yaml"
    config_path.write_text(gateway_config_yaml(8080, 9090, variant="gateway-default"))
    bench = load_config(config_path)
    shipped = load_config(REPO_ROOT / "config" / "gateway.yaml")
    assert [spec.ref for spec in bench.plugins] == [spec.ref for spec in shipped.plugins]
    assert bench.server.access_log is shipped.server.access_log is True
    Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()  # its plugins load too


def test_the_cost_variant_prices_every_reply_of_the_bench_model(tmp_path: Path) -> None:
    config_path = tmp_path / "gateway-cost.yaml"
    config_path.write_text(gateway_config_yaml(8080, 9090, variant="gateway-cost"))
    blueprint = Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()
    assert [spec.ref for spec in blueprint.config.plugins] == ["cost"]
    assert blueprint.prices.price("upstream", "bench-model") is not None
    assert blueprint.config.server.access_log is False  # the plugin alone is measured


def test_the_masking_variant_runs_the_masking_plugin(tmp_path: Path) -> None:
    config_path = tmp_path / "gateway-masking.yaml"
    config_path.write_text(gateway_config_yaml(8080, 9090, variant="gateway-masking"))
    bench = load_config(config_path)
    assert [spec.ref for spec in bench.plugins] == ["masking"]
    assert len(bench.plugins[0].options["entities"]) == 7
    Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()


def test_the_guardrails_variant_runs_secrets_and_keywords_both_ways(tmp_path: Path) -> None:
    config_path = tmp_path / "gateway-guardrails.yaml"
    config_path.write_text(gateway_config_yaml(8080, 9090, variant="gateway-guardrails"))
    bench = load_config(config_path)
    assert [spec.ref for spec in bench.plugins] == ["guardrails"]
    assert {name: check.on for name, check in bench.guardrails.items()} == {
        "no-secrets": "both",
        "competitors": "both",
    }
    Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()


def test_a_conversation_of_about_the_bytes_asked() -> None:
    plain = json.loads(request_body(False))
    padded = json.loads(request_body(False, 2048))
    text = sum(len(message["content"]) for message in padded["messages"])
    assert 2048 <= text < 2048 + 300
    assert padded["messages"][-1] == plain["messages"][-1]
    assert padded["messages"][0] == plain["messages"][0]


def test_the_auth_variant_admits_its_key_within_limits(tmp_path: Path) -> None:
    config_path = tmp_path / "gateway-auth.yaml"
    database = tmp_path / "auth.db"
    config_path.write_text(
        gateway_config_yaml(8080, 9090, variant="gateway-auth", database=database)
    )
    blueprint = Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()
    assert [spec.ref for spec in blueprint.config.plugins] == ["auth", "limits"]
    assert blueprint.config.database.url == f"sqlite:///{database}"
    (declared,) = blueprint.config.auth.keys
    assert declared.key == AUTH_KEY
    assert declared.team == "bench"
    assert declared.rpm
    assert blueprint.config.auth.teams["bench"].max_parallel


def test_the_budget_variant_adds_the_cost_plugin_to_the_keyed_one_for_a_key_with_budgets(
    tmp_path: Path,
) -> None:
    chains = {}
    for name in ("gateway-keyed", "gateway-budget"):
        config_path = tmp_path / f"{name}.yaml"
        database = tmp_path / f"{name}.db"
        config_path.write_text(gateway_config_yaml(8080, 9090, variant=name, database=database))
        blueprint = Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()
        chains[name] = [spec.ref for spec in blueprint.config.plugins]
        assert blueprint.config.database.url == f"sqlite:///{database}"
        (declared,) = blueprint.config.auth.keys
        assert declared.key == AUTH_KEY
        assert declared.budget is not None
        assert declared.rpm is None  # no limits: the limits plugin is not in either chain
        assert blueprint.config.auth.teams["bench"].budget is not None
        assert blueprint.prices.price("upstream", "bench-model") is not None
    assert chains == {"gateway-keyed": ["auth"], "gateway-budget": ["auth", "cost"]}
    assert {"gateway-keyed", "gateway-budget"} <= set(KEYED_VARIANTS)


def test_the_cache_variants_run_the_cache_plugin_alone(tmp_path: Path) -> None:
    for name in ("gateway-cache", "gateway-cache-miss"):
        config_path = tmp_path / f"{name}.yaml"
        config_path.write_text(gateway_config_yaml(8080, 9090, variant=name))
        blueprint = Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()
        assert [spec.ref for spec in blueprint.config.plugins] == ["cache"]
        assert blueprint.config.server.access_log is False  # the plugin alone is measured


def test_the_governance_variants_run_issue_16s_chain_with_redis_or_without(tmp_path: Path) -> None:
    chain = ["auth", "limits", "cost", "cache", "fallback", "retry", "balance"]
    for name, redis_url in (("gateway-gov", None), ("gateway-gov-redis", "redis://127.0.0.1:1/0")):
        config_path = tmp_path / f"{name}.yaml"
        config_path.write_text(
            gateway_config_yaml(
                8080, 9090, variant=name, database=tmp_path / "gov.db", redis_url=redis_url
            )
        )
        config = load_config(config_path)
        assert [spec.ref for spec in config.plugins] == chain
        assert config.plugins[3].options == {
            "backend": "store",
            "max_entry_bytes": 1,
            "coalesce": False,
        }, "every request a miss, looked up in the state store"
        assert config.state.backend == ("memory" if redis_url is None else "redis")
        Loader(config_path, BUILTINS, Metrics(), io.StringIO()).load()
