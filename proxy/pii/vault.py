"""The placeholders of one request, and what each action puts in place of a value.

Placeholder formats (``LABEL`` is the entity's label: ``EMAIL``, ``PHONE``, ``CREDIT_CARD``,
``IBAN``, ``US_SSN``, ``IP_ADDRESS``, ``SECRET``, a custom entity's name in upper case, or the
name a client's per-request control used, like orq's ``EMAIL_ADDRESS``):

- ``mask``: ``<LABEL_N>``, numbered from 1 per label in the order values first occur in the
  request; the same value always gets the same placeholder within a request, and the reply's
  placeholders are restored to the values. Numbering depends only on the request's own text, so
  two customers' prompts of the same shape are masked to the same text (a cache key's input).
- ``redact``: ``<LABEL>``, for good.
- ``hash``: ``<LABEL_HASH_h>``, ``h`` the first 16 hex digits of HMAC-SHA256 under the
  operator's key: stable across requests and restarts, not reversible, not restored.

A :class:`Vault` lives for one request and is never shared: a placeholder means nothing outside
the request that made it.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from typing import Literal

Action = Literal["mask", "redact", "block", "hash"]

PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*)_([1-9][0-9]{0,5})>")
"""A mask placeholder as it appears in text (``<EMAIL_1>``)."""


class Vault:
    """Placeholders of one request: ``value -> <LABEL_N>`` and back.

    ``reserved`` are placeholder-shaped strings already present in the request's text (a user
    may paste ``<EMAIL_1>``); numbering skips them so that restoring never turns such a literal
    into a value.
    """

    __slots__ = ("_counts", "_placeholders", "_reserved", "_values")

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._reserved = frozenset(reserved)
        self._placeholders: dict[tuple[str, str], str] = {}
        self._values: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def __bool__(self) -> bool:
        """Whether any value was masked (so that a reply may need restoring)."""
        return bool(self._values)

    def placeholder(self, label: str, value: str) -> str:
        """The placeholder of ``value`` under ``label``, allocated on first use."""
        key = (label, value)
        known = self._placeholders.get(key)
        if known is not None:
            return known
        number = self._counts.get(label, 0)
        while True:
            number += 1
            placeholder = f"<{label}_{number}>"
            if placeholder not in self._reserved:
                break
        self._counts[label] = number
        self._placeholders[key] = placeholder
        self._values[placeholder] = value
        return placeholder

    def value(self, placeholder: str) -> str | None:
        """The value ``placeholder`` stands for, or None if this request did not make it."""
        return self._values.get(placeholder)


class Replacer:
    """What goes in place of a value, for each action (see the module docstring).

    ``hash_key`` is required for ``hash`` (the plugin refuses a config that hashes without one).
    """

    __slots__ = ("_hash_key",)

    def __init__(self, hash_key: bytes | None = None) -> None:
        self._hash_key = hash_key

    def __call__(self, action: Action, label: str, value: str, vault: Vault) -> str:
        """The replacement text of ``value``. ``block`` is not replaced (the request is
        refused before it is sent); it is redacted here for any text that is kept."""
        if action == "mask":
            return vault.placeholder(label, value)
        if action == "hash":
            assert self._hash_key is not None, "hash needs a key (checked at load)"
            digest = hmac.new(self._hash_key, value.encode("utf-8", "surrogatepass"), "sha256")
            return f"<{label}_HASH_{digest.hexdigest()[:16]}>"
        return f"<{label}>"
