"""Whether a run of digits can be a telephone number: E.164 and the common national formats.

The caller has already found a candidate (see :mod:`proxy.pii.detectors`) and knows how it was
written; these functions judge its digits. Pure and total: they answer for any digit string.
"""

from __future__ import annotations

# ITU-T E.164 country calling codes in service. The set is prefix-free (no code is the start of
# another), so the code of a number is the one prefix of its digits that is in the set.
_CODES = """
1 7 20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58 60 61 62 63 64
65 66 81 82 84 86 90 91 92 93 94 95 98 211 212 213 216 218 220 221 222 223 224 225 226 227 228 229
230 231 232 233 234 235 236 237 238 239 240 241 242 243 244 245 246 247 248 249 250 251 252 253
254 255 256 257 258 260 261 262 263 264 265 266 267 268 269 290 291 297 298 299 350 351 352 353
354 355 356 357 358 359 370 371 372 373 374 375 376 377 378 379 380 381 382 383 385 386 387 389
420 421 423 500 501 502 503 504 505 506 507 508 509 590 591 592 593 594 595 596 597 598 599 670
672 673 674 675 676 677 678 679 680 681 682 683 685 686 687 688 689 690 691 692 800 808 850 852
853 855 856 870 878 880 881 882 883 886 888 960 961 962 963 964 965 966 967 968 970 971 972 973
974 975 976 977 992 993 994 995 996 998
"""
CALLING_CODES = frozenset(_CODES.split())

# Lengths of the national significant number (after the country code) where they are known to
# be narrow; other codes allow 4-13 digits (E.164 caps the whole number at 15).
_NATIONAL_LENGTHS: dict[str, tuple[int, int]] = {
    "1": (10, 10), "7": (10, 10), "20": (8, 10), "27": (9, 9), "30": (10, 10), "31": (9, 9),
    "32": (8, 9), "33": (9, 9), "34": (9, 9), "36": (8, 9), "39": (6, 11), "40": (9, 9),
    "41": (9, 9), "43": (4, 13), "44": (7, 10), "45": (8, 8), "46": (7, 10), "47": (8, 8),
    "48": (9, 9), "49": (5, 14), "51": (8, 9), "52": (10, 10), "54": (10, 11), "55": (10, 11),
    "56": (9, 9), "57": (10, 10), "58": (10, 10), "60": (8, 10), "61": (9, 9), "62": (8, 12),
    "63": (8, 10), "64": (8, 10), "65": (8, 8), "66": (8, 9), "81": (9, 10), "82": (8, 10),
    "84": (9, 10), "86": (10, 11), "90": (10, 10), "91": (10, 10), "92": (9, 10), "351": (9, 9),
    "353": (7, 9), "358": (5, 12), "420": (9, 9), "966": (9, 9), "971": (8, 9), "972": (8, 9),
}  # fmt: skip

# Countries whose national numbers keep their leading 0 after the country code (Italy, San
# Marino, Vatican City); everywhere else a 0 there is a trunk prefix written by mistake.
_KEEPS_ZERO = frozenset({"39", "378", "379"})


def nanp_ok(digits: str) -> bool:
    """Ten digits as a North American number: area code and exchange each [2-9]XX, not N11,
    and no area code with 9 in the middle (reserved)."""
    if len(digits) != 10:
        return False
    area, exchange = digits[:3], digits[3:6]
    return (
        area[0] not in "01"
        and area[1] != "9"
        and area[1:] != "11"
        and exchange[0] not in "01"
        and exchange[1:] != "11"
    )


def international_ok(digits: str) -> bool:
    """Whether the digits written after ``+`` (or ``00``) form a plausible E.164 number: 8-15
    digits, a country code in service, a national number of that country's length."""
    if not 8 <= len(digits) <= 15:
        return False
    for size in (1, 2, 3):
        code = digits[:size]
        if code in CALLING_CODES:
            national = digits[size:]
            low, high = _NATIONAL_LENGTHS.get(code, (4, 13))
            if not low <= len(national) <= high:
                return False
            if code == "1":
                return nanp_ok(national)
            return national[0] != "0" or code in _KEEPS_ZERO
    return False


def trunk_ok(digits: str) -> bool:
    """Whether digits written with a national trunk prefix (``020 7946 0958``, ``06 12 34 56
    78``, ``030 1234567``) can be a number: one leading 0 (two would be an international
    prefix) and 9-11 digits in all, the lengths of the countries that dial a trunk 0."""
    return 9 <= len(digits) <= 11 and digits[0] == "0" and digits[1] != "0"


def bare_ok(digits: str) -> bool:
    """Whether digits written without a prefix (``612 345 678``, ``98765 43210``) can be a
    national number: 9-11 digits not starting with 0 or 1. Only plausible next to a word that
    says it is a phone number; the caller checks that."""
    return 9 <= len(digits) <= 11 and digits[0] not in "01"
