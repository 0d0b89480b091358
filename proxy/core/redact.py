"""Secret redaction for everything the gateway shows or logs.

A :class:`Redactor` knows the configured credential values (provider keys) and the shapes of
common API keys; :meth:`Redactor.text` replaces either with ``[REDACTED]``. It is applied to
every text field of an upstream error before it becomes client-visible (:func:`sanitise_error`),
and is the first log processor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, MutableMapping
from typing import Any

from proxy.core.errors import GatewayError

MASK = "[REDACTED]"
MAX_MESSAGE_CHARS = 1000
"""The longest error message the gateway relays (after redaction)."""
MAX_FIELD_CHARS = 256
"""The longest other error text (``code``, ``param``, strings in nested values) it relays."""

# Shapes of credentials worth catching even when the gateway did not configure them (a client's
# own key echoed back by an upstream, a key in an exception message). Each comes with a needle:
# text that every match contains, so that text without any needle is known clean without
# running the regular expression (most logged strings: ids, model names, numbers). The PII
# secret detector (proxy.pii.secrets) finds the same shapes in prompts.
KEY_SHAPES = (
    ("sk-", r"\bsk-[A-Za-z0-9_\-]{12,}"),  # OpenAI, Anthropic (sk-ant-…), OpenRouter, DeepSeek
    ("AIza", r"\bAIza[0-9A-Za-z_\-]{30,}"),  # Google
    ("gsk_", r"\bgsk_[A-Za-z0-9]{20,}"),  # Groq
    ("xai-", r"\bxai-[A-Za-z0-9]{20,}"),  # xAI
    ("AKIA", r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    ("earer", r"\b[Bb]earer\s+[A-Za-z0-9._~+/\-]{8,}=*"),  # any bearer token
)
_SENSITIVE_KEYS = frozenset(
    {
        "api_key",
        "apikey",
        "authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "password",
        "secret",
        "token",
        "access_token",
    }
)
_MIN_SECRET_LENGTH = 6


class Redactor:
    """Replaces known secret values and credential-shaped strings. Immutable after creation."""

    __slots__ = ("_needles", "_pattern")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        literals = sorted(
            {s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH}, key=len, reverse=True
        )
        alternatives = [re.escape(s) for s in literals] + [shape for _, shape in KEY_SHAPES]
        self._pattern = re.compile("|".join(f"(?:{a})" for a in alternatives))
        self._needles = tuple(needle for needle, _ in KEY_SHAPES) + tuple(literals)

    def text(self, value: str) -> str:
        """``value`` with every secret replaced by ``[REDACTED]``."""
        for needle in self._needles:
            if needle in value:
                return self._pattern.sub(MASK, value)
        return value

    def value(self, value: Any, max_chars: int | None = None) -> Any:
        """Redact strings inside ``value`` (nested dicts, lists and tuples included; list and
        tuple subclasses come back as plain lists and tuples). With ``max_chars`` every string
        (dict keys included) is cut to that length after redaction."""
        if isinstance(value, str):
            clean = self.text(value)
            return clean if max_chars is None else clean[:max_chars]
        if isinstance(value, dict):
            return {
                self.value(k, max_chars): MASK if _is_sensitive(k) else self.value(v, max_chars)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.value(v, max_chars) for v in value]
        if isinstance(value, tuple):  # a plain tuple: a named tuple's constructor differs
            return tuple(self.value(v, max_chars) for v in value)
        return value

    def __call__(
        self, logger: object, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        """A structlog processor: redact every value of the event dict."""
        for key, value in event.items():
            if key in _SENSITIVE_KEYS or (
                isinstance(key, str) and not key.islower() and key.lower() in _SENSITIVE_KEYS
            ):  # _is_sensitive, inlined: this runs for every field of every log line
                event[key] = MASK
            elif isinstance(value, str):
                event[key] = self.text(value)
            elif isinstance(value, dict | list | tuple):
                event[key] = self.value(value)
        return event


def sanitise_error(error: GatewayError, redactor: Redactor) -> None:
    """Clean, in place, every text an upstream may have put into ``error``.

    Every string attribute of the error instance (its ``message``, ``code``, ``param`` and any
    a subclass adds) and every string inside a dict, list or tuple attribute is redacted, then
    cut: the message to :data:`MAX_MESSAGE_CHARS`, everything else to :data:`MAX_FIELD_CHARS`.
    Class-level constants (``type``, ``default_code``) are the gateway's own and left alone.
    Redaction comes first, so a cut never leaves the start of a secret behind.
    """
    for name, value in vars(error).items():
        if isinstance(value, str):
            limit = MAX_MESSAGE_CHARS if name == "message" else MAX_FIELD_CHARS
            setattr(error, name, redactor.text(value)[:limit])
        elif isinstance(value, dict | list | tuple):
            setattr(error, name, redactor.value(value, MAX_FIELD_CHARS))
    error.args = (error.message,)


def _is_sensitive(key: object) -> bool:
    # Lower-case keys (nearly all) are looked up as they are, without a lower-cased copy.
    if not isinstance(key, str) or key.islower():
        return key in _SENSITIVE_KEYS
    return key.lower() in _SENSITIVE_KEYS
