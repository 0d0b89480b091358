"""The ``secret`` detector: API keys, tokens and private keys in text.

Three kinds of evidence, each validated so that ordinary words and ids are not taken for keys:

- a vendor's key shape — those the log redactor knows (:data:`proxy.core.redact.KEY_SHAPES`: OpenAI
  and Anthropic ``sk-…``, Google ``AIza…``, Groq ``gsk_…``, xAI ``xai-…``, AWS ``AKIA…``) and
  GitHub ``ghp_…``/``github_pat_…``, Slack ``xoxb-…``, Stripe ``sk_live_…``, JSON Web Tokens
  — that also looks generated (:func:`proxy.pii.checks.looks_random`: letters and digits, high
  entropy), so ``sk-this-is-not-a-key`` is not one;
- a high-entropy token behind a credential-ish name (``api_key=``, ``token:``,
  ``"client_secret": "…"``, ``password=``) or after ``Bearer``: the token is the span;
- a PEM private-key block, from its ``-----BEGIN … PRIVATE KEY-----`` line to its END line
  (or to the end of the text when the END line has not come yet, as in a stream).

Every kind of secret has a token of at least 16 characters (a PEM block: its base64 lines),
so a text without such a token (the common case, answered by one byte search) is skipped
without running a pattern.
"""

from __future__ import annotations

import re

from proxy.core.redact import KEY_SHAPES
from proxy.pii.checks import looks_random
from proxy.pii.text import LONG_TOKEN, Span, TextView

# (needle, pattern): every match of a pattern contains its needle, so a pattern runs only where
# its needle is; one alternation of them all would try every branch at every character.
_VENDOR_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (needle, re.compile(shape))
    for needle, shape in (
        *((needle, shape) for needle, shape in KEY_SHAPES if needle != "earer"),  # see below
        ("gh", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),  # GitHub
        ("github_pat_", r"\bgithub_pat_[A-Za-z0-9_]{22,}"),  # GitHub fine-grained
        ("xox", r"\bxox[abeoprs]-[A-Za-z0-9\-]{10,}"),  # Slack
        ("k_", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
        ("eyJ", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWT
    )
)
_TOKEN_CHARS = r"[A-Za-z0-9_\-+/=.~]"
_NAMES = ("key", "token", "secret", "passw", "pwd", "credential")
_NAMED = re.compile(
    r"(?i:key|token|secret|passw(?:or)?d|pwd|credentials?)[\"']?\s{0,3}[:=]\s{0,3}[\"']?"
    rf"(?P<value>{_TOKEN_CHARS}{{16,}})"
)
_BEARER = re.compile(rf"\b[Bb]earer\s+(?P<value>{_TOKEN_CHARS}{{16,}})")
_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    r"(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*\Z)"
)
# Context kept before a long token, for a credential name or "Bearer" in front of its value.
_LEAD = 48


def find_secrets(view: TextView) -> list[Span]:
    """The secrets in ``view`` (see the module docstring)."""
    tokens = view.tokens
    at = tokens.find(LONG_TOKEN)
    if at < 0:  # every kind of secret has such a token (a PEM block: its base64 lines)
        return []
    text = view.text
    spans: list[Span] = []
    if text.find("-----BEGIN") >= 0:
        spans.extend(match.span() for match in _PEM.finditer(text))
    while at >= 0:
        start = tokens.rfind(b" ", 0, at) + 1
        end = tokens.find(b" ", at)
        end = len(tokens) if end < 0 else end
        spans.extend(_in_window(text, start, max(start - _LEAD, 0), end))
        at = tokens.find(LONG_TOKEN, end)
    return spans


def _in_window(text: str, token_start: int, start: int, end: int) -> list[Span]:
    """The secrets of ``text[start:end]`` that reach into the long token at ``token_start``."""
    window = text[start:end]
    matches: list[tuple[int, int]] = []
    for needle, pattern in _VENDOR_SHAPES:
        if needle in window:
            matches.extend(match.span() for match in pattern.finditer(text, start, end))
    lowered = window.lower()
    if any(name in lowered for name in _NAMES):
        matches.extend(match.span("value") for match in _NAMED.finditer(text, start, end))
    if "earer" in window:
        matches.extend(match.span("value") for match in _BEARER.finditer(text, start, end))
    spans: list[Span] = []
    for first, last in matches:
        while last > first and text[last - 1] == ".":
            last -= 1  # a sentence's full stop
        if last > token_start and looks_random(text[first:last]):
            spans.append((first, last))
    return spans
