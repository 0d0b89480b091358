"""The mock provider's embeddings: deterministic vectors that carry some meaning.

A text's vector is the feature-hashing of its lower-cased words (weight 1), its word bigrams
(weight 0.5) and its words' character trigrams (weight 0.25), each feature added with a sign
and at a position taken from its CRC-32, then L2-normalised. Texts that share words and word
forms score a high cosine similarity, texts that share none score near 0; a few function words
("the", "is", "of" …) are left out so that unrelated questions do not look alike for their
grammar. Pure and deterministic across processes and runs (CRC-32, not Python's ``hash``).
"""

from __future__ import annotations

import itertools
import math
import re
import zlib

DEFAULT_DIMENSIONS = 256
"""The size of a mock vector when the client asks for none."""

_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "so",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "which",
        "who",
        "why",
        "with",
        "you",
        "your",
    )
)
_WEIGHTS = (1.0, 0.5, 0.25)  # words, word bigrams, character trigrams


def text_vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The unit vector of ``text`` (all zeros for a text without words)."""
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOP_WORDS]
    return _vector(_features(words), dimensions)


def token_vector(tokens: list[int], dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The unit vector of a token-id list (each id a word)."""
    return _vector(_features([f"#{token}" for token in tokens]), dimensions)


def _features(words: list[str]) -> list[tuple[str, float]]:
    features = [(word, _WEIGHTS[0]) for word in words]
    features += [(f"{a} {b}", _WEIGHTS[1]) for a, b in itertools.pairwise(words)]
    for word in words:
        padded = f"<{word}>"
        features += [(padded[i : i + 3], _WEIGHTS[2]) for i in range(len(padded) - 2)]
    return features


def _vector(features: list[tuple[str, float]], dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for feature, weight in features:
        digest = zlib.crc32(feature.encode())
        vector[digest % dimensions] += weight if digest & 0x80000000 else -weight
    norm = math.sqrt(sum(value * value for value in vector))
    if norm == 0.0:
        return vector
    return [value / norm for value in vector]
