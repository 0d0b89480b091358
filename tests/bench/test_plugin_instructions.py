"""bench/plugin_instructions.py: the arithmetic, the callgrind file it reads, and the whole
command through a stand-in for valgrind that runs the real child and writes a summary whose
count grows with the requests the child was asked for (no instruction count is asserted of
the gateway's code)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import plugin_instructions
from bench.plugin_instructions import instructions, per_request, run_chain

# A stand-in for valgrind: runs the command it is given, then writes a callgrind summary of
# 1,000,000 + 1,000 per request (+ 500 per request more for the plugins chain); it refuses to
# count a run whose string hashes are not seeded as the command's are.
FAKE_VALGRIND = """\
import os, subprocess, sys
if os.environ.get("PYTHONHASHSEED") != "0":
    sys.exit("the string hashes are not seeded")
args = sys.argv[1:]
out = next(a.split("=", 1)[1] for a in args if a.startswith("--callgrind-out-file="))
command = args[2:]  # after --tool and --callgrind-out-file
subprocess.run(command, check=True)
requests = int(command[command.index("--requests") + 1])
per = 1500 if command[command.index("--child") + 1] == "plugins" else 1000
open(out, "w").write(f"events: Ir\\nsummary: {1_000_000 + per * requests}\\n")
"""


def test_per_request_is_the_slope_of_two_runs() -> None:
    assert per_request((500, 10_000_000), (1500, 13_000_000)) == 3000
    with pytest.raises(ValueError, match="more requests"):
        per_request((1500, 1), (500, 2))


def test_the_total_comes_from_the_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out"
    out.write_text("version: 1\nevents: Ir\nsummary: 123456789\ntotals: 123456789\n")
    assert instructions(out) == 123_456_789
    out.write_text("events: Ir\n")
    with pytest.raises(ValueError, match="no callgrind summary"):
        instructions(out)


@pytest.mark.parametrize("mode", ["non-stream", "stream", "relay"])
def test_the_child_runs_each_chain_in_each_mode(mode: str) -> None:
    for chain in ("empty", "plugins"):
        run_chain("auth", chain, mode, 3)


def test_the_command_counts_through_callgrind_s_files(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # the command seeds its runs itself
    fake = tmp_path / "valgrind"
    fake.write_text(f"#!{sys.executable}\n{FAKE_VALGRIND}")
    fake.chmod(0o755)
    monkeypatch.setattr(plugin_instructions.shutil, "which", lambda name: str(fake))
    status = plugin_instructions.main(
        ["--plugins", "cost", "--modes", "non-stream", "--requests", "2,4"]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "non-stream" in printed
    assert "empty chain     1.0k" in printed
    assert "cost    0.5k" in printed


def test_without_valgrind_the_command_says_so(monkeypatch, capsys) -> None:
    monkeypatch.setattr(plugin_instructions.shutil, "which", lambda name: None)
    assert plugin_instructions.main(["--plugins", "auth", "--modes", "stream"]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err
