"""Smoke test of the benchmark harness: mock upstream, passthrough and driver, no timings."""

from contextlib import ExitStack
from pathlib import Path

import yaml

from bench import aio
from bench.matrix import Cell, CellResult, Settings, run_cell
from bench.targets import gateway_config_yaml, start_passthrough, start_upstream

_SETTINGS = Settings(duration_s=0.5, warmup_s=0.1, max_requests=20_000, request_timeout_s=5.0)


async def _measure_passthrough(stack: ExitStack, scratch: Path) -> list[CellResult]:
    upstream = await start_upstream(stack, scratch)
    passthrough = await start_passthrough(stack, scratch, upstream)
    return [
        await run_cell(Cell("passthrough", stream, 0, 2), passthrough, _SETTINGS)
        for stream in (False, True)
    ]


def test_passthrough_serves_both_modes_without_errors(tmp_path: Path) -> None:
    with ExitStack() as stack:
        results = aio.run(_measure_passthrough(stack, tmp_path))
    for result in results:
        assert result.errors == {}, result.cell.mode
        assert result.requests > 0, result.cell.mode
        assert result.cpu_ms_per_request is not None
    assert results[1].ttfb_p50_ms is not None


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
