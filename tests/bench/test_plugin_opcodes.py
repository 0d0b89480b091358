"""bench/plugin_opcodes.py: the count is exact (the same work counts the same, twice the work
twice as much, nothing outside the block), and the command prints every mode."""

from __future__ import annotations

import pytest

from bench import plugin_opcodes
from bench.plugin_cpu import MODES, chains
from bench.plugin_opcodes import OpcodeCount, count_chain


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
    first = await count_chain(chains(plugins="cost-budget")["plugins"], True, 2)
    second = await count_chain(chains(plugins="cost-budget")["plugins"], True, 2)
    for count in (first, second):
        del count.by_function["TimerHandle.__lt__"]  # the timers earlier chains left pending
    assert first.by_function == second.by_function
    assert first.by_function["CostPlugin.__call__"] > 0


def test_the_command_prints_each_mode_and_the_functions_that_grew(capsys) -> None:
    status = plugin_opcodes.main(["--plugins", "cost", "--requests", "1", "--show", "2"])
    assert status == 0
    printed = capsys.readouterr().out
    for mode in MODES:
        assert f"  {mode:<10}  empty chain" in printed
    assert "20-chunk streams" in printed


@pytest.mark.parametrize("bad", [["--requests", "0"], ["--chunks", "12"]])
def test_bad_arguments_are_refused(bad: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        plugin_opcodes.main(bad)
    assert exited.value.code == 2
