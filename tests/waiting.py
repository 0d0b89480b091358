"""Waiting for a condition in tests: poll the event loop up to a deadline, never a guessed sleep."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable


async def until(condition: Callable[[], bool], *, seconds: float = 5.0, what: str = "") -> None:
    """Return once ``condition()`` holds, yielding to the event loop between checks.

    Raises :class:`AssertionError` naming ``what`` when it still does not hold after
    ``seconds`` of loop time.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    for polls in itertools.count():
        if condition():
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {polls} polls waiting for {what or condition}")
        await asyncio.sleep(0 if polls < 1000 else 0.001)
