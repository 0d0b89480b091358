"""``crossway import litellm``: what it writes, what it prints, and its exit status."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.admin.migrate.cli import placeholder
from proxy.server.cli import main

COMPLETE = """
model_list:
  - {model_name: fast, litellm_params: {model: openai/gpt-4o-mini, api_key: os.environ/MY_KEY}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "litellm.yaml"
    path.write_text(text)
    return path


def test_everything_translated_writes_a_valid_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MY_KEY", raising=False)
    output = tmp_path / "crossway.yaml"
    assert main(["import", "litellm", str(write(tmp_path, COMPLETE)), "-o", str(output)]) == 0
    out = capsys.readouterr().out
    assert "everything translated" in out
    assert "checked with placeholders for unset variables: MY_KEY" in out
    assert f"config {output}: ok" in out
    assert "fast -> openai/gpt-4o-mini" in out
    config = yaml.safe_load(output.read_text())
    assert config["providers"]["openai"]["api_key"] == "${MY_KEY:-}"
    # the written file is what crossway check accepts, with the variable set
    monkeypatch.setenv("MY_KEY", "sk-real")
    assert main(["check", "--config", str(output)]) == 0


def test_untranslated_settings_are_listed_and_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path, COMPLETE + "litellm_settings: {success_callback: [langfuse]}\n")
    output = tmp_path / "crossway.yaml"
    assert main(["import", "litellm", str(source), "-o", str(output)]) == 3
    out = capsys.readouterr().out
    assert "not translated (1):" in out
    assert "$.litellm_settings.success_callback: callback 'langfuse'" in out
    written = output.read_text()
    assert "# Not translated" in written
    assert "#   $.litellm_settings.success_callback" in written


def test_without_output_the_config_goes_to_stdout_and_the_report_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", "litellm", str(write(tmp_path, COMPLETE))]) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["models"] == {"fast": [{"target": "openai/gpt-4o-mini"}]}
    assert "everything translated" in captured.err


def test_an_invalid_result_exits_1_with_every_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(
        tmp_path,
        COMPLETE + "litellm_settings: {cache: true, cache_params: {type: local, ttl: -5}}\n",
    )
    assert main(["import", "litellm", str(source), "-o", str(tmp_path / "out.yaml")]) == 1
    out = capsys.readouterr().out
    assert "1 error(s)" in out
    assert "ttl" in out


def test_unreadable_sources_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "litellm", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["import", "litellm", str(write(tmp_path, "model_list: [\n"))]) == 1
    assert "not valid YAML" in capsys.readouterr().err


def test_bad_arguments_exit_2() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["import", "portkey", "x.yaml"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REDIS_PORT", "6379"),
        ("REDIS_HOST", "127.0.0.1"),
        ("DATABASE_URL", "postgresql://placeholder@127.0.0.1/placeholder"),
        ("AZURE_API_BASE", "https://placeholder.invalid"),
        ("AWS_REGION_NAME", "us-east-1"),
    ],
)
def test_placeholders_have_the_shape_of_the_variable(name: str, value: str) -> None:
    assert placeholder(name) == value
    assert len(placeholder("LITELLM_MASTER_KEY")) >= 32
