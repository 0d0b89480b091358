"""bench/dialect_cpu.py runs every dialect it names (no timing is asserted)."""

from __future__ import annotations

from bench.dialect_cpu import measure, report


async def test_the_dialect_cpu_bench_measures_every_dialect() -> None:
    results = await measure(rounds=1, count=3)
    assert set(results) == {"whole", "stream"}
    for by_dialect in results.values():
        assert set(by_dialect) == {"openai", "anthropic", "responses", "responses+store"}
        assert all(seconds > 0 for seconds in by_dialect.values())
    assert "responses+store" in report(results)
