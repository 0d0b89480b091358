"""crossway keys / teams: the admin operations on the config's database, without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.server.cli import main


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f'database: {{url: "sqlite:///{tmp_path}/crossway.db"}}\n'
        "auth: {teams: {search: {models: [fast]}}}\n"
        "providers: {mock: {type: mock}}\n"
    )
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_teams_and_keys_from_the_command_line(config: Path, capsys):
    c = str(config)
    assert run(capsys, "teams", "create", "--config", c, "eng", "--rpm", "5")[0] == 0
    status, out, _ = run(capsys, "teams", "list", "--config", c, "--json")
    assert [t["id"] for t in json.loads(out)["data"]] == ["search", "eng"]
    status, key, err = run(
        capsys, "keys", "create", "--config", c, "--team", "eng", "--alias", "bot",
        "--models", "a,b", "--tpm", "100", "--expires-at", "2099-01-01T00:00:00Z",
    )  # fmt: skip
    assert status == 0
    assert key.strip().startswith("sk-cw-")
    assert "shown only once" in err
    status, table, _ = run(capsys, "keys", "list", "--config", c, "--team", "eng")
    assert "bot" in table
    assert "a,b" in table
    assert key.strip() not in table
    key_id = table.splitlines()[1].split()[0]
    assert run(capsys, "teams", "delete", "--config", c, "eng")[0] == 1  # it has a key
    assert run(capsys, "keys", "revoke", "--config", c, key_id) == (0, f"revoked {key_id}\n", "")
    assert run(capsys, "teams", "delete", "--config", c, "eng")[0] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("keys", "create", "--rpm", "0"), "Expected `int` >= 1 - at `--rpm`"),
        (("keys", "create", "--team", "search", "--models", "slow"), "may not use 'slow'"),
        (("keys", "revoke", "nope"), "no key 'nope'"),
        (("teams", "delete", "search"), "declared in the config file"),
    ],
)
def test_errors_are_one_line_and_exit_1(config: Path, capsys, args, message):
    status, _, err = run(capsys, *args[:2], "--config", str(config), *args[2:])
    assert status == 1
    assert message in err
    assert err.count("\n") == 1
