"""One text as the detectors see it: the text and cheap byte forms of it, made on first use.

Python's regular expressions cost several nanoseconds per character when a pattern starts with
a character class (most PII patterns do), so running every detector's pattern over every
prompt would take tens of microseconds per kilobyte. Instead each detector first asks a
question that C-level byte operations answer at about a nanosecond per character — "is there an
``@``", "where are the runs of digits", "is any token 16 characters long" — and runs its
patterns only where the answer says a match is possible. The byte forms keep one byte per
character (non-ASCII characters become ``?``), so a position in them is a position in the text.
"""

from __future__ import annotations

import re

Span = tuple[int, int]


def _table(classes: dict[bytes, int], default: int) -> bytes:
    table = bytearray([default]) * 256
    for members, value in classes.items():
        for member in members:
            table[member] = value
    return bytes(table)


_DIGITS = b"0123456789"
_UPPER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LOWER = b"abcdefghijklmnopqrstuvwxyz"
# Digits -> "0", what numbers are written with -> ".", blanks -> " ", A-Z -> "A", the rest "x".
_SHAPE = _table({_DIGITS: ord("0"), b"-./()+": ord("."), b" \t": ord(" "), _UPPER: ord("A")}, 120)
# Characters keys and tokens are made of -> "w", the rest " ".
_TOKEN = _table({_DIGITS + _UPPER + _LOWER + b"_-+/=.~": ord("w")}, ord(" "))
# A run of at least 7 digits, separators and blanks that starts with a digit: the shortest
# number-shaped entity (an IPv4 address like 1.1.1.1) has 7 characters.
_NUMBER_RUN = re.compile(rb"0[0. ]{6,}")
LONG_TOKEN = b"w" * 16


class TextView:
    """``text`` and its byte forms (see the module docstring). Not shared between texts."""

    __slots__ = ("_ascii", "_numbers", "_shape", "_tokens", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._ascii: bytes | None = None
        self._shape: bytes | None = None
        self._tokens: bytes | None = None
        self._numbers: list[Span] | None = None

    @property
    def ascii(self) -> bytes:
        """The text as ASCII bytes, each other character as ``?``."""
        if self._ascii is None:
            self._ascii = self.text.encode("ascii", "replace")
        return self._ascii

    @property
    def shape(self) -> bytes:
        """Character classes: digit ``0``, number separator ``.``, blank, ``A`` for A-Z, ``x``."""
        if self._shape is None:
            self._shape = self.ascii.translate(_SHAPE)
        return self._shape

    @property
    def tokens(self) -> bytes:
        """``w`` for each character of ``[A-Za-z0-9_\\-+/=.~]``, a blank for the others."""
        if self._tokens is None:
            self._tokens = self.ascii.translate(_TOKEN)
        return self._tokens

    def numbers(self) -> list[Span]:
        """The runs of digits, separators (``-./()+``) and blanks that start with a digit and
        are at least 7 characters long: where a card, phone, SSN or IPv4 address can be."""
        if self._numbers is None:
            self._numbers = [m.span() for m in _NUMBER_RUN.finditer(self.shape)]
        return self._numbers
