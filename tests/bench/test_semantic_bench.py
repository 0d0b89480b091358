"""bench/semantic.py measures what it claims (no timing is asserted: that is the bench's job)."""

from __future__ import annotations

from bench.semantic import measure_embedding, measure_search


def test_the_search_figure_finds_every_noisy_copy_in_a_two_step_scope() -> None:
    figure = measure_search(dimensions=64, entries=2600)
    assert figure.entries == 2600
    assert figure.recall == 1.0
    assert figure.cpu_ms > 0


async def test_the_embedding_figure_makes_real_calls() -> None:
    figure = await measure_embedding(dimensions=8, calls=5)
    assert figure.calls == 5
    assert 0 < figure.p50_ms <= figure.p99_ms
