"""``tools/open_responses.py``, the compliance suite's runner, on what it does without the network:
the gateway it starts answers the Responses API and no longer answers once the block ends (it
is stopped by its PID); a
suite directory that is not a git checkout is refused (exit 2, the reason on stderr) before any
gateway starts; the zod version is the one the suite's ``bun.lock`` pins."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tools import open_responses


def test_the_gateway_answers_responses_on_the_mock_and_is_stopped_by_its_pid() -> None:
    with open_responses.gateway() as url:
        request = urllib.request.Request(
            f"{url}/v1/responses",
            data=json.dumps({"model": open_responses.MODEL, "input": "hi"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = json.loads(answer.read())
    assert (body["status"], body["model"]) == ("completed", "mock/tools")
    with pytest.raises(urllib.error.URLError, match="Connection refused"):
        urllib.request.urlopen(f"{url}/health/live", timeout=1)


def test_a_directory_that_is_not_a_checkout_is_refused_before_a_gateway_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bin").mkdir()
    assert open_responses.main(["--suite", str(tmp_path)]) == 2
    assert f"{tmp_path} is not a git checkout" in capsys.readouterr().err


def test_zod_is_the_version_the_suites_lock_pins(tmp_path: Path) -> None:
    (tmp_path / "bun.lock").write_text('{"packages": {"zod": ["zod@3.25.76", "", {}, "sha"]}}')
    assert open_responses.pinned_zod(tmp_path) == "3.25.76"
    (tmp_path / "bun.lock").write_text("{}")
    with pytest.raises(open_responses.StepFailed, match="pins no zod"):
        open_responses.pinned_zod(tmp_path)
