"""The semantic cache's vector index: nearest entry per scope, exact and two-step search,
bounds and expiry."""

from __future__ import annotations

import numpy as np
import pytest

from proxy.cache.vector_index import CANDIDATES, EXACT_LIMIT, VectorIndex, normalised

NOW = 1_000.0
LATER = NOW + 60


def unit(rng: np.random.Generator, dimensions: int) -> list[float]:
    vector = rng.standard_normal(dimensions)
    return list(vector / np.linalg.norm(vector))


def near(vector: list[float], rng: np.random.Generator, noise: float) -> list[float]:
    row = np.asarray(vector) + noise * rng.standard_normal(len(vector)) / np.sqrt(len(vector))
    return list(row / np.linalg.norm(row))


def test_the_nearest_entry_of_the_scope_with_its_exact_similarity() -> None:
    index = VectorIndex(max_entries=10, max_vectors=100)
    index.add("s", "north", [1.0, 0.0, 0.0], LATER, NOW)
    index.add("s", "east", [0.0, 1.0, 0.0], LATER, NOW)
    match = index.nearest("s", [0.6, 0.8, 0.0], NOW)
    assert match is not None
    assert match.entry == "east"
    assert match.similarity == pytest.approx(0.8)


def test_scopes_never_see_each_other() -> None:
    index = VectorIndex(max_entries=10, max_vectors=100)
    index.add("team-a", "a", [1.0, 0.0], LATER, NOW)
    assert index.nearest("team-b", [1.0, 0.0], NOW) is None
    assert index.nearest("team-a", [1.0, 0.0], NOW).entry == "a"  # type: ignore[union-attr]


def test_vectors_are_normalised_and_zero_vectors_ignored() -> None:
    index = VectorIndex(max_entries=10, max_vectors=100)
    index.add("s", "long", [3.0, 4.0], LATER, NOW)
    index.add("s", "zero", [0.0, 0.0], LATER, NOW)
    assert len(index) == 1
    assert index.nearest("s", [6.0, 8.0], NOW).similarity == pytest.approx(1.0)  # type: ignore[union-attr]
    assert index.nearest("s", [0.0, 0.0], NOW) is None
    assert normalised([]) is None


def test_expired_entries_are_never_returned() -> None:
    index = VectorIndex(max_entries=10, max_vectors=100)
    index.add("s", "old", [1.0, 0.0], NOW + 1, NOW)
    index.add("s", "fresh", [0.0, 1.0], NOW + 100, NOW)
    assert index.nearest("s", [1.0, 0.0], NOW + 2).entry == "fresh"  # type: ignore[union-attr]
    index.add("s", "newer", [0.0, 1.0], NOW + 100, NOW + 2)  # the expired front is dropped
    assert len(index) == 2
    index = VectorIndex(max_entries=10, max_vectors=100)
    index.add("s", "only", [1.0], NOW + 1, NOW)
    assert index.nearest("s", [1.0], NOW + 1) is None


def test_a_full_scope_drops_its_oldest_entry() -> None:
    index = VectorIndex(max_entries=2, max_vectors=100)
    for number in range(3):
        index.add("s", f"e{number}", [1.0, float(number)], LATER, NOW)
    assert len(index) == 2
    assert index.nearest("s", [1.0, 0.0], NOW).entry == "e1"  # type: ignore[union-attr]


def test_the_total_bound_takes_from_the_scope_written_least_recently() -> None:
    index = VectorIndex(max_entries=10, max_vectors=3)
    index.add("quiet", "q", [1.0, 0.0], LATER, NOW)
    index.add("busy", "b1", [1.0, 0.0], LATER, NOW)
    index.add("busy", "b2", [1.0, 0.0], LATER, NOW)
    index.add("busy", "b3", [1.0, 0.0], LATER, NOW)
    assert len(index) == 3
    assert index.nearest("quiet", [1.0, 0.0], NOW) is None
    index.add("busy", "b4", [0.0, 1.0], LATER, NOW)
    assert len(index) == 3
    assert index.nearest("busy", [1.0, 0.0], NOW).entry in {"b2", "b3"}  # type: ignore[union-attr]


def test_vectors_of_another_size_replace_the_scope() -> None:
    index = VectorIndex(max_entries=10, max_vectors=100)
    index.add("s", "small", [1.0, 0.0], LATER, NOW)
    index.add("s", "big", [1.0, 0.0, 0.0], LATER, NOW)
    assert len(index) == 1
    assert index.nearest("s", [1.0, 0.0], NOW) is None
    assert index.nearest("s", [1.0, 0.0, 0.0], NOW).entry == "big"  # type: ignore[union-attr]


def test_growing_past_the_initial_capacity_keeps_every_row() -> None:
    rng = np.random.default_rng(7)
    index = VectorIndex(max_entries=1000, max_vectors=1000)
    vectors = [unit(rng, 32) for _ in range(300)]
    for number, vector in enumerate(vectors):
        index.add("s", f"e{number}", vector, LATER, NOW)
    for number in (0, 17, 150, 299):
        match = index.nearest("s", vectors[number], NOW)
        assert match is not None
        assert match.entry == f"e{number}"
        assert match.similarity == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("dimensions", [256, 1536, 100])
def test_a_large_scope_finds_paraphrases_in_two_steps(dimensions: int) -> None:
    rng = np.random.default_rng(dimensions)
    count = EXACT_LIMIT + 500
    index = VectorIndex(max_entries=count, max_vectors=count)
    vectors = [unit(rng, dimensions) for _ in range(count)]
    for number, vector in enumerate(vectors):
        index.add("s", f"e{number}", vector, LATER, NOW)
    for number in range(0, count, 97):
        query = near(vectors[number], rng, noise=0.3)
        match = index.nearest("s", query, NOW)
        assert match is not None
        assert match.entry == f"e{number}"
        exact = float(np.dot(normalised(query), normalised(vectors[number])))  # type: ignore[arg-type]
        assert match.similarity == pytest.approx(exact, abs=1e-5)


def test_a_large_scope_skips_expired_candidates() -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(max_entries=EXACT_LIMIT + CANDIDATES + 10, max_vectors=10**6)
    target = unit(rng, 64)
    for number in range(EXACT_LIMIT + CANDIDATES + 10):
        vector = near(target, rng, 0.2) if number < CANDIDATES + 5 else unit(rng, 64)
        index.add("s", f"e{number}", vector, NOW + 1 if number < CANDIDATES + 5 else LATER, NOW)
    match = index.nearest("s", target, NOW + 2)
    assert match is not None
    assert int(match.entry[1:]) >= CANDIDATES + 5
