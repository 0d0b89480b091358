"""The semantic cache's in-process vector index: the nearest cached question of one scope.

Vectors are kept per scope (who may share answers, and what must match exactly besides the
meaning: :mod:`proxy.cache.semantic`), L2-normalised, as float32 rows, so a row's dot product
with a normalised query is their cosine similarity. A search returns the live entry most
similar to the query, with that similarity computed exactly.

How it searches, measured on the 2-core machine the gateway is developed on (``python -m bench
semantic``): an exact matrix-vector product costs about 0.4 ms CPU for 10,000 vectors of 256
dimensions but about 5 ms for 1,536 (it is memory-bound: 60 MB read per lookup), so a scope of
more than :data:`EXACT_LIMIT` entries is searched in two steps. Each row also keeps its sign
bits (1 bit per dimension, 32 times smaller); the Hamming distance to the query's sign bits
estimates the angle between them (the chance that a bit differs is angle / π), so the
:data:`CANDIDATES` rows nearest in Hamming distance are taken, and only those are scored
exactly. About 1.3 ms CPU for 10,000 vectors of 1,536. A hit is never worse than reported (its
similarity is exact); the approximation can only miss a match that is nearly tied with 64
closer-looking rows, which costs a cache miss, never a wrong answer. No ANN library is needed at
these sizes; at 100,000 entries per scope one would be (usearch, hnswlib).

Bounds: ``max_entries`` per scope (the oldest entry of a full scope makes room), ``max_vectors``
across every scope (the scope written least recently gives up its oldest entry), and each
entry's expiry (an expired entry is never returned, and expired entries at the front of a scope
are dropped as it is written). Vectors of another size than the scope's replace the scope (the
embedding model changed). Not thread-safe: one event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

EXACT_LIMIT = 2048
"""Scopes of at most this many entries are searched exactly, row by row."""

CANDIDATES = 64
"""Rows scored exactly in a larger scope: those nearest in Hamming distance."""

_MIN_CAPACITY = 16

Vector: TypeAlias = "list[float] | npt.NDArray[np.float32]"


class Match(NamedTuple):
    """The nearest live entry of a scope: its id and its cosine similarity to the query."""

    entry: str
    similarity: float


class _Scope:
    """The rows of one scope; live rows are ``[start, end)``, oldest first."""

    __slots__ = ("bits", "dimensions", "end", "expires", "ids", "start", "vectors")

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.vectors = np.empty((_MIN_CAPACITY, dimensions), np.float32)
        self.bits = np.empty((_MIN_CAPACITY, _words(dimensions)), np.uint64)
        self.expires = np.empty(_MIN_CAPACITY, np.float64)
        self.ids: list[str | None] = [None] * _MIN_CAPACITY
        self.start = 0
        self.end = 0

    @property
    def size(self) -> int:
        return self.end - self.start

    def append(self, entry: str, vector: npt.NDArray[np.float32], expires: float) -> None:
        if self.end == len(self.ids):
            self._make_room()
        row = self.end
        self.vectors[row] = vector
        self.bits[row] = _signs(vector)
        self.expires[row] = expires
        self.ids[row] = entry
        self.end += 1

    def drop_oldest(self) -> None:
        self.ids[self.start] = None
        self.start += 1

    def drop_expired(self, now: float) -> int:
        """Drop expired rows at the front; how many were dropped."""
        dropped = 0
        while self.start < self.end and self.expires[self.start] <= now:
            self.drop_oldest()
            dropped += 1
        return dropped

    def _make_room(self) -> None:
        live = slice(self.start, self.end)
        capacity = len(self.ids)
        if self.size > capacity // 2:
            capacity *= 2
        vectors = np.empty((capacity, self.dimensions), np.float32)
        bits = np.empty((capacity, self.bits.shape[1]), np.uint64)
        expires = np.empty(capacity, np.float64)
        size = self.size
        vectors[:size] = self.vectors[live]
        bits[:size] = self.bits[live]
        expires[:size] = self.expires[live]
        self.ids = self.ids[live] + [None] * (capacity - size)
        self.vectors, self.bits, self.expires = vectors, bits, expires
        self.start, self.end = 0, size

    def nearest(self, query: npt.NDArray[np.float32], now: float) -> Match | None:
        live = slice(self.start, self.end)
        vectors = self.vectors[live]
        alive = self.expires[live] > now
        if self.size > EXACT_LIMIT:
            distances = np.bitwise_count(self.bits[live] ^ _signs(query)).sum(
                axis=1, dtype=np.int32
            )
            distances[~alive] = np.iinfo(np.int32).max
            rows = np.argpartition(distances, CANDIDATES)[:CANDIDATES]
            scores = vectors[rows] @ query
            scores[~alive[rows]] = -np.inf
            best = int(scores.argmax())
            similarity, row = float(scores[best]), int(rows[best])
        else:
            scores = vectors @ query
            scores[~alive] = -np.inf
            row = int(scores.argmax())
            similarity = float(scores[row])
        if similarity == -np.inf:
            return None
        entry = self.ids[self.start + row]
        assert entry is not None
        return Match(entry, similarity)


class VectorIndex:
    """See the module docstring. ``now`` arguments are wall-clock seconds (``time.time``)."""

    def __init__(self, max_entries: int, max_vectors: int) -> None:
        if max_entries < 1 or max_vectors < 1:
            raise ValueError("max_entries and max_vectors must be at least 1")
        self._max_entries = max_entries
        self._max_vectors = max_vectors
        self._scopes: OrderedDict[str, _Scope] = OrderedDict()  # least recently written first
        self._total = 0

    def __len__(self) -> int:
        """Entries held (expired ones not yet dropped included)."""
        return self._total

    def add(self, scope: str, entry: str, vector: Vector, expires: float, now: float) -> None:
        """Index ``vector`` (normalised here; a zero vector is not indexed) as ``entry`` of
        ``scope`` until ``expires``."""
        row = normalised(vector)
        if row is None:
            return
        held = self._scopes.get(scope)
        if held is None or held.dimensions != row.shape[0]:
            if held is not None:
                self._total -= held.size
            held = self._scopes[scope] = _Scope(row.shape[0])
        self._scopes.move_to_end(scope)
        self._total -= held.drop_expired(now)
        if held.size >= self._max_entries:
            held.drop_oldest()
            self._total -= 1
        held.append(entry, row, expires)
        self._total += 1
        while self._total > self._max_vectors:
            self._evict_one()

    def nearest(self, scope: str, vector: Vector, now: float) -> Match | None:
        """The live entry of ``scope`` most similar to ``vector``; None when the scope holds
        none (or only vectors of another size, or ``vector`` is zero)."""
        held = self._scopes.get(scope)
        if held is None or held.size == 0:
            return None
        query = normalised(vector)
        if query is None or query.shape[0] != held.dimensions:
            return None
        return held.nearest(query, now)

    def _evict_one(self) -> None:
        name, oldest = next(iter(self._scopes.items()))
        if oldest.size:
            oldest.drop_oldest()
            self._total -= 1
        if oldest.size == 0:
            del self._scopes[name]


def normalised(vector: Vector) -> npt.NDArray[np.float32] | None:
    """``vector`` as a float32 unit vector; None for a zero (or empty) vector."""
    row = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(row))
    if row.ndim != 1 or not row.size or norm == 0.0 or not np.isfinite(norm):
        return None
    return row / np.float32(norm)


def _words(dimensions: int) -> int:
    return -(-dimensions // 64)


def _signs(vector: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    """The sign bits of ``vector`` (of the last axis), packed into 64-bit words."""
    packed = np.packbits(vector > 0, axis=-1)
    padding = _words(vector.shape[-1]) * 8 - packed.shape[-1]
    if padding:
        widths = [(0, 0)] * (packed.ndim - 1) + [(0, padding)]
        packed = np.pad(packed, widths)
    return packed.view(np.uint64)
