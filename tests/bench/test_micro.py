"""``python -m bench.micro``: every command and every ``plugins`` measure runs on a tiny count and
prints a well-formed report (no figure of the gateway's code is asserted), and the logic the
figures rest on: the cache evictor, the untimed eviction, the canned streams' length, the
callgrind arithmetic and file, the exactness of the opcode count, the masking chain's round
trip. ``--measure instructions`` runs through a stand-in for valgrind that runs the real child
and writes a summary whose count grows with the requests the child was asked for."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.micro import chains as chains_module
from bench.micro import cli, plugins
from bench.micro.chains import PLUGINS, PROMPTS, cases, chains, label
from bench.micro.harness import MODES, CacheEvictor, cpu_per_request
from bench.micro.instructions import instructions, per_request, run_chain
from bench.micro.opcodes import OpcodeCount, count_chain
from bench.targets import REPO_ROOT
from proxy.core.reply import RawFrames, batched

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


def _lines(printed: str, plugin_set: str) -> list[str]:
    """The report's case lines, checked to be one per case, in order."""
    lines = [line for line in printed.splitlines() if "  empty chain " in line]
    names = [case.name for case in cases(plugin_set)]
    assert [line.split("  empty chain")[0].strip() for line in lines] == [
        name.strip() for name in names
    ]
    return lines


# The command line.


def test_the_command_lists_its_commands_runs_plugins_by_default_and_refuses_an_unknown_one(
    capsys,
) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "bench.micro", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for command in cli.COMMANDS:
        assert f"  {command} " in shown
    assert cli.main(["--requests", "2", "--rounds", "1", "--modes", "non-stream"]) == 0
    assert "with cost" in capsys.readouterr().out  # no command: plugins
    assert cli.main(["plugin_cpu"]) == 2
    assert "unknown command 'plugin_cpu'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (["--evict-mib", "-1"], "must not be negative"),
        (["--chunks", "0"], "multiple of 5"),
        (["--chunks", "7"], "multiple of 5"),
        (["--modes", "whole"], "unknown mode"),
        (["--measure", "opcodes", "--requests", "0"], "at least 1"),
        (["--measure", "opcodes", "--rounds", "2"], "--rounds goes with --measure cpu"),
        (["--measure", "instructions", "--requests", "5"], "two counts"),
    ],
)
def test_bad_plugins_arguments_are_refused(bad: list[str], said: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["plugins", *bad])
    assert exited.value.code == 2
    assert said in capsys.readouterr().err


# plugins --measure cpu


@pytest.mark.parametrize("plugin_set", PLUGINS)
def test_the_cpu_measure_prints_every_case_of_every_plugin_set(plugin_set: str, capsys) -> None:
    status = cli.main(["plugins", "--plugins", plugin_set, "--requests", "3", "--rounds", "1"])
    assert status == 0
    printed = capsys.readouterr().out
    assert printed.startswith(
        "CPU per request, median of 1 interleaved rounds of 3, warm caches, 20-chunk streams:"
    )
    name = re.escape(label(plugin_set))
    for line in _lines(printed, plugin_set):
        assert re.search(rf"with {name} +[\d.]+ µs   {name} +-?[\d.]+ µs \(rounds ", line)


def test_the_cpu_measure_evicts_the_caches_and_takes_the_stream_length(capsys) -> None:
    argv = ["--plugins", "auth", "--requests", "5", "--rounds", "2", "--evict-mib", "0.01"]
    assert cli.main(["plugins", *argv, "--chunks", "70"]) == 0
    printed = capsys.readouterr().out
    assert "caches evicted (0.01 MiB), 70-chunk streams" in printed
    assert len(_lines(printed, "auth")) == len(MODES)
    assert "auth+limits" in printed


def test_the_evictor_writes_one_byte_in_every_cache_line() -> None:
    evictor = CacheEvictor(10 * CacheEvictor.LINE + 1)
    evictor()
    buffer = evictor._buffer
    touched = [offset for offset, byte in enumerate(buffer) if byte]
    assert touched == list(range(0, len(buffer), CacheEvictor.LINE))
    with pytest.raises(ValueError, match="at least 64 bytes"):
        CacheEvictor(CacheEvictor.LINE - 1)


@pytest.mark.parametrize("stream", [False, True])
async def test_with_eviction_every_request_runs_to_its_end_and_the_eviction_is_not_timed(
    stream: bool,
) -> None:
    chain = chains("cost-budget")["plugins"]
    ended = evictions = 0
    one = chain.one

    async def counted(streamed: bool) -> None:
        nonlocal ended
        await one(streamed)
        ended += 1

    def slow_evict() -> None:  # burns CPU a request would show if it were timed
        nonlocal evictions
        evictions += 1
        until = time.process_time() + 0.002
        while time.process_time() < until:
            pass

    chain.one = counted  # type: ignore[method-assign]
    timed = await cpu_per_request(chain, stream, 20, slow_evict)
    await chain.close()
    assert ended == evictions == 20
    assert 0 < timed < 2000  # µs per request: 2 ms of eviction after each would show as more


@pytest.mark.parametrize("relay", [False, True])
async def test_a_stream_request_carries_as_many_chunks_as_asked(relay: bool) -> None:
    upstream = chains_module._Upstream(relay, chunks=130)
    reply = await upstream(chains_module._call(stream=True))
    source = batched(reply.stream)  # type: ignore[arg-type]
    chunks = usage = 0
    while batch := await source.next_batch(True):
        for item in batch:
            if isinstance(item, RawFrames):
                chunks += item.count
            elif item.usage is not None:
                usage += 1
            else:
                chunks += 1
    assert (chunks, usage) == (130, 1)


@pytest.mark.parametrize("relay", [False, True])
async def test_the_masking_chain_masks_the_upstream_s_call_and_restores_the_reply(
    relay: bool,
) -> None:
    prompt = PROMPTS["2 values"]
    chain = chains("masking", relay, prompt="2 values")["plugins"]
    call = chain.call(True)
    reply = await chain.run(call)
    assert call.messages[-1].content != prompt  # the upstream got placeholders
    assert reply.stream is not None
    texts = [c.choices[0].delta.content async for c in reply.stream if c.choices]
    assert "".join(t or "" for t in texts) == prompt


# plugins --measure opcodes


def test_the_opcodes_measure_prints_every_mode_and_the_functions_that_grew(capsys) -> None:
    argv = ["--measure", "opcodes", "--plugins", "cost", "--requests", "1", "--show", "2"]
    assert cli.main(["plugins", *argv]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Python opcodes per request, 20-chunk streams:")
    lines = printed.splitlines()
    for line in _lines(printed, "cost"):
        at = lines.index(line)
        assert re.fullmatch(r" +\d+  \S+", lines[at + 1])  # the functions that grew most
        assert re.fullmatch(r" +\d+  \S+", lines[at + 2])


def _work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i
    return total


def test_the_same_work_counts_the_same_and_twice_the_work_twice() -> None:
    counts = []
    for calls in (1, 1, 2):
        with OpcodeCount() as count:
            for _ in range(calls):
                _work(10)
        counts.append(count.by_function["_work"])
    once, again, twice = counts
    assert once == again > 10
    assert twice == 2 * once
    _work(10)  # after the block: not counted
    assert count.by_function["_work"] == twice


async def test_two_counts_of_a_chain_agree_but_for_the_loop_timer_heap() -> None:
    first = await count_chain(chains("cost-budget")["plugins"], True, 2)
    second = await count_chain(chains("cost-budget")["plugins"], True, 2)
    for count in (first, second):
        del count.by_function["TimerHandle.__lt__"]  # the timers earlier chains left pending
    assert first.by_function == second.by_function
    assert first.by_function["CostPlugin.__call__"] > 0


# plugins --measure instructions


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


@pytest.mark.parametrize("mode", list(MODES))
def test_the_child_runs_each_chain_in_each_mode(mode: str) -> None:
    for plugin_set, prompt in (("auth", None), ("masking", "2 values")):
        for chain in ("empty", "plugins"):
            run_chain(plugin_set, chain, mode, 3, prompt=prompt)


def test_the_instructions_measure_counts_through_callgrind_s_files(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # the command seeds its runs itself
    monkeypatch.chdir(REPO_ROOT)  # the children run ``python -m bench.micro.instructions``
    fake = tmp_path / "valgrind"
    fake.write_text(f"#!{sys.executable}\n{FAKE_VALGRIND}")
    fake.chmod(0o755)
    monkeypatch.setattr(plugins.shutil, "which", lambda name: str(fake))
    argv = ["--measure", "instructions", "--modes", "non-stream", "--requests", "2,4"]
    assert cli.main(["plugins", *argv, "--plugins", "cost"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(
        "Instructions per request (callgrind; runs of 2 and 4), 20-chunk streams:"
    )
    (line,) = printed.splitlines()[1:]
    assert line.startswith("  non-stream  empty chain     1.0k")
    assert line.endswith("cost    0.5k")


def test_without_valgrind_the_instructions_measure_says_so(monkeypatch, capsys) -> None:
    monkeypatch.setattr(plugins.shutil, "which", lambda name: None)
    argv = ["--measure", "instructions", "--plugins", "auth", "--modes", "stream"]
    assert cli.main(["plugins", *argv]) == 2
    assert "valgrind is not installed" in capsys.readouterr().err


# The other commands.


def test_dialects_prints_every_dialect_in_both_modes(capsys) -> None:
    assert cli.main(["dialects", "--requests", "3", "--rounds", "1"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["mode", "dialect", "cpu_us/req", "x", "openai"]
    dialects = ["openai", "anthropic", "responses", "responses+store"]
    assert [row.split()[:2] for row in rows] == [
        [mode, dialect] for mode in ("non-stream", "stream") for dialect in dialects
    ]
    assert all(float(row.split()[2]) > 0 for row in rows)


def test_pii_prints_every_figure_against_its_target(capsys) -> None:
    assert cli.main(["pii", "--repeat", "1"]) in (0, 1)  # 1: a target missed (not asserted)
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["figure", "median", "best", "target"]
    assert len(rows) == 4 + 10  # scan, mask, two restores; ten pathological inputs
    assert all(re.search(r"[\d.]+ (us|ms) +[\d.]+ (us|ms)  ", row) for row in rows)
    assert sum("pathological" in row and row.endswith("linear") for row in rows) == 10


def test_cache_lookup_prints_a_2kb_miss_s_lookup_and_store(capsys) -> None:
    assert cli.main(["cache-lookup"]) == 0
    printed = capsys.readouterr().out
    found = re.search(r"(\d+) B request.*lookup ([\d.]+) µs, store ([\d.]+) µs", printed)
    assert found is not None, printed
    size, lookup, store = found.groups()
    assert int(size) >= 2048
    assert float(lookup) > 0
    assert float(store) > 0


def test_semantic_finds_every_noisy_copy_and_makes_real_embedding_calls(capsys) -> None:
    # 2,600 entries: more than the index searches exactly (EXACT_LIMIT), so in two steps
    status = cli.main(["semantic", "--entries", "2600", "--embedding-calls", "5"])
    assert status in (0, 1)  # 1: a search over its CPU target (not asserted)
    printed = capsys.readouterr().out
    assert printed.count("recall 100%") == 4
    found = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms wall", printed)
    assert found is not None, printed
    p50, p99 = map(float, found.groups())
    assert 0 < p50 <= p99


def test_ledger_writes_every_record_into_sqlite(capsys) -> None:
    assert cli.main(["ledger", "--records", "200", "--rounds", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("ledger into SQLite, 1 rounds of 200 records: median ")
    assert "records/s" in printed
    assert printed.rstrip().endswith("journaled 0")  # none fell back to the journal


def test_the_opcode_count_gives_back_the_trace_function_it_replaced() -> None:
    # The suite's coverage measurement is such a trace function: it must go on afterwards.
    def tracer(frame: object, event: str, arg: object) -> None:
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        with OpcodeCount():
            pass
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)
