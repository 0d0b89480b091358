"""The operator's own detectors: a regular expression, or a list of words.

A pattern is compiled once when the config loads (a pattern that does not compile, or that
matches the empty string, is refused then). Its run time is the pattern's own: Python's engine
backtracks, so a pattern that can backtrack badly (nested quantifiers) can be slow on hostile
text; keep custom patterns simple, and anchor them with a literal prefix where you can
(``EMP-[0-9]{6}`` is found at the speed of a byte search).

A word list matches whole words in any case: ``bluebird`` matches ``Bluebird`` and ``BLUEBIRD``,
not ``bluebirds``. The words are compiled into one trie-shaped alternation, so the cost does not
grow with the number of words the way separate searches would.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypeAlias

from proxy.pii.detectors import Finder
from proxy.pii.text import Span, TextView

# A few words are cheaper to look for one by one (a byte search each) than with the pattern.
_FEW_WORDS = 4

# A trie of characters: each key leads to the node for the rest of the word; the key ``""``
# marks that a word ends at this node.
_Trie: TypeAlias = dict[str, "_Trie"]


def pattern_finder(pattern: str) -> Finder:
    """A finder for ``pattern``. Raises ValueError if it does not compile or matches ``""``."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
    if compiled.fullmatch(""):
        raise ValueError(f"pattern {pattern!r} matches the empty string")

    def find(view: TextView) -> list[Span]:
        return [m.span() for m in compiled.finditer(view.text) if m.end() > m.start()]

    return find


def words_finder(words: Iterable[str]) -> Finder:
    """A finder for whole-word, case-insensitive occurrences of ``words``. Raises ValueError
    for an empty list or a blank word."""
    folded = sorted({word.strip().lower() for word in words})
    if not folded or not all(folded):
        raise ValueError("words must be a non-empty list of non-blank words")
    body = _trie_pattern(folded)
    lower = re.compile(rf"(?<!\w){body}(?!\w)")
    mixed = re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)
    few = folded if len(folded) <= _FEW_WORDS else None

    def find(view: TextView) -> list[Span]:
        text = view.text
        lowered = text.lower()
        if len(lowered) != len(text):  # a character whose lower case is longer (İ)
            return [match.span() for match in mixed.finditer(text)]
        if few is not None and not any(word in lowered for word in few):
            return []
        return [match.span() for match in lower.finditer(lowered)]

    return find


def _trie_pattern(words: list[str]) -> str:
    """One regular expression alternation matching exactly ``words``, prefixes shared."""
    trie: _Trie = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}
    return _render(trie)


def _render(node: _Trie) -> str:
    branches = [re.escape(char) + _render(child) for char, child in node.items() if char]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if "" in node:  # a word ends here: what follows is optional (greedy: longest word first)
        return f"(?:{body})?"
    return body
