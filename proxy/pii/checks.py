"""Validators that turn a candidate string into a detection: checksums, issuer ranges, shapes.

Each function is pure and total: it answers True or False for any input string, never raises.
They are what makes detection precise rather than a regular expression: a 16-digit order number
fails Luhn or names no card issuer, a look-alike IBAN fails its country's length or mod-97, a
UUID behind ``key=`` is not taken for a secret.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter

# ---------------------------------------------------------------------------------------------
# Payment cards
# ---------------------------------------------------------------------------------------------

_SIXTEEN_TO_NINETEEN = frozenset(range(16, 20))

# (prefix length, lowest prefix, highest prefix, allowed lengths): the issuer identification
# ranges of the card networks in use (ISO/IEC 7812 as the networks publish them).
_ISSUERS: tuple[tuple[int, int, int, frozenset[int]], ...] = (
    (1, 4, 4, frozenset({13, 16, 19})),  # Visa
    (2, 51, 55, frozenset({16})),  # Mastercard
    (4, 2221, 2720, frozenset({16})),  # Mastercard 2-series
    (2, 34, 34, frozenset({15})),  # American Express
    (2, 37, 37, frozenset({15})),  # American Express
    (4, 6011, 6011, _SIXTEEN_TO_NINETEEN),  # Discover
    (3, 644, 649, _SIXTEEN_TO_NINETEEN),  # Discover
    (2, 65, 65, _SIXTEEN_TO_NINETEEN),  # Discover, RuPay
    (2, 62, 62, _SIXTEEN_TO_NINETEEN),  # UnionPay (Discover's 622126-622925 inside)
    (4, 3528, 3589, _SIXTEEN_TO_NINETEEN),  # JCB
    (3, 300, 305, frozenset(range(14, 20))),  # Diners Club
    (4, 3095, 3095, frozenset(range(14, 20))),  # Diners Club
    (2, 36, 36, frozenset(range(14, 20))),  # Diners Club
    (2, 38, 39, _SIXTEEN_TO_NINETEEN),  # Diners Club
    (4, 2200, 2204, _SIXTEEN_TO_NINETEEN),  # Mir
    (2, 60, 60, frozenset({16})),  # RuPay
    (2, 81, 82, frozenset({16})),  # RuPay
    (3, 508, 508, frozenset({16})),  # RuPay
    (3, 353, 353, frozenset({16})),  # RuPay-JCB
    (3, 356, 356, frozenset({16})),  # RuPay-JCB
    (4, 5018, 5018, frozenset(range(13, 20))),  # Maestro
    (4, 5020, 5020, frozenset(range(13, 20))),  # Maestro
    (4, 5038, 5038, frozenset(range(13, 20))),  # Maestro
    (4, 5893, 5893, frozenset(range(13, 20))),  # Maestro
    (4, 6304, 6304, frozenset(range(13, 20))),  # Maestro
    (4, 6759, 6759, frozenset(range(13, 20))),  # Maestro
    (4, 6761, 6763, frozenset(range(13, 20))),  # Maestro
)


def luhn_ok(digits: str) -> bool:
    """Whether a string of ASCII digits passes the Luhn (mod 10) check."""
    total = 0
    double = False
    for char in reversed(digits):
        value = ord(char) - 48
        if double:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
        double = not double
    return total % 10 == 0


def card_issuer_ok(digits: str) -> bool:
    """Whether ``digits`` starts with a card network's issuer range and has one of its lengths."""
    length = len(digits)
    for prefix, low, high, lengths in _ISSUERS:
        if length in lengths and low <= int(digits[:prefix]) <= high:
            return True
    return False


def card_grouping_ok(candidate: str) -> bool:
    """Whether a card number is written as cards are: no separators, or one kind of separator
    between groups of four (the last one shorter), or Amex/Diners' 4-6-5 and 4-6-4."""
    separators = {char for char in candidate if not char.isdigit()}
    if not separators:
        return True
    if len(separators) > 1:
        return False
    groups = [len(group) for group in candidate.split(separators.pop())]
    if groups[:-1] == [4] * (len(groups) - 1) and 1 <= groups[-1] <= 4:
        return True
    return groups in ([4, 6, 5], [4, 6, 4])


# ---------------------------------------------------------------------------------------------
# IBAN
# ---------------------------------------------------------------------------------------------

# The IBAN length of every country in the SWIFT IBAN registry.
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip

_IBAN_DIGITS = str.maketrans({letter: str(ord(letter) - 55) for letter in string.ascii_uppercase})


def iban_ok(compact: str) -> bool:
    """Whether an upper-case IBAN without spaces has its country's length and passes mod-97."""
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact.isalnum():
        return False
    rearranged = (compact[4:] + compact[:4]).translate(_IBAN_DIGITS)
    return rearranged.isdigit() and int(rearranged) % 97 == 1


# ---------------------------------------------------------------------------------------------
# US social security numbers
# ---------------------------------------------------------------------------------------------

# Numbers the SSA never issues although their parts are in range: the Woolworth wallet card and
# a 1940s advertisement, printed so often that they are examples, not anybody's number.
_SSN_EXAMPLES = frozenset({"078051120", "219099999"})


def ssn_ok(digits: str) -> bool:
    """Whether nine digits can be an issued SSN: area 001-899 but not 666, group 01-99, serial
    0001-9999, and not one of the famous example numbers."""
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return (
        area != "000"
        and area != "666"
        and area[0] != "9"
        and group != "00"
        and serial != "0000"
        and digits not in _SSN_EXAMPLES
    )


# ---------------------------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------------------------

_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
# Segments each of letters only or digits only: words and numbers joined (YOUR_API_KEY_HERE_1).
_WORDS = re.compile(r"(?:[A-Za-z]+|[0-9]+)(?:[_\-.](?:[A-Za-z]+|[0-9]+))*")
MIN_SECRET_ENTROPY = 3.0  # bits per character
MIN_SECRET_LENGTH = 16


def shannon_entropy(value: str) -> float:
    """Shannon entropy of ``value``'s characters, in bits per character (0 for "")."""
    length = len(value)
    if not length:
        return 0.0
    return -sum(n / length * math.log2(n / length) for n in Counter(value).values())


def looks_random(token: str) -> bool:
    """Whether ``token`` looks like generated key material rather than a word or an id.

    At least :data:`MIN_SECRET_LENGTH` characters, letters and digits both, at least
    :data:`MIN_SECRET_ENTROPY` bits of entropy per character, not a UUID (UUIDs are request
    and record ids far more often than credentials), and not words and numbers joined by
    ``_``, ``-`` or ``.`` (``YOUR_API_KEY_HERE_1``, ``build-2024-11``): generated keys mix
    letters and digits within their runs.
    """
    if len(token) < MIN_SECRET_LENGTH or _UUID.fullmatch(token) or _WORDS.fullmatch(token):
        return False
    has_digit = has_letter = False
    for char in token:
        if char.isdigit():
            has_digit = True
        elif char.isalpha():
            has_letter = True
        if has_digit and has_letter:
            return shannon_entropy(token) >= MIN_SECRET_ENTROPY
    return False
