"""Build the labelled PII corpus: ``python -m tests.proxy.pii.corpus.build`` rewrites the
``*.jsonl`` files beside it (``test_corpus.py`` checks that they are what this builds).

For each built-in entity, at least 200 positive snippets (sentences in the contexts such values
appear in — mail, chat, logs, JSON, code — in the formats people write them) and at least 200
hard negatives: what detectors confuse with that entity (order and tracking numbers, ISBNs,
IMEIs, dates, times, timestamps, versions, section numbers, OIDs, UUIDs, prices, MAC addresses,
package specs, placeholders for keys …), containing no PII at all. Values are generated with a
seeded RNG and made valid (or invalid, for negatives) by the same rules real ones follow: Luhn
and issuer prefixes, IBAN check digits, SSN ranges, numbering plans. Each line is
``{"text", "entity", "positive", "spans": [[entity, value], ...]}``.
"""

# ruff: noqa: E501 - generator tables read best one template per line

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).parent
COUNT = 220
Snippet = tuple[str, list[tuple[str, str]]]

FIRST = [
    "jane",
    "john",
    "maria",
    "li",
    "ahmed",
    "olga",
    "pierre",
    "sofia",
    "kenji",
    "amara",
    "jürgen",
    "zoë",
]
LAST = [
    "doe",
    "smith",
    "garcia",
    "wang",
    "khan",
    "ivanova",
    "martin",
    "rossi",
    "sato",
    "okafor",
    "müller",
]
DOMAINS = [
    "example.com", "mail.example.org", "company.co.uk", "uni.edu.au", "startup.io", "shop.berlin",
    "health.example.net", "dept.gov.uk", "studio.design", "corp.example.de", "sub.mail.example.fr",
    "example.co.jp", "team.example.dev", "support.example.ai",
]  # fmt: skip
TEXT_CONTEXTS = [
    "Contact me at {v}.",
    "Please send the invoice to {v} by Friday",
    "email: {v}",
    "CC {v}, thanks!",
    "Reach our support ({v}) any time.",
    "Forwarded message from <{v}>",
    '{{"customer": {{"contact": "{v}", "tier": 2}}}}',
    "[2024-03-01 10:22:31] INFO user={v} logged in",
    "My details are: {v}",
    "> {v} wrote:",
    "Ticket #4821 raised by {v} about billing",
    "Kontakt: {v} (Mo-Fr)",
]


def pick(rng: random.Random, items: list[str]) -> str:
    return items[rng.randrange(len(items))]


def digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def in_context(rng: random.Random, value: str, contexts: list[str] | None = None) -> str:
    return pick(rng, contexts or TEXT_CONTEXTS).format(v=value)


# --- e-mail ------------------------------------------------------------------------------------


def email(rng: random.Random) -> str:
    first, last = pick(rng, FIRST), pick(rng, LAST)
    local = pick(
        rng,
        [f"{first}.{last}", f"{first[0]}{last}", f"{first}_{last}", f"{first}{digits(rng, 2)}",
         f"{first}.{last}+{pick(rng, ['news', 'billing', 'dev'])}", f"{first}-{last}",
         f"{last}.{first}.{digits(rng, 3)}", f"{first.upper()}.{last.title()}"],
    )  # fmt: skip
    return f"{local}@{pick(rng, DOMAINS)}"


EMAIL_NEGATIVES: list[Callable[[random.Random], str]] = [
    lambda r: f"Clone it with git@github.com:{pick(r, LAST)}/repo-{digits(r, 2)}.git first",
    lambda r: f"npm install lodash@4.17.{digits(r, 2)} and react@18.{r.randrange(9)}.0",
    lambda r: f"Use the retina asset icon@{r.randrange(2, 4)}x.png in the header",
    lambda r: f"ssh admin@localhost -p {digits(r, 4)}",
    lambda r: f"The service account runs as deploy@build-{digits(r, 2)}.internal",
    lambda r: f"Thanks @{pick(r, FIRST)} for the review of PR #{digits(r, 4)}",
    lambda r: f"Decorate it with @app.route('/items/{digits(r, 3)}')",
    lambda r: f"Meet @ {r.randrange(1, 12)}pm in room {digits(r, 3)}",
    lambda r: f"docker pull registry/image@sha256:{''.join(r.choice('0123456789abcdef') for _ in range(16))}",
    lambda r: f"Price: 3 items @ ${r.randrange(2, 99)}.{digits(r, 2)} each",
    lambda r: f"user{digits(r, 2)}@host with no domain at all",
    lambda r: f"name@example.invalidtld{digits(r, 2)} is not a real domain",
    lambda r: f"Type {pick(r, FIRST)}..{pick(r, LAST)}@example.com? No: two dots in a row",
    lambda r: f"pip install 'pkg @ git+https://example.com/{pick(r, LAST)}.git'",
    lambda r: f"Version pinned: {pick(r, LAST)}@v{r.randrange(1, 9)}.{r.randrange(20)}.{r.randrange(20)}",
    lambda r: f"Scores: {r.randrange(10)}@{r.randrange(10)} and {r.randrange(10)}@{r.randrange(10)}",
]  # fmt: skip


# --- payment cards ---------------------------------------------------------------------------


def luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    body = prefix + digits(rng, length - len(prefix) - 1)
    for check in string.digits:
        number = body + check
        total = 0
        for i, char in enumerate(reversed(number)):
            value = int(char)
            if i % 2:
                value = value * 2 - 9 if value > 4 else value * 2
            total += value
        if total % 10 == 0:
            return number
    raise AssertionError("unreachable")


CARD_NETWORKS = [("4", 16), ("4", 13), ("51", 16), ("55", 16), ("2221", 16), ("2720", 16),
                 ("34", 15), ("37", 15), ("6011", 16), ("65", 16), ("3530", 16), ("36", 14),
                 ("62", 16), ("2200", 16), ("5018", 16), ("4", 19)]  # fmt: skip


def group_card(number: str, rng: random.Random) -> str:
    style = rng.randrange(4)
    if style == 0 or len(number) not in (15, 16):
        return number
    separator = " " if style in (1, 3) else "-"
    if len(number) == 15:
        return separator.join((number[:4], number[4:10], number[10:]))
    return separator.join(number[i : i + 4] for i in range(0, 16, 4))


def card(rng: random.Random) -> str:
    prefix, length = CARD_NETWORKS[rng.randrange(len(CARD_NETWORKS))]
    return group_card(luhn_complete(prefix, length, rng), rng)


def luhn_broken(rng: random.Random) -> str:
    good = luhn_complete(pick(rng, ["4", "51", "6011"]), 16, rng)
    last = str((int(good[-1]) + rng.randrange(1, 10)) % 10)
    return group_card(good[:-1] + last, rng)


CARD_CONTEXTS = [
    "Card number: {v}", "charge {v} exp 09/27", "My Visa is {v}, CVV on the back",
    '{{"pan": "{v}", "holder": "J DOE"}}', "pay with {v} please", "card {v} was declined",
]  # fmt: skip
CARD_NEGATIVES: list[Callable[[random.Random], str]] = [
    lambda r: f"Card number: {luhn_broken(r)}",
    lambda r: f"Order #{luhn_complete(pick(r, ['1', '7', '9']), 16, r)} has shipped",
    lambda r: f"USPS tracking 9400 1{digits(r, 3)} {digits(r, 4)} {digits(r, 4)} {digits(r, 4)} {digits(r, 2)}",
    lambda r: f"IMEI {luhn_complete(pick(r, ['35', '01', '86']), 15, r)} registered",
    lambda r: f"ISBN 978-{r.randrange(10)}-{digits(r, 3)}-{digits(r, 5)}-{r.randrange(10)}",
    lambda r: f"timestamp_ms={r.randrange(1_600_000_000_000, 1_800_000_000_000)}",
    lambda r: f"Invoice INV-{digits(r, 4)}-{digits(r, 6)} is due",
    lambda r: f"Account {digits(r, 8)} sort code {digits(r, 2)}-{digits(r, 2)}-{digits(r, 2)}",
    lambda r: f"Reference {luhn_complete('4', 15, r)} (15 digits)",
    lambda r: f"Serial {digits(r, 4)}-{digits(r, 4)}-{digits(r, 4)}",
    lambda r: f"FedEx {digits(r, 4)} {digits(r, 4)} {digits(r, 4)}",
    lambda r: f"batch {luhn_complete('0', 16, r)} processed",
]  # fmt: skip


# --- IBAN --------------------------------------------------------------------------------------

IBAN_FORMATS = {
    "DE": "n18", "GB": "a4n14", "FR": "n10c11n2", "NL": "a4n10", "ES": "n20", "IT": "a1n10c12",
    "BE": "n12", "CH": "n5c12", "AT": "n16", "PL": "n24", "SE": "n20", "IE": "a4n14",
    "PT": "n21", "NO": "n11", "DK": "n14", "FI": "n14", "LU": "n3c13", "CZ": "n20", "SA": "n2c18",
    "TR": "n5z1c16", "BR": "n23a1c1",
}  # fmt: skip


def bban(spec: str, rng: random.Random) -> str:
    out = ""
    i = 0
    while i < len(spec):
        kind = spec[i]
        j = i + 1
        while j < len(spec) and spec[j].isdigit():
            j += 1
        n = int(spec[i + 1 : j])
        pool = {
            "n": string.digits,
            "a": string.ascii_uppercase,
            "c": string.ascii_uppercase + string.digits,
            "z": "0",
        }[kind]
        out += "".join(rng.choice(pool) for _ in range(n))
        i = j
    return out


def iban_check(country: str, account: str) -> str:
    rearranged = (account + country + "00").translate(
        {ord(c): str(ord(c) - 55) for c in string.ascii_uppercase}
    )
    return f"{98 - int(rearranged) % 97:02d}"


def iban(rng: random.Random, broken: bool = False) -> str:
    country = pick(rng, sorted(IBAN_FORMATS))
    account = bban(IBAN_FORMATS[country], rng)
    check = iban_check(country, account)
    if broken:
        check = f"{(int(check) + rng.randrange(1, 96)) % 97 + 2:02d}"
        if check == iban_check(country, account):
            check = f"{(int(check) + 1) % 97 + 2:02d}"
    compact = country + check + account
    if rng.randrange(2):
        return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))
    return compact


IBAN_CONTEXTS = [
    "IBAN: {v}", "Please transfer to {v} (ref 2024-11)", "Bank details {v}, BIC DEUTDEFF",
    '{{"iban": "{v}"}}', "refund to account {v}", "Überweisung an {v}",
]  # fmt: skip
IBAN_NEGATIVES: list[Callable[[random.Random], str]] = [
    lambda r: f"IBAN: {iban(r, broken=True)}",
    lambda r: f"BIC {pick(r, ['DEUTDEFF', 'NWBKGB2L', 'BNPAFRPP', 'INGBNL2A'])}{digits(r, 3)}",
    lambda r: f"VAT number {pick(r, ['DE', 'FR', 'NL', 'GB'])}{digits(r, 9)}",
    lambda r: f"Part AB{digits(r, 2)} {pick(r, ['CDEF', 'XYZW'])} {digits(r, 4)} in stock",
    lambda r: f"Certified ISO {digits(r, 4)}:{r.randrange(2000, 2024)}",
    lambda r: f"Flight {pick(r, ['LH', 'BA', 'AF'])}{digits(r, 4)} departs {r.randrange(10, 23)}:{digits(r, 2)}",
    lambda r: f"Code ZZ{digits(r, 2)}{digits(r, 16)} is no country",
    lambda r: f"DE{digits(r, 2)} {digits(r, 4)} {digits(r, 4)} (too short)",
]  # fmt: skip


# --- SSN ---------------------------------------------------------------------------------------


def ssn_parts(rng: random.Random) -> tuple[str, str, str]:
    area = rng.randrange(1, 900)
    while area == 666:
        area = rng.randrange(1, 900)
    return f"{area:03d}", f"{rng.randrange(1, 100):02d}", f"{rng.randrange(1, 10000):04d}"


def ssn(rng: random.Random) -> tuple[str, str]:
    area, group, serial = ssn_parts(rng)
    style = rng.randrange(5)
    if style == 4:
        return "SSN {v} on file", f"{area}{group}{serial}"
    separator = " " if style == 3 else "-"
    context = pick(
        rng,
        [
            "SSN: {v}",
            "social security number {v}",
            "{v} is his SSN",
            '{{"ssn": "{v}"}}',
            "SS# {v}",
            "employee {v} (tax)",
        ],
    )
    return context, separator.join((area, group, serial))


SSN_NEGATIVES: list[Callable[[random.Random], str]] = [
    lambda r: f"SSN: {pick(r, ['000', '666', '9' + digits(r, 2)])}-{digits(r, 2)}-{digits(r, 4)}",
    lambda r: f"SSN: {ssn_parts(r)[0]}-00-{digits(r, 4)}",
    lambda r: f"SSN: {ssn_parts(r)[0]}-{ssn_parts(r)[1]}-0000",
    lambda r: f"the sample card number {pick(r, ['078-05-1120', '219-09-9999'])}",
    lambda r: f"ZIP {digits(r, 5)}-{digits(r, 4)}",
    lambda r: f"part no. {digits(r, 3)}-{digits(r, 2)}-{digits(r, 5)}",
    lambda r: f"EIN {digits(r, 2)}-{digits(r, 7)}",
    lambda r: f"Order {ssn_parts(r)[0]}{digits(r, 6)} confirmed",
    lambda r: f"on {r.randrange(2000, 2030)}-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d}",
    lambda r: f"ITIN 9{digits(r, 2)}-7{r.randrange(10)}-{digits(r, 4)}",
]  # fmt: skip


# --- phones ------------------------------------------------------------------------------------


def nanp_number(rng: random.Random) -> tuple[str, str, str]:
    area = f"{rng.randrange(2, 10)}{rng.randrange(0, 9)}{rng.randrange(10)}"
    while area[1:] == "11":
        area = f"{rng.randrange(2, 10)}{rng.randrange(0, 9)}{rng.randrange(10)}"
    exchange = f"{rng.randrange(2, 10)}{digits(rng, 2)}"
    while exchange[1:] == "11":
        exchange = f"{rng.randrange(2, 10)}{digits(rng, 2)}"
    return area, exchange, digits(rng, 4)


def phone_number(rng: random.Random) -> str:
    a, e, s = nanp_number(rng)
    nz = lambda n: str(rng.randrange(1, 10)) + digits(rng, n - 1)  # noqa: E731
    return pick(
        rng,
        [
            f"({a}) {e}-{s}", f"{a}-{e}-{s}", f"{a}.{e}.{s}", f"+1 {a} {e} {s}", f"1-{a}-{e}-{s}",
            f"+1-{a}-{e}-{s}", f"+44 20 {nz(4)} {digits(rng, 4)}", f"+44 7{digits(rng, 3)} {digits(rng, 6)}",
            f"020 {nz(4)} {digits(rng, 4)}", f"07{digits(rng, 3)} {digits(rng, 6)}",
            f"+49 30 {nz(8)}", f"030 {nz(7)}", f"+49 171 {nz(7)}", f"0171 {nz(7)}",
            f"+33 {rng.randrange(1, 8)} {digits(rng, 2)} {digits(rng, 2)} {digits(rng, 2)} {digits(rng, 2)}",
            f"0{rng.randrange(1, 8)} {digits(rng, 2)} {digits(rng, 2)} {digits(rng, 2)} {digits(rng, 2)}",
            f"+61 2 {nz(4)} {digits(rng, 4)}", f"(02) {nz(4)} {digits(rng, 4)}", f"+61 4{digits(rng, 2)} {digits(rng, 3)} {digits(rng, 3)}",
            f"+91 {rng.randrange(6, 10)}{digits(rng, 4)} {digits(rng, 5)}", f"+81 3-{nz(4)}-{digits(rng, 4)}",
            f"090-{nz(4)}-{digits(rng, 4)}", f"+34 6{digits(rng, 2)} {digits(rng, 3)} {digits(rng, 3)}",
            f"+31 20 {nz(3)} {digits(rng, 4)}", f"06-{nz(8)}", f"+39 06 {nz(4)} {digits(rng, 4)}",
            f"+55 11 9{digits(rng, 4)}-{digits(rng, 4)}", f"+86 138 {digits(rng, 4)} {digits(rng, 4)}",
            f"0044 20 {nz(4)} {digits(rng, 4)}", f"+{1}{a}{e}{s}", f"+44 (0)20 {nz(4)} {digits(rng, 4)}",
        ],
    )  # fmt: skip


PHONE_CONTEXTS = [
    "Call me on {v}.", "phone: {v}", "Tel. {v}", "my mobile is {v}", "WhatsApp {v} anytime",
    "You can reach the front desk at {v} until 6pm", '{{"phone": "{v}"}}', "Fax: {v}",
    "Rufen Sie {v} an", "Hotline {v} (24/7)", "SMS {v} to confirm", "Numéro : {v}",
]  # fmt: skip
# Numbers written without a prefix: phones only because a word says so.
PHONE_BARE: list[Callable[[random.Random], tuple[str, str]]] = [
    lambda r: ("my mobile is {v}", f"{r.randrange(6, 10)}{digits(r, 4)} {digits(r, 5)}"),
    lambda r: ("call {v} tomorrow", f"6{digits(r, 2)} {digits(r, 3)} {digits(r, 3)}"),
    lambda r: ("phone {v}", f"{r.randrange(2, 10)}{digits(r, 9)}"),
]  # fmt: skip
PHONE_NEGATIVES: list[Callable[[random.Random], str]] = [
    lambda r: f"Due {r.randrange(2000, 2030)}-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d} at {r.randrange(24):02d}:{digits(r, 2)}",
    lambda r: f"Born {r.randrange(1, 29):02d}.{r.randrange(1, 13):02d}.{r.randrange(1950, 2010)}",
    lambda r: f"Meeting on {r.randrange(1, 13):02d}/{r.randrange(1, 29):02d}/{r.randrange(2000, 2030)} {r.randrange(24):02d}:{digits(r, 2)}:{digits(r, 2)}",
    lambda r: f"Amazon order {digits(r, 3)}-{digits(r, 7)}-{digits(r, 7)}",
    lambda r: f"ISBN 978-{r.randrange(10)}-{digits(r, 3)}-{digits(r, 5)}-{r.randrange(10)}",
    lambda r: f"Total: ${r.randrange(1, 999)},{digits(r, 3)}.{digits(r, 2)}",
    lambda r: f"Tracking 1Z{digits(r, 3)}AA1{digits(r, 10)}",
    lambda r: f"Build {r.randrange(10, 20)}.0.{digits(r, 5)}.{digits(r, 3)}",
    lambda r: f"epoch {r.randrange(1_600_000_000, 1_800_000_000)}",
    lambda r: f"Invoice INV-{r.randrange(2019, 2026)}-{digits(r, 6)}",
    lambda r: f"ZIP {digits(r, 5)}-{digits(r, 4)}",
    lambda r: f"Located at {r.randrange(-89, 89)}.{digits(r, 4)}, {r.randrange(-179, 179)}.{digits(r, 4)}",
    lambda r: f"Population 1 {digits(r, 3)} {digits(r, 3)} in {r.randrange(1990, 2024)}",
    lambda r: f"Fake number 123-{digits(r, 3)}-{digits(r, 4)} from the movie",
    lambda r: f"Account no. {digits(r, 10)}",
    lambda r: f"Ref ORD-0{digits(r, 3)}-{digits(r, 6)}",
    lambda r: f"uuid {''.join(r.choice('0123456789abcdef') for _ in range(8))}-{digits(r, 4)}-{digits(r, 4)}-{digits(r, 4)}-{digits(r, 12)}",
    lambda r: f"Score {r.randrange(100)}-{r.randrange(100)} after {r.randrange(90)} minutes",
    lambda r: f"Version {r.randrange(10)}.{r.randrange(30)}.{r.randrange(100)}-rc.{r.randrange(9)}",
]  # fmt: skip


# --- IP addresses ------------------------------------------------------------------------------


def ipv4(rng: random.Random) -> str:
    return ".".join(str(rng.randrange(1 if i == 0 else 0, 255)) for i in range(4))


def ipv6(rng: random.Random) -> str:
    groups = [f"{rng.randrange(0x10000):x}" for _ in range(8)]
    style = rng.randrange(5)
    if style == 0:
        return ":".join(groups)
    if style == 1:
        return f"2001:db8::{groups[6]}:{groups[7]}"
    if style == 2:
        return f"fe80::{groups[5]}:{groups[6]}:{groups[7]}"
    if style == 3:
        return f"::ffff:{ipv4(rng)}"
    return pick(rng, ["::1", f"2001:db8:{groups[2]}::1", f"{groups[0]}:{groups[1]}::{groups[7]}"])


IP_CONTEXTS = [
    "Request from {v} was blocked", "host={v} port=443", "curl http://{v}/health",
    "Client IP: {v}", '{{"remote_addr": "{v}", "status": 200}}', "ping {v}",
    "allow {v} in the firewall", "[{v}] - - GET /index.html 200", "Server at {v}.",
]  # fmt: skip
IP_NEGATIVES: list[Callable[[random.Random], str]] = [
    lambda r: f"Upgrade to version {r.randrange(10)}.{r.randrange(20)}.{r.randrange(20)}.{r.randrange(20)}",
    lambda r: f"See section {r.randrange(1, 9)}.{r.randrange(1, 9)}.{r.randrange(1, 9)}.{r.randrange(1, 9)}",
    lambda r: f"OID 1.3.6.1.4.1.{digits(r, 3)}",
    lambda r: f"Released v{r.randrange(10)}.{r.randrange(20)}.{r.randrange(20)}",
    lambda r: f"Date {r.randrange(1, 29):02d}.{r.randrange(1, 13):02d}.{r.randrange(2000, 2030)}",
    lambda r: f"Octets {r.randrange(256, 999)}.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(256)} are out of range",
    lambda r: f"Padded 0{r.randrange(1, 9)}.0{r.randrange(1, 9)}.0{r.randrange(1, 9)}.0{r.randrange(1, 9)}",
    lambda r: f"pi is about 3.{digits(r, 5)}",
    lambda r: f"MAC {':'.join(f'{r.randrange(256):02x}' for _ in range(6))}",
    lambda r: f"Started at {r.randrange(24):02d}:{digits(r, 2)}:{digits(r, 2)}",
    lambda r: f"Use std::{pick(r, ['vector', 'string', 'map'])}<int> here",
    lambda r: f"Slice it with xs[{r.randrange(1, 9)}::{r.randrange(2, 9)}]",
    lambda r: f"Aspect ratio {r.randrange(1, 21)}:{r.randrange(1, 10)}",
    lambda r: f"Build {r.randrange(10, 20)}.0.{digits(r, 5)}.{r.randrange(1, 999)}",
    lambda r: f"Rust path crate::{pick(r, ['io', 'fs', 'net'])}::read",
]  # fmt: skip


# --- secrets -----------------------------------------------------------------------------------

ALNUM = string.ascii_letters + string.digits


def token(rng: random.Random, n: int, pool: str = ALNUM) -> str:
    while True:
        value = "".join(rng.choice(pool) for _ in range(n))
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            return value


def jwt(rng: random.Random) -> str:
    payload = token(rng, 40, ALNUM + "_-")
    return f"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{payload}.{token(rng, 43, ALNUM + '_-')}"


def secret(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(12)
    if kind == 0:
        return "OPENAI_API_KEY={v}", "sk-proj-" + token(rng, 48, ALNUM + "_-")
    if kind == 1:
        return "use {v} for the claude calls", "sk-ant-api03-" + token(rng, 40, ALNUM + "_-")
    if kind == 2:
        return "maps key {v}", "AIza" + token(rng, 35, ALNUM + "_-")
    if kind == 3:
        return "aws_access_key_id = {v}", "AKIA" + token(
            rng, 16, string.ascii_uppercase + string.digits
        )
    if kind == 4:
        return "git remote set-url origin https://{v}@github.com/x/y", "ghp_" + token(rng, 36)
    if kind == 5:
        return "SLACK_BOT_TOKEN: {v}", "xoxb-" + digits(rng, 12) + "-" + token(rng, 24)
    if kind == 6:
        return "stripe key {v}", "sk_live_" + token(rng, 24)
    if kind == 7:
        return "Authorization: Bearer {v}", jwt(rng)
    if kind == 8:
        return "Authorization: Bearer {v}", token(rng, 32, string.hexdigits.lower()[:16])
    if kind == 9:
        return pick(
            rng, ['"client_secret": "{v}"', "password={v}", "api_key: {v}", "x-api-key: {v}"]
        ), token(rng, 28, ALNUM + "+/")
    if kind == 10:
        return "groq {v}", "gsk_" + token(rng, 40)
    body = "\n".join(token(rng, 64, ALNUM + "+/") for _ in range(3))
    kind_name = pick(rng, ["RSA ", "EC ", "OPENSSH ", ""])
    block = f"-----BEGIN {kind_name}PRIVATE KEY-----\n{body}\n-----END {kind_name}PRIVATE KEY-----"
    return "here is the key:\n{v}\nkeep it safe", block


SECRET_NEGATIVES: list[Callable[[random.Random], str]] = [
    lambda r: f"import sk-learn? No: pip install scikit-learn=={r.randrange(1, 2)}.{r.randrange(6)}",
    lambda r: "OPENAI_API_KEY=sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx (replace me)",
    lambda r: f"api_key: YOUR_API_KEY_HERE_{r.randrange(9)}",
    lambda r: f"max_tokens={r.randrange(256, 8192)} temperature=0.{r.randrange(10)}",
    lambda r: f"sort_key=created_at_desc&page={r.randrange(1, 50)}",
    lambda r: f"idempotency_key: {''.join(r.choice('0123456789abcdef') for _ in range(8))}-{digits(r, 4)}-4{digits(r, 3)}-a{digits(r, 3)}-{digits(r, 12)}",
    lambda r: f"commit {''.join(r.choice('0123456789abcdef') for _ in range(40))} fixed it",
    lambda r: f"function getUserProfileByIdentifier{r.randrange(9)}(id) {{ return db.find(id) }}",
    lambda r: f"token: null, key=value, secret: '{pick(r, ['changeme', 'hunter2', 'password'])}'",
    lambda r: "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUZ\n-----END CERTIFICATE-----",
    lambda r: f"the bearer instruments matured in {r.randrange(1990, 2024)}",
    lambda r: f"Authorization: Bearer <token> (see docs page {r.randrange(99)})",
    lambda r: f"task-management-service-v{r.randrange(9)} deployed to sk-cluster",
    lambda r: f"https://example.com/docs/getting-started/authentication#section-{r.randrange(9)}",
    lambda r: f"tokens used: {r.randrange(100, 99999)}, cache_key=user:{r.randrange(999)}:profile",
    lambda r: "AKIA is the prefix of AWS access key ids; ghp_ of GitHub tokens",
]  # fmt: skip


# --- assembly ----------------------------------------------------------------------------------


def positives(entity: str, rng: random.Random) -> Iterator[Snippet]:
    for _ in range(COUNT):
        if entity == "email":
            value = email(rng)
            yield in_context(rng, value), [("email", value)]
        elif entity == "credit_card":
            value = card(rng)
            yield in_context(rng, value, CARD_CONTEXTS), [("credit_card", value)]
        elif entity == "iban":
            value = iban(rng)
            yield in_context(rng, value, IBAN_CONTEXTS), [("iban", value)]
        elif entity == "us_ssn":
            context, value = ssn(rng)
            yield context.format(v=value), [("us_ssn", value)]
        elif entity == "phone":
            if rng.randrange(8) == 0:
                context, value = PHONE_BARE[rng.randrange(len(PHONE_BARE))](rng)
                yield context.format(v=value), [("phone", value)]
            else:
                value = phone_number(rng)
                yield in_context(rng, value, PHONE_CONTEXTS), [("phone", value)]
        elif entity == "ip_address":
            if rng.randrange(2):
                value = ipv4(rng)
                yield (
                    in_context(rng, value, [*IP_CONTEXTS, "curl http://{v}:8080/"]),
                    [("ip_address", value)],
                )
            else:
                value = ipv6(rng)
                yield (
                    in_context(rng, value, [*IP_CONTEXTS, "curl http://[{v}]:8080/"]),
                    [("ip_address", value)],
                )
        else:
            context, value = secret(rng)
            yield context.format(v=value), [("secret", value)]


NEGATIVES = {
    "email": EMAIL_NEGATIVES,
    "credit_card": CARD_NEGATIVES,
    "iban": IBAN_NEGATIVES,
    "us_ssn": SSN_NEGATIVES,
    "phone": PHONE_NEGATIVES,
    "ip_address": IP_NEGATIVES,
    "secret": SECRET_NEGATIVES,
}
ENTITIES = tuple(NEGATIVES)


def negatives(entity: str, rng: random.Random) -> Iterator[Snippet]:
    makers = NEGATIVES[entity]
    for index in range(COUNT):
        yield makers[index % len(makers)](rng), []


def fullwidth(text: str) -> str:
    """``text`` with its ASCII digits as full-width digits (U+FF10-U+FF19)."""
    return "".join(chr(0xFF10 + int(c)) if c.isdigit() else c for c in text)


# Known weaknesses, kept in the corpus so that the printed table shows them: values written in
# ways the detectors do not recognise (misses), and look-alikes they cannot tell apart (false
# alarms). See docs/masking.md ("Quality").
KNOWN_MISSES: dict[str, list[Snippet]] = {
    "email": [
        (
            'write to "john doe"@example.com (a quoted local part)',
            [("email", '"john doe"@example.com')],
        )
    ],
    "phone": [
        ("reach me on 555-0132 (a local number without its area code)", [("phone", "555-0132")]),
        (
            f"Tel {fullwidth('415-555-0132')} in full-width digits",
            [("phone", fullwidth("415-555-0132"))],
        ),
    ],
    "credit_card": [
        ("card 4111.1111.1111.1111 with dots", [("credit_card", "4111.1111.1111.1111")])
    ],
    "iban": [
        (
            "iban de89 3704 0044 0532 0130 00 in lower case",
            [("iban", "de89 3704 0044 0532 0130 00")],
        )
    ],
    "us_ssn": [("SSN536221042 glued to its label", [("us_ssn", "536221042")])],
    "ip_address": [("the address is 10.0.0.1.2 (a typo in the logs)", [])],
    "secret": [
        (
            "the AWS secret is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            [("secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")],
        ),
    ],
}
KNOWN_FALSE_ALARMS: dict[str, list[Snippet]] = {
    "credit_card": [("Order #4111 1111 1111 1111 has shipped (an order number in a card range)", [])],
    "ip_address": [("upgrade to v 1.2.3.4 tonight (a version after a lone v)", [])],
    "phone": [("Lot 020 7946 0958 of the auction (a trunk-0 number that is not one)", [])],
}  # fmt: skip


def build() -> dict[str, str]:
    """The corpus files' contents by file name."""
    files: dict[str, str] = {}
    for entity in ENTITIES:
        rng = random.Random(f"crossway-pii-{entity}")
        lines = []
        misses = KNOWN_MISSES.get(entity, [])
        false_alarms = KNOWN_FALSE_ALARMS.get(entity, [])
        groups = (
            (True, [*positives(entity, rng), *(m for m in misses if m[1])]),
            (False, [*negatives(entity, rng), *(m for m in misses if not m[1]), *false_alarms]),
        )
        for positive, snippets in groups:
            for text, spans in snippets:
                record = {"text": text, "entity": entity, "positive": positive, "spans": spans}
                lines.append(json.dumps(record, ensure_ascii=False))
        files[f"{entity}.jsonl"] = "\n".join(lines) + "\n"
    return files


if __name__ == "__main__":
    for name, content in build().items():
        (HERE / name).write_text(content, encoding="utf-8")
