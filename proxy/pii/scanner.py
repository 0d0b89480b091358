"""Run a set of detectors over a text and settle where their finds overlap.

A :class:`Scanner` holds finders by entity name, in priority order. :meth:`Scanner.scan`
returns non-overlapping :class:`Found` spans sorted by position: where two finds overlap, the
longer one wins (an e-mail address over the word list entry inside it, a card number over the
phone-shaped digits it contains), and between equally long ones the finder listed first.
Finders raise only on a bug; the exception reaches the caller, whose failure policy decides
(the ``masking`` plugin blocks the request unless told to pass it through).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import NamedTuple

from proxy.pii.detectors import Finder
from proxy.pii.text import TextView


class Found(NamedTuple):
    """One detection: ``text[start:end]`` is a value of ``entity``."""

    start: int
    end: int
    entity: str


class Scanner:
    """Finds the entities of ``finders`` (``(entity, finder)`` pairs, first = preferred)."""

    __slots__ = ("_finders", "entities")

    def __init__(self, finders: Sequence[tuple[str, Finder]]) -> None:
        self._finders = tuple(finders)
        self.entities = frozenset(entity for entity, _ in self._finders)

    def scan(self, text: str) -> list[Found]:
        """The detections in ``text``, non-overlapping, by position."""
        if not text:
            return []
        view = TextView(text)
        found: list[tuple[int, int, int]] = []
        for rank, (_, finder) in enumerate(self._finders):
            for start, end in finder(view):
                found.append((start, end, rank))
        if not found:
            return []
        finders = self._finders
        if len(found) == 1:
            start, end, rank = found[0]
            return [Found(start, end, finders[rank][0])]
        found.sort(key=lambda item: (item[0] - item[1], item[2], item[0]))  # longest first
        kept: list[tuple[int, int, int]] = []  # by start, non-overlapping
        for item in found:
            start, end, _ = item
            at = bisect.bisect(kept, item)
            if (at and kept[at - 1][1] > start) or (at < len(kept) and kept[at][0] < end):
                continue
            kept.insert(at, item)
        return [Found(start, end, finders[rank][0]) for start, end, rank in kept]
