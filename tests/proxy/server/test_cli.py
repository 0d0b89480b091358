"""proxy/server/cli.py: what ``crossway check`` says about prices (the rest runs as a process in
tests/e2e/test_process.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from proxy.runtime.config import ConfigError
from proxy.server.cli import check

CONFIG = """
providers:
  up: {type: openai, base_url: "http://127.0.0.1:9/v1", default_model: house-model}
  mock: {type: mock}
models:
  known: [{target: up/gpt-4o-mini}]
  own: [{target: up/my-finetune, prices: {input: 1, output: 1}}]
  mystery: [{target: up/my-other-finetune}, {target: mock/echo}]
"""


def test_check_flags_every_configured_model_without_a_price(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG)
    out = io.StringIO()
    assert check(path, out) == 0
    text = out.getvalue()
    assert "prices: catalog " in text
    flagged = [line.split()[2] for line in text.splitlines() if "NO PRICE" in line]
    assert flagged == ["up/house-model", "up/my-other-finetune"]


def test_a_broken_catalog_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "prices.yaml").write_text("openai:\n  gpt-4o: {input: 1}\n")
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG)
    with pytest.raises(ConfigError) as caught:
        check(path, io.StringIO())
    assert caught.value.errors[0].startswith("$.pricing.catalog: ")
    assert "$.openai.gpt-4o: Object missing required field `output`" in caught.value.errors[0]
