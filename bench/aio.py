"""Event-loop entry point shared by every bench process (uvloop when importable)."""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """Return uvloop's loop constructor, or ``None`` for the stdlib default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def using_uvloop() -> bool:
    """Tell whether :func:`run` will use uvloop."""
    return _loop_factory() is not None


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh event loop and return its result.

    Ctrl-C cancels ``main`` (so its ``finally`` blocks run) and then raises
    ``KeyboardInterrupt``, as :class:`asyncio.Runner` does.
    """
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)
