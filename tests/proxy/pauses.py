"""A probe for the flow-control tests: which connections of a protocol class paused reading."""

from __future__ import annotations

import pytest


def count_pauses(monkeypatch: pytest.MonkeyPatch, protocol: type) -> list[object]:
    """Record every ``pause_reading`` of ``protocol``'s connections (each then pauses as
    usual); the returned list holds one entry per pause. A test asserts it is not empty, to
    show that it really made aiohttp pause."""
    pauses: list[object] = []
    pause = protocol.pause_reading  # type: ignore[attr-defined]

    def counted(self: object) -> None:
        pauses.append(self)
        pause(self)

    monkeypatch.setattr(protocol, "pause_reading", counted)
    return pauses
