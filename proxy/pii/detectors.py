"""The built-in detectors of numbers and addresses: text -> spans of one entity.

Each finder takes a :class:`~proxy.pii.text.TextView` and returns the ``(start, end)`` spans of
its entity, in any order, possibly overlapping (the scanner resolves overlaps). A finder first
asks its view a cheap question (is there an ``@``, where are the number-shaped runs), then runs
its candidate pattern only there, then keeps the candidates its validator accepts:

- ``email``: an RFC 5322 dot-atom local part (letters — RFC 6531 allows non-ASCII ones —,
  digits, ``_%+-``, single dots inside; at most 64 characters) ``@`` a domain of valid labels
  whose last label is a real TLD; not ``user@host:path`` (an scp/git target).
- ``phone``: ``+`` or ``00`` and a plausible E.164 number; North American ``(415) 555-0132`` /
  ``415-555-0132`` with valid area code and exchange; a trunk-0 national number written in
  groups (``020 7946 0958``, ``06 12 34 56 78``); other grouped or bare 9-11 digit numbers only
  when a word such as "phone", "call" or "mobile" comes just before.
- ``credit_card``: 13-19 digits, grouped as cards are printed, in a card network's issuer range
  and length, passing Luhn.
- ``iban``: country code, check digits and BBAN (upper case; grouped in fours or not) of that
  country's IBAN length, passing mod-97.
- ``us_ssn``: ``AAA-GG-SSSS`` (or spaced) within the issued ranges; nine bare digits only after
  "SSN" or "social security".
- ``ip_address``: dotted-quad IPv4 (octets 0-255, no leading zeros; not after "version",
  "section" and the like) and IPv6 as :mod:`ipaddress` parses it (at least two groups and four
  hex digits, or ``::1``).

Patterns never backtrack more than a bounded amount per starting position and start only at
the beginning of a token (a look-behind after the first character), so time is linear in the
text for any input.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator

from proxy.pii import checks, phone
from proxy.pii.text import Span, TextView
from proxy.pii.tlds import TLDS

Finder = Callable[[TextView], list[Span]]

# Shared boundaries of number-shaped entities: not glued to a word, a sign or another number.
_BEFORE = r"(?<![\w+\-./])"
_AFTER = r"(?![\w\-]|[./]\d)"


def _number_spans(
    view: TextView,
    pattern: re.Pattern[str],
    accept: Callable[[re.Match[str]], Span | None],
    *,
    regroup: bool = False,
) -> list[Span]:
    """The spans ``accept`` makes of ``pattern``'s matches within the view's number-shaped runs
    (and the two characters before each, for a leading ``+`` or ``(``). With ``regroup``, after
    a match it rejects the search resumes at the match's next group of digits rather than after
    the match: in ``12 4111 1111 1111 1111`` the card starts at the second group."""
    text = view.text
    size = len(text)
    spans: list[Span] = []
    for start, end in view.numbers():
        position, limit = max(start - 2, 0), min(end + 1, size)
        while (match := pattern.search(text, position, limit)) is not None:
            span = accept(match)
            if span is not None:
                spans.append(span)
                position = span[1]
                continue
            blank = text.find(" ", match.start(), match.end()) if regroup else -1
            position = match.end() if blank < 0 else blank + 1
    return spans


def _digits(candidate: str) -> str:
    return "".join(char for char in candidate if char.isdigit())


def _word_before(text: str, start: int, words: re.Pattern[str], reach: int = 32) -> bool:
    return words.search(text, max(start - reach, 0), start) is not None


# ---------------------------------------------------------------------------------------------
# E-mail
# ---------------------------------------------------------------------------------------------

_ATOM = r"[\w%+\-]"
# Simple repeats only (nested ones cost Python's engine far more per character); the shape of
# the dots, labels and TLD is checked on the match.
_EMAIL = re.compile(
    # The first character, then a look-behind: a local part starts at a token boundary.
    rf"{_ATOM}(?<![\w%+\-.]{_ATOM})[\w%+\-.]{{0,63}}@"
    r"[A-Za-z0-9][A-Za-z0-9\-]{0,62}\.[A-Za-z0-9\-.]{0,190}[A-Za-z0-9]"
)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?")
_URL_USERINFO = re.compile(r"://[^\s/@]*\Z")


def find_emails(view: TextView) -> list[Span]:
    """See the module docstring."""
    if view.ascii.find(b"@") < 0:
        return []
    text = view.text
    spans: list[Span] = []
    for match in _EMAIL.finditer(text):
        span = _email_span(text, match)
        if span is not None:
            spans.append(span)
    return spans


def _email_span(text: str, match: re.Match[str]) -> Span | None:
    start = match.start()
    local, _, domain = match.group().partition("@")
    domain = domain.rstrip(".-")  # a sentence's full stop
    end = start + len(local) + 1 + len(domain)
    if local.endswith(".") or ".." in local or end - start > 254:
        return None
    labels = domain.split(".")
    if len(labels) < 2 or labels[-1].lower() not in TLDS:
        return None
    if not all(_LABEL.fullmatch(label) for label in labels):
        return None
    after = text[end : end + 2]
    if after[:1] in ("@", "_") or (after[:1] == ":" and after[1:2] not in ("", " ", "\n")):
        return None  # git@github.com:org/repo
    if _URL_USERINFO.search(text, max(start - 64, 0), start):
        return None  # https://user:token@host: credentials in a URL, not an address
    return (start, end)


# ---------------------------------------------------------------------------------------------
# Phone numbers
# ---------------------------------------------------------------------------------------------

_PHONE_INTERNATIONAL = re.compile(rf"{_BEFORE}(?:\+|00)\d[\d \-.()]{{5,24}}\d{_AFTER}")
_PHONE_NANP = re.compile(
    rf"{_BEFORE}(?:\+?1[ .\-]?)?(?:\(\d{{3}}\)[ .\-]?|\d{{3}}[ .\-])\d{{3}}[ .\-]\d{{4}}{_AFTER}"
)
_PHONE_TRUNK = re.compile(
    rf"{_BEFORE}(?:\(0\d{{1,4}}\)[ .\-/]?|0\d{{1,4}}[ .\-/])\d{{2,8}}(?:[ .\-]\d{{2,4}}){{0,4}}"
    rf"{_AFTER}"
)
_PHONE_BARE = re.compile(rf"{_BEFORE}(?:\d{{9,11}}|\d{{2,5}}(?:[ .\-]\d{{2,5}}){{1,3}}){_AFTER}")
_PHONE_WORDS = re.compile(
    r"(?i)\b(?:phone|tel|telephone|mobile|mob|cell|cellphone|call|fax|whatsapp|sms|text|ring|"
    r"dial|hotline|telefon|handy|t[ée]l[ée]phone|tel[ée]fono|num[ée]ro)\b"
)
_DOUBLE_SEPARATOR = re.compile(r"[ .\-]{2}")
_FIRST_GROUP = re.compile(r"\d+")
_GROUP_BEFORE = re.compile(r"\d[ \-]\Z")
_GROUP_AFTER = re.compile(r"[ \-]\d")
_NOT_A_PHONE = re.compile(
    r"(?i)\b(?:ein|zip|postcode|order|invoice|inv|ref|reference|account|acct|tracking|isbn|"
    r"serial|part|sku|batch|id)\b[\s#:.no]*\Z"
)
_ZIP_PLUS_FOUR = re.compile(r"\d{5}-\d{4}")
_DATE_START = re.compile(r"\(?\d{1,2}\)?[./\-]\d{1,2}[./\-]\d{2,4}\b")
_SSN_SHAPE = re.compile(r"\d{3}([ \-])\d{2}\1\d{4}")


def _group_prefixes(candidate: str) -> Iterator[str]:
    """``candidate``, then its prefixes that end before a blank, longest first (a number
    followed by another group of digits, like a year, in the same run)."""
    yield candidate
    cut = candidate.rfind(" ")
    while cut > 0:
        yield candidate[:cut].rstrip(" .-(")
        cut = candidate.rfind(" ", 0, cut)


def find_phones(view: TextView) -> list[Span]:
    """See the module docstring."""
    if not view.numbers():
        return []
    text = view.text
    return [
        *_number_spans(view, _PHONE_INTERNATIONAL, lambda match: _international(text, match)),
        *_number_spans(view, _PHONE_NANP, lambda match: _nanp(text, match)),
        *_number_spans(view, _PHONE_TRUNK, lambda match: _trunk(text, match)),
        *_number_spans(view, _PHONE_BARE, lambda match: _bare(text, match)),
    ]


def _international(text: str, match: re.Match[str]) -> Span | None:
    candidate = match.group()
    if candidate.startswith("00") and _in_digit_groups(text, match):
        return None
    for prefix in _group_prefixes(candidate):
        if _DOUBLE_SEPARATOR.search(prefix):
            continue
        digits = _digits(prefix.replace("(0)", ""))
        if prefix.startswith("00"):
            digits = digits[2:]
        if phone.international_ok(digits) and _code_is_a_group(prefix):
            return (match.start(), match.start() + len(prefix))
    return None


def _code_is_a_group(candidate: str) -> bool:
    """A written-out number keeps its country code apart: ``+44 20 …``, not ``+442 0 …``."""
    body = candidate[1:] if candidate.startswith("+") else candidate[2:]
    first = _FIRST_GROUP.match(body)
    if first is None or first.end() == len(body):
        return True  # written without separators: the code cannot be seen, only checked
    return first.group() in phone.CALLING_CODES


def _in_digit_groups(text: str, match: re.Match[str]) -> bool:
    """Whether the match continues a longer run of digit groups (``9400 1103 0797 0163``)."""
    return bool(
        _GROUP_BEFORE.search(text, max(match.start() - 2, 0), match.start())
        or _GROUP_AFTER.match(text, match.end())
        or _NOT_A_PHONE.search(text, max(match.start() - 24, 0), match.start())
    )


def _nanp(text: str, match: re.Match[str]) -> Span | None:
    if _in_digit_groups(text, match):
        return None
    digits = _digits(match.group())
    return match.span() if phone.nanp_ok(digits[1:] if len(digits) == 11 else digits) else None


def _trunk(text: str, match: re.Match[str]) -> Span | None:
    candidate = match.group()
    if (
        _in_digit_groups(text, match)
        or _DATE_START.match(candidate)
        or _SSN_SHAPE.fullmatch(candidate)
        or _ZIP_PLUS_FOUR.fullmatch(candidate)
        or _DOUBLE_SEPARATOR.search(candidate)
    ):
        return None
    return match.span() if phone.trunk_ok(_digits(candidate)) else None


def _bare(text: str, match: re.Match[str]) -> Span | None:
    if _in_digit_groups(text, match):
        return None
    if phone.bare_ok(_digits(match.group())) and _word_before(text, match.start(), _PHONE_WORDS):
        return match.span()
    return None


# ---------------------------------------------------------------------------------------------
# Payment cards
# ---------------------------------------------------------------------------------------------

# Every printed card format starts with a group of four digits (4-4-4-4, 4-6-5, 4-6-4).
_CARD = re.compile(rf"{_BEFORE}\d{{4}}(?:[ \-]?\d){{9,15}}(?![\w]|[\-.]\d)")


def find_cards(view: TextView) -> list[Span]:
    """See the module docstring."""
    return _number_spans(view, _CARD, _card, regroup=True)


def _card(match: re.Match[str]) -> Span | None:
    """The card in ``match``: all of it, or its first groups (``4111 1111 1111 1111 2025``)."""
    candidate = match.group()
    separator = next((char for char in candidate if not char.isdigit()), None)
    if separator is None:
        return match.span() if _card_ok(candidate) else None
    groups = candidate.split(separator)
    for count in range(len(groups), 1, -1):
        digits = "".join(groups[:count])
        if 13 <= len(digits) <= 19 and _card_ok(digits):
            written = separator.join(groups[:count])
            if checks.card_grouping_ok(written):
                return (match.start(), match.start() + len(written))
    return None


def _card_ok(digits: str) -> bool:
    return checks.card_issuer_ok(digits) and checks.luhn_ok(digits)


# ---------------------------------------------------------------------------------------------
# IBAN
# ---------------------------------------------------------------------------------------------

_IBAN = re.compile(r"[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,34}")


def find_ibans(view: TextView) -> list[Span]:
    """See the module docstring."""
    shape = view.shape
    text = view.text
    spans: list[Span] = []
    at = shape.find(b"AA00")
    while at >= 0:
        known = text[at : at + 2] in checks.IBAN_LENGTHS and not (at and text[at - 1].isalnum())
        match = _IBAN.match(text, at) if known else None
        span = None if match is None else _iban_span(text, at, match.end())
        if span is not None:
            spans.append(span)
            at = shape.find(b"AA00", span[1])
        else:
            at = shape.find(b"AA00", at + 1)
    return spans


def _iban_span(text: str, start: int, limit: int) -> Span | None:
    """The IBAN starting at ``start``: as many characters as its country's IBAN has (blanks
    aside), ending where a group does; None if that is not a valid IBAN."""
    length = checks.IBAN_LENGTHS.get(text[start : start + 2])
    if length is None:
        return None
    compact: list[str] = []
    end = start
    while end < limit and len(compact) < length:
        if text[end] != " ":
            compact.append(text[end])
        end += 1
    if len(compact) != length or (end < len(text) and text[end].isalnum()):
        return None
    return (start, end) if checks.iban_ok("".join(compact)) else None


# ---------------------------------------------------------------------------------------------
# US social security numbers
# ---------------------------------------------------------------------------------------------

_SSN = re.compile(rf"{_BEFORE}\d{{3}}([ \-])\d{{2}}\1\d{{4}}{_AFTER}")
_SSN_BARE = re.compile(rf"{_BEFORE}\d{{9}}{_AFTER}")
_SSN_WORDS = re.compile(r"(?i)\b(?:ssn|ss#|ss no|social security|soc\. sec\.?|taxpayer id)")


def find_ssns(view: TextView) -> list[Span]:
    """See the module docstring."""
    text = view.text

    def bare(match: re.Match[str]) -> Span | None:
        if checks.ssn_ok(match.group()) and _word_before(text, match.start(), _SSN_WORDS):
            return match.span()
        return None

    return [
        *_number_spans(
            view, _SSN, lambda m: m.span() if checks.ssn_ok(_digits(m.group())) else None
        ),
        *_number_spans(view, _SSN_BARE, bare),
    ]


# ---------------------------------------------------------------------------------------------
# IP addresses
# ---------------------------------------------------------------------------------------------

_IPV4 = re.compile(r"(?<![\w.\-])(?:\d{1,3}\.){3}\d{1,3}(?![\w\-]|\.\d)")
_NOT_AN_ADDRESS = re.compile(
    r"(?i)(?:\bversion|\bver\.?|\brelease|\bbuild|\brev\.?|\brevision|\bsection|\bchapter|"
    r"\bclause|\bstep|\bitem|\bfigure|\bfig\.|\btable|\boid|\bpart|\barticle)\s*$"
)
# Any IPv6 address has two colons with at most four hex digits between them.
_IPV6_ANCHOR = re.compile(r":[0-9A-Fa-f]{0,4}:")
_IPV6_CHARS = re.compile(r"[0-9A-Fa-f:.]*")
_IPV6_START = re.compile(r"[0-9A-Fa-f:.]{0,45}$")


def find_ip_addresses(view: TextView) -> list[Span]:
    """See the module docstring."""
    text = view.text
    spans = _number_spans(view, _IPV4, lambda match: _ipv4(text, match))
    ascii = view.ascii
    first = ascii.find(b":")
    if first >= 0 and ascii.find(b":", first + 1) >= 0:  # every IPv6 address has two colons
        spans.extend(_ipv6_spans(text))
    return spans


def _ipv4(text: str, match: re.Match[str]) -> Span | None:
    octets = match.group().split(".")
    if not all(len(o) == 1 or (o[0] != "0" and int(o) <= 255) for o in octets):
        return None
    if _NOT_AN_ADDRESS.search(text, max(match.start() - 16, 0), match.start()):
        return None
    return match.span()


def _ipv6_spans(text: str) -> list[Span]:
    spans: list[Span] = []
    searched = 0
    for anchor in _IPV6_ANCHOR.finditer(text):
        if anchor.start() < searched:
            continue
        before = _IPV6_START.search(text, max(anchor.start() - 45, 0), anchor.start())
        start = anchor.start() if before is None else before.start()
        after = _IPV6_CHARS.match(text, anchor.start())
        end = anchor.end() if after is None else after.end()
        searched = end
        while end > start and text[end - 1] in ".:" and text[end - 2 : end] != "::":
            end -= 1  # a sentence's full stop, a label's colon
        if _is_ipv6(text, start, end):
            spans.append((start, end))
    return spans


def _is_ipv6(text: str, start: int, end: int) -> bool:
    if (start and (text[start - 1].isalnum() or text[start - 1] in "_:.")) or (
        end < len(text) and (text[end].isalnum() or text[end] == "_")
    ):
        return False
    candidate = text[start:end]
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    groups = [group for group in candidate.split(":") if group]
    return candidate == "::1" or (len(groups) >= 2 and sum(map(len, groups)) >= 4)


BUILTIN_FINDERS: dict[str, Finder] = {
    "email": find_emails,
    "phone": find_phones,
    "credit_card": find_cards,
    "iban": find_ibans,
    "us_ssn": find_ssns,
    "ip_address": find_ip_addresses,
}
"""The finders of this module by entity name (``secret`` lives in :mod:`proxy.pii.secrets`)."""
