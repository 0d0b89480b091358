"""``tools/open_responses.py``, the compliance suite's runner, on what it does without the network:
the gateway it starts answers the Responses API and no longer answers once the block ends (it
is stopped by its PID); a
suite directory that is not a git checkout is refused (exit 2, the reason on stderr) before any
gateway starts; the zod version is the one the suite's ``bun.lock`` pins. With ``--unpinned``
a directory is run as it is when it holds the suite's entry point (said on stdout: the result is
not tied to the pinned commit), refused otherwise, and without a ``bun.lock`` zod is the exact
version its ``package.json`` names."""

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


def test_unpinned_refuses_a_directory_without_the_suites_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert open_responses.main(["--suite", str(tmp_path), "--unpinned"]) == 2
    assert f"{tmp_path} holds no bin/compliance-test.ts" in capsys.readouterr().err


def test_unpinned_accepts_a_plain_directory_and_says_the_result_is_not_pinned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "compliance-test.ts").write_text("")
    open_responses.accept_unpinned(tmp_path)
    said = capsys.readouterr().out
    assert f"{tmp_path} is run as it is (--unpinned)" in said
    assert f"not tied to the pinned commit {open_responses.SUITE_COMMIT}" in said


def test_unpinned_without_a_lock_takes_the_exact_zod_of_package_json(tmp_path: Path) -> None:
    with pytest.raises(open_responses.StepFailed, match=r"has no bun\.lock"):
        open_responses.pinned_zod(tmp_path)
    with pytest.raises(open_responses.StepFailed, match=r"no readable package\.json"):
        open_responses.pinned_zod(tmp_path, unpinned=True)
    (tmp_path / "package.json").write_text('{"dependencies": {"zod": "^3.25.76"}}')
    with pytest.raises(open_responses.StepFailed, match="no exact zod version"):
        open_responses.pinned_zod(tmp_path, unpinned=True)
    (tmp_path / "package.json").write_text('{"dependencies": {"zod": "3.25.76"}}')
    assert open_responses.pinned_zod(tmp_path, unpinned=True) == "3.25.76"
    (tmp_path / "bun.lock").write_text('{"packages": {"zod": ["zod@3.24.1", "", {}, "sha"]}}')
    assert open_responses.pinned_zod(tmp_path, unpinned=True) == "3.24.1"
