"""The built-in detectors, case by case: what each finds, what it must not, and that the
validators (Luhn, issuer ranges, mod-97, calling codes, TLDs, ipaddress) decide. The labelled
corpus (test_corpus.py) measures precision and recall on hundreds of snippets per entity."""

from __future__ import annotations

import pytest

from proxy.pii import checks, phone
from proxy.pii.detectors import BUILTIN_FINDERS
from proxy.pii.scanner import Scanner
from proxy.pii.secrets import find_secrets
from proxy.pii.text import TextView

SCANNER = Scanner([("secret", find_secrets), *BUILTIN_FINDERS.items()])
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"  # split: secret scanners flag the whole literal


def found(text: str) -> list[tuple[str, str]]:
    return [(f.entity, text[f.start : f.end]) for f in SCANNER.scan(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail jane.doe+news@example.co.uk now", [("email", "jane.doe+news@example.co.uk")]),
        ("<bob_smith@mail.example.org>.", [("email", "bob_smith@mail.example.org")]),
        ("card 4111 1111 1111 1111 exp 12/25", [("credit_card", "4111 1111 1111 1111")]),
        ("amex 3782-822463-10005.", [("credit_card", "3782-822463-10005")]),
        ("4111111111111111 2025", [("credit_card", "4111111111111111")]),
        ("call (415) 555-0132 today", [("phone", "(415) 555-0132")]),
        ("ring +44 20 7946 0958", [("phone", "+44 20 7946 0958")]),
        ("+44 (0)20 7946 0958", [("phone", "+44 (0)20 7946 0958")]),
        ("appelle 06 12 34 56 78", [("phone", "06 12 34 56 78")]),
        ("0049 30 12345678", [("phone", "0049 30 12345678")]),
        ("my mobile is 98765 43210", [("phone", "98765 43210")]),
        ("IBAN DE89 3704 0044 0532 0130 00 EUR", [("iban", "DE89 3704 0044 0532 0130 00")]),
        ("GB29NWBK60161331926819", [("iban", "GB29NWBK60161331926819")]),
        ("SSN 536-22-1042.", [("us_ssn", "536-22-1042")]),
        ("ssn: 536221042", [("us_ssn", "536221042")]),
        ("host 10.0.0.1:8080", [("ip_address", "10.0.0.1")]),
        ("from fe80::1ff:fe23:4567:890a.", [("ip_address", "fe80::1ff:fe23:4567:890a")]),
        ("loopback ::1 only", [("ip_address", "::1")]),
        ("::ffff:192.0.2.128", [("ip_address", "::ffff:192.0.2.128")]),
        (f"id {AWS_KEY_ID}", [("secret", AWS_KEY_ID)]),
        (
            "key sk-proj-abc123DEF456ghi789JKL012mno345",
            [("secret", "sk-proj-abc123DEF456ghi789JKL012mno345")],
        ),
        (
            "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
            [("secret", "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")],
        ),
        ('"api_key": "Zx81kQ0pLm27Vb5nTr9Yw3"', [("secret", "Zx81kQ0pLm27Vb5nTr9Yw3")]),
        (
            "Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0.",
            [("secret", "9f8e7d6c5b4a39281706f5e4d3c2b1a0")],
        ),
    ],
)
def test_finds(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "git@github.com:org/repo.git",  # an scp target, not an address
        "lodash@4.17.21 and icon@2x.png and user@localhost and x@host.internal",
        "a..b@example.com",  # no address: a double dot
        "4111 1111 1111 1112",  # Luhn fails
        "1234 5678 9012 3456 7",  # no issuer
        "4111 11 1111111 1111",  # not grouped as cards are
        "dates 2024-01-15, 01.02.2024, 15/01/2024 10:30:00",
        "order 112-3456789-1234567, ISBN 978-3-16-148410-0, ORD-0123-456789",
        "123-456-7890",  # NANP area codes never start with 1
        "612 345 678",  # grouped digits with no word saying it is a phone
        "DE89 3704 0044 0532 0130 01",  # mod-97 fails
        "XX89 3704 0044 0532 0130 00",  # no such country
        "078-05-1120 219-09-9999 666-12-3456 000-12-3456 123-00-4567",  # never issued
        "536221042",  # nine digits without a word saying SSN
        "version 1.2.3.4, section 4.2.1.3, 256.1.1.1, 01.02.03.04, 1.3.6.1.4.1",
        "12:30:45, 00:1a:2b:3c:4d:5e, std::vector, x[1::2], ratio 16:9, a::b",
        "sk-this-is-not-a-key, max_tokens=4096, sort_key=created_at_desc",
        "idempotency_key=550e8400-e29b-41d4-a716-446655440000",  # a UUID is an id
        "the bearer instruments were transferred",
    ],
)
def test_does_not_find(text: str) -> None:
    assert found(text) == []


def test_pem_blocks_to_their_end_line_or_to_the_end_of_an_unfinished_text() -> None:
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
    assert found(f"key: {block} done") == [("secret", block)]
    unfinished = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    assert found(unfinished) == [("secret", unfinished)]
    public = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----"
    assert found(public) == []


def test_overlaps_go_to_the_longer_find() -> None:
    # The card's digits contain phone-shaped runs; the whole card wins.
    assert found("4111-1111-1111-1111") == [("credit_card", "4111-1111-1111-1111")]


def test_non_ascii_text_keeps_positions() -> None:
    text = "Grüße 🎉 an jürgen@example.de, Tel. +49 30 12345678"
    assert found(text) == [("email", "jürgen@example.de"), ("phone", "+49 30 12345678")]


@pytest.mark.parametrize(
    ("digits", "ok"),
    [("4111111111111111", True), ("4111111111111112", False), ("79927398713", True)],
)
def test_luhn(digits: str, ok: bool) -> None:
    assert checks.luhn_ok(digits) is ok


def test_issuer_ranges_and_lengths() -> None:
    assert checks.card_issuer_ok("4" + "0" * 15)  # Visa 16
    assert not checks.card_issuer_ok("4" + "0" * 14)  # Visa has no 15-digit cards
    assert checks.card_issuer_ok("2221" + "0" * 12)  # Mastercard 2-series
    assert not checks.card_issuer_ok("2721" + "0" * 12)
    assert checks.card_issuer_ok("37" + "0" * 13)  # Amex 15
    assert not checks.card_issuer_ok("9" + "0" * 15)


def test_iban_check_digits_and_country_length() -> None:
    assert checks.iban_ok("DE89370400440532013000")
    assert not checks.iban_ok("DE8937040044053201300")  # one short
    assert not checks.iban_ok("DE89370400440532013001")


def test_phone_plausibility() -> None:
    assert phone.international_ok("442079460958")
    assert not phone.international_ok("44207946")  # six national digits: too few for the UK
    assert phone.international_ok("14155550132")
    assert not phone.international_ok("11155550132")  # area code 115
    assert phone.international_ok("390612345678")  # Italy keeps its 0


def test_text_view_numbers_are_digit_runs() -> None:
    view = TextView("call 415 555 0132 or 12 ok, 1.1.1.1")
    assert [view.text[s:e].strip() for s, e in view.numbers()] == ["415 555 0132", "1.1.1.1"]
