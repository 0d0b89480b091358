"""The engines move to fresh ports when a port picked free is taken before they bind it."""

from __future__ import annotations

import pytest

from tests.engines import _start_on_free_ports


def test_a_start_whose_port_was_taken_moves_to_fresh_ports() -> None:
    tries: list[str] = []

    def start() -> None:
        tries.append("start")
        if tries.count("start") < 3:
            raise AssertionError("redis-server exited at start:\n… bind: Address already in use")

    _start_on_free_ports(start, lambda: tries.append("repick"))
    assert tries == ["start", "repick", "start", "repick", "start"]


def test_any_other_failure_is_raised_at_once() -> None:
    def start() -> None:
        raise AssertionError("postgres did not start in 30 s")

    with pytest.raises(AssertionError, match="did not start"):
        _start_on_free_ports(start, lambda: pytest.fail("no new port for another failure"))
