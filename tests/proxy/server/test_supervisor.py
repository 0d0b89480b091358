"""proxy/server/supervisor.py: what a worker sets up before serving (processes are tested in
tests/e2e)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from proxy.server.supervisor import _GC_YOUNG_THRESHOLD, tune_gc


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored_gc")
def test_tune_gc_freezes_start_up_objects_and_raises_the_young_threshold() -> None:
    _, middle, oldest = gc.get_threshold()
    tune_gc()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (_GC_YOUNG_THRESHOLD, middle, oldest)
