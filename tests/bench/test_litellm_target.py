"""The opt-in ``litellm`` bench target: its config is what Crossway's importer reads as the
gateway target's, and without LiteLLM installed it fails saying how to install it."""

from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from bench import aio
from bench import litellm as litellm_target
from bench.processes import HarnessError
from bench.targets import Server
from proxy.admin.migrate.litellm import translate


def test_the_litellm_config_routes_the_bench_model_to_the_mock() -> None:
    translation = translate(yaml.safe_load(litellm_target.litellm_config_yaml(8123)))
    config = translation.config
    assert config["providers"]["openai"]["base_url"] == "http://127.0.0.1:8123/v1"
    assert config["models"] == {"upstream/bench-model": [{"target": "openai/bench-model"}]}


def test_without_litellm_installed_the_target_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(litellm_target, "LITELLM_BIN", litellm_target.REPO_ROOT / "no-such-bin")
    with ExitStack() as stack, pytest.raises(HarnessError, match="make setup-litellm"):
        aio.run(litellm_target.start_litellm(stack, tmp_path, Server(pid=0, port=1)))
